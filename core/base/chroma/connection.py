"""The one connection to Chroma a process holds: the client, the one worker thread every
blocking call runs on, the embedded store's process lock, and the call path every read and
write goes through (`_run`), which maps Chroma's failures to the project's errors.

An embedded store is safe for one process only, so it is held under an exclusive lock;
separate processes share a store through a server (`chromaUrl`), or, while a daemon holds the
embedded store, through that daemon (`core.base.door.chroma_door`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import TYPE_CHECKING, Any, Self

import structlog

from core.base.chroma.client import (
    EMBEDDED_STORE_FILE,
    STORE_LOCK_NAME,
    AbsentStore,
    make_client,
)
from core.base.chroma.errors import (
    CollectionMissing,
    VectorStoreError,
    failure_text,
    peer_error,
)
from core.base.chroma.unchanged import delete_unchanged_on
from core.base.door.chroma_door import (
    DELETE_UNCHANGED,
    ENSURE_COLLECTION,
    DaemonStoreClient,
    DoorClosed,
)
from core.base.io.fence_deadline import FenceExpired, current_deadline, refuse_when_late
from core.base.io.locks import ProcessLock
from core.base.rules.errors import LockHeld
from core.base.rules.secrets import NO_SECRETS, Secrets

if TYPE_CHECKING:
    from core.base.config.config_settings import ChromaSettings

# The package's name: log lines name the adapter, not this module.
log = structlog.get_logger(__package__)


class ChromaConnection:
    """What every `VectorStore` call stands on: the client, its thread, the store lock, and
    the collection handles, opened and closed here."""

    def __init__(
        self,
        client: Any,
        executor: ThreadPoolExecutor,
        *,
        description: str,
        lock: ProcessLock | None = None,
        secrets: Secrets = NO_SECRETS,
    ) -> None:
        self._client = client
        self._executor = executor
        self._lock = lock
        #: The token's every form: what the store answers is scrubbed of it (`failure_text`).
        self._secrets = secrets
        self._collections: dict[str, Any] = {}
        self.description = description
        self.max_batch = int(client.get_max_batch_size())

    @classmethod
    async def open(cls, settings: ChromaSettings, *, via_daemon: bool = True,
                   dry_run: bool = False) -> Self:
        """Connect to the server at `chromaUrl`, or open the embedded store at `chromaPath`
        under its process lock, else through the daemon holding it unless `via_daemon` is
        false (a daemon never rides on another). Raises LockHeld or StoreUnavailable."""
        executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="chroma")
        lock: ProcessLock | None = None
        if settings.server_mode:
            description = f"Chroma server {settings.url_shown}"
        else:
            description = f"embedded Chroma store {settings.path}"
            try:
                lock = ProcessLock(
                    settings.path / STORE_LOCK_NAME,
                    purpose=description,
                    hint="an embedded store serves one process; run both daemons in one "
                    "process (python -m daemons) or use server mode (chromaUrl) for separate "
                    "processes",
                ).acquire(record=not dry_run)
            except LockHeld as held:
                executor.shutdown(wait=False)
                if not via_daemon:
                    raise
                return await cls._open_via_daemon(settings, description, held)
        token = settings.token
        secrets = Secrets.of_token(token.reveal()) if token is not None else NO_SECRETS
        try:
            client = await asyncio.get_running_loop().run_in_executor(
                executor, make_client, settings
            )
            return cls(client, executor, description=description, lock=lock, secrets=secrets)
        except BaseException as exc:
            executor.shutdown(wait=False)
            if lock is not None:
                lock.release()
            if isinstance(exc, Exception):
                # One line, the description names the store; a server or proxy refusing the
                # first request may have quoted it back, token and all (`failure_text`).
                reason = failure_text(exc, secrets)
                raise VectorStoreError(f"{description}: cannot open: {reason}") from exc
            raise

    @classmethod
    async def _open_via_daemon(cls, settings: ChromaSettings, description: str,
                               held: LockHeld) -> Self:
        """The store held by the daemon, through its door; LockHeld (one line) when no daemon
        answers. The description stays the store's, so messages read as when run alone."""
        executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="chroma")
        try:
            client = await asyncio.get_running_loop().run_in_executor(
                executor, partial(DaemonStoreClient.connect, settings.path,
                                  rebuild_error=peer_error))
        except DoorClosed as closed:
            executor.shutdown(wait=False)
            raise LockHeld(f"{held}; {closed}") from None
        except BaseException:
            executor.shutdown(wait=False)
            raise
        log.debug("vectors.via_daemon", store=description, daemonPid=client.daemon_pid)
        return cls(client, executor, description=description)

    async def call_for_peer(self, name: str, method: str, kwargs: Mapping[str, Any]) -> Any:
        """One collection call for a command beside this daemon, on this store's one Chroma
        thread: the raw result or error, for the command's VectorStore to map; a stale handle
        is dropped, so the command's retry reopens it."""
        if self._client is None:
            raise VectorStoreError(f"{self.description}: store is closed")
        import chromadb.errors

        def ensure() -> None:
            self._collections[name] = self._client.get_or_create_collection(
                name, embedding_function=None)

        call = ensure if method == ENSURE_COLLECTION else partial(
            self._call_on_collection, name, method, kwargs)
        try:
            return await asyncio.get_running_loop().run_in_executor(self._executor, call)
        except chromadb.errors.NotFoundError:
            self._collections.pop(name, None)
            raise

    @classmethod
    async def open_for_dry_run(cls, settings: ChromaSettings) -> Self:
        """The store as `open` gives it, except that an absent embedded store is not created:
        it reads as a store without collections, and refuses writes. What the Chroma client
        writes on opening an existing one is the one exception to "a dry run writes nothing"
        (docs/reliability.md, "Dry runs")."""
        if settings.server_mode or (settings.path / EMBEDDED_STORE_FILE).exists():
            return await cls.open(settings, dry_run=True)
        description = f"embedded Chroma store {settings.path} (not created yet)"
        executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="chroma")
        return cls(AbsentStore(description), executor, description=description)

    async def close(self) -> None:
        """Release the client, its thread and the store lock (idempotent)."""
        if self._client is None:
            return
        client, self._client = self._client, None
        try:
            await asyncio.get_running_loop().run_in_executor(self._executor, client.close)
        except Exception:
            log.warning("vectors.close_failed", store=self.description, exc_info=True)
        self._executor.shutdown(wait=True)
        if self._lock is not None:
            self._lock.release()

    async def _run(self, name: str, method: str, **kwargs: Any) -> Any:
        """Call `collection.<method>(**kwargs)` on the Chroma thread, mapping failures to the
        project's errors; a stale cached handle is refreshed once first."""
        if self._client is None:
            raise VectorStoreError(f"{self.description}: store is closed")
        import chromadb.errors

        loop = asyncio.get_running_loop()
        # A fenced delete is looked at once more on the Chroma thread, the last step before
        # its request is sent (`core.base.io.fence_deadline`).
        send_by = current_deadline() if method in ("delete", DELETE_UNCHANGED) else None
        if method == DELETE_UNCHANGED and not isinstance(self._client, DaemonStoreClient):
            # The compound reads before it deletes: its delete is looked at once more after
            # the read, so a pause during the read cannot let it leave late.
            kwargs = {**kwargs, "send_by": send_by, "action": f"{method} on {name!r}"}
        for attempt in (1, 2):
            call = partial(self._call_on_collection, name, method, kwargs)
            try:
                return await loop.run_in_executor(
                    self._executor, partial(_unless_late, send_by, f"{method} on {name!r}",
                                            call))
            except FenceExpired as exc:
                log.error("leadership.fenced", action=f"{method} on {name!r}", reason=str(exc),
                          message="this host no longer leads: nothing deleted")
                raise
            except CollectionMissing:
                raise
            except chromadb.errors.NotFoundError as exc:
                # A stale handle and a missing collection look alike; one retry tells them apart.
                stale = self._collections.pop(name, None) is not None
                if attempt == 2 or not stale:
                    failure_text(exc, self._secrets)  # the cause says no more than that
                    raise CollectionMissing(
                        f"collection {name!r} not found in {self.description}"
                    ) from exc
            except Exception as exc:
                raise VectorStoreError(f"{self.description}: {method} on {name!r} failed: "
                                       f"{failure_text(exc, self._secrets)}") from exc
        raise AssertionError("unreachable")  # pragma: no cover

    def _call_on_collection(self, name: str, method: str, kwargs: Mapping[str, Any]) -> Any:
        collection = self._collections.get(name)
        if collection is None:
            collection = self._client.get_collection(name, embedding_function=None)
            self._collections[name] = collection
        if method == DELETE_UNCHANGED and not isinstance(self._client, DaemonStoreClient):
            # On this store's one thread (see `ChromaWrites.delete_unchanged`).
            return delete_unchanged_on(collection, **kwargs)
        return getattr(collection, method)(**kwargs)


    async def ensure_collection(self, name: str) -> None:
        """Create the collection (no embedding function) if it does not exist."""
        if self._client is None:
            raise VectorStoreError(f"{self.description}: store is closed")
        loop = asyncio.get_running_loop()
        try:
            collection = await loop.run_in_executor(
                self._executor,
                lambda: self._client.get_or_create_collection(name, embedding_function=None),
            )
        except Exception as exc:
            raise VectorStoreError(f"{self.description}: create {name!r} failed: "
                                   f"{failure_text(exc, self._secrets)}") from exc
        self._collections[name] = collection


def _unless_late(send_by: float | None, action: str, call: Callable[[], Any]) -> Any:
    """`call()`, on the Chroma thread, unless the fencing deadline `send_by` has passed."""
    refuse_when_late(send_by, action)
    return call()
