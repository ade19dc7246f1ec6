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
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Self

from core.stores.chroma.connection import ChromaConnection

if TYPE_CHECKING:
    from core.rules.config import Settings


def memory_core_settings(settings: Settings) -> Settings:
    """The settings of the memory core's own connection: its server as `chromaUrl` (the rest,
    credentials included, as configured)."""
    return dataclasses.replace(settings, chroma_url=settings.memory_core_url,
                               memory_core_chroma_url="")


class MemoryCoreServer(ChromaConnection):
    """A `ChromaConnection` that sends the memory core's collections to the memory core's
    own server when it has one (`Settings.memory_core_apart`)."""

    #: The memory core's connection, when it has a server of its own; None otherwise.
    _memory_core: ChromaConnection | None = None
    #: The collections that live there (the memory and summary collections).
    _memory_core_names: frozenset[str] = frozenset()

    @classmethod
    async def open(cls, settings: Settings, *, via_daemon: bool = True) -> Self:
        """The knowledge base's store as `ChromaConnection.open` opens it, and, when the
        memory core has a server of its own, a connection to that server too (both or
        neither: a failure to reach the second closes the first)."""
        store = await super().open(settings, via_daemon=via_daemon)
        if not settings.memory_core_apart:
            return store
        try:
            memory_core = await ChromaConnection.open(memory_core_settings(settings))
        except BaseException:
            await store.close()
            raise
        store._memory_core = memory_core
        store._memory_core_names = settings.memory_core_collections
        # One chunking for every write, whichever server it goes to.
        store.max_batch = min(store.max_batch, memory_core.max_batch)
        return store

    def _server_of(self, name: str) -> ChromaConnection | None:
        """The memory core's connection when `name` lives there, else None (this one)."""
        if self._memory_core is not None and name in self._memory_core_names:
            return self._memory_core
        return None

    def description_of(self, name: str) -> str:
        """The store that holds collection `name`, as messages name it."""
        server = self._server_of(name)
        return self.description if server is None else server.description

    async def _run(self, name: str, method: str, **kwargs: Any) -> Any:
        server = self._server_of(name)
        if server is not None:
            return await server._run(name, method, **kwargs)
        return await super()._run(name, method, **kwargs)

    async def ensure_collection(self, name: str) -> None:
        """Create the collection (no embedding function) if it does not exist, on the server
        it lives on."""
        server = self._server_of(name)
        if server is not None:
            await server.ensure_collection(name)
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
