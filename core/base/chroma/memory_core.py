"""The memory core on a server of its own (`memoryCoreChromaUrl`): the memory and summary
collections are reached on that server, every other collection (the knowledge base) on
`chromaUrl`'s, through one `VectorStore`.

This is the original's older layout (knowledge base on `:8000`, memory core on `:8001`, each
its own `chroma run`). Each call goes to the server of the collection it names, decided by the
collection's name alone, so a collection is only ever read, written or created on its own
server: the knowledge base's server never gets a memory collection, nor the memory server a
knowledge-base one. Both servers share the token, header, CA bundle, tenant and database
settings (the original reaches both alike). Without `memoryCoreChromaUrl` (or with it equal
to `chromaUrl`) there is one connection and nothing here runs.

The memory core's connection opens at the first call that needs it, not with the store: a
reconcile pass, which reads only the knowledge base, is not stopped by a memory server that is
down, and a drain tick that needs it fails on it as on any outage (exit 1, nothing lost; the
next call tries again).
"""

from __future__ import annotations

import asyncio
import dataclasses
from typing import TYPE_CHECKING, Any, Self

from core.base.chroma.connection import ChromaConnection
from core.base.chroma.errors import VectorStoreError

if TYPE_CHECKING:
    from core.base.config.config_settings import ChromaSettings


def memory_core_settings(settings: ChromaSettings) -> ChromaSettings:
    """The settings of the memory core's own connection: its server as `chromaUrl` (the rest,
    credentials included, as configured)."""
    return dataclasses.replace(settings, url=settings.memory_core_url,
                               memory_core_chroma_url="")


class MemoryCoreServer(ChromaConnection):
    """A `ChromaConnection` that sends the memory core's collections to the memory core's
    own server when it has one (`ChromaSettings.memory_core_apart`)."""

    #: The settings of the memory core's own server; None when it has none (one store).
    _memory_core_settings: ChromaSettings | None = None
    #: The collections that live there (the memory and summary collections).
    _memory_core_names: frozenset[str] = frozenset()
    #: Its connection, once a call has needed it.
    _memory_core: ChromaConnection | None = None
    _memory_core_opening: asyncio.Lock | None = None

    @classmethod
    async def open(cls, settings: ChromaSettings, *, via_daemon: bool = True,
                   dry_run: bool = False) -> Self:
        """The knowledge base's store as `ChromaConnection.open` opens it, knowing where the
        memory core's collections are when they have a server of their own."""
        store = await super().open(settings, via_daemon=via_daemon, dry_run=dry_run)
        if settings.memory_core_apart:
            store._memory_core_settings = memory_core_settings(settings)
            store._memory_core_names = settings.memory_core_collections
            store._memory_core_opening = asyncio.Lock()
        return store

    def _lives_apart(self, name: str) -> bool:
        return self._memory_core_settings is not None and name in self._memory_core_names

    async def _memory_core_connection(self) -> ChromaConnection:
        """The memory core's connection, opened now if no call has opened it yet (once, when
        calls race); raises StoreUnavailable naming its server when it cannot be reached."""
        assert self._memory_core_settings is not None and self._memory_core_opening is not None
        if self._client is None:  # closed: never reopened behind the caller's back
            raise VectorStoreError(f"{self.description}: store is closed")
        async with self._memory_core_opening:
            if self._memory_core is None:
                self._memory_core = await ChromaConnection.open(self._memory_core_settings)
                # Writes are chunked to the smaller batch limit of the two servers from here on
                # (only the demo and tests write memory rows; both are `chroma run` alike).
                self.max_batch = min(self.max_batch, self._memory_core.max_batch)
            return self._memory_core

    def description_of(self, name: str) -> str:
        """The store that holds collection `name`, as messages name it."""
        if self._lives_apart(name):
            assert self._memory_core_settings is not None
            return f"Chroma server {self._memory_core_settings.url_shown}"
        return self.description

    async def _run(self, name: str, method: str, **kwargs: Any) -> Any:
        if self._lives_apart(name):
            server = await self._memory_core_connection()
            return await server._run(name, method, **kwargs)
        return await super()._run(name, method, **kwargs)

    async def ensure_collection(self, name: str) -> None:
        """Create the collection (no embedding function) if it does not exist, on the server
        it lives on."""
        if self._lives_apart(name):
            await (await self._memory_core_connection()).ensure_collection(name)
            return
        await super().ensure_collection(name)

    async def close(self) -> None:
        """Release both connections (idempotent), the memory core's first."""
        memory_core, self._memory_core = self._memory_core, None
        try:
            if memory_core is not None:
                await memory_core.close()
        finally:
            await super().close()
