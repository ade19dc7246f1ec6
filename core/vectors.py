"""Chroma access: one client per process, every blocking call on one worker thread, every call
paged or chunked to the limits this Chroma has.

Facts this module is built around (chromadb 1.5.x, embedded): a `get` returning metadatas for
more than 32,766 rows fails with "too many SQL variables"; writes take at most
`get_max_batch_size()` rows (5,461 here); a delete by ids plus `where` is ~150x slower than by
ids alone. Collections are opened with no embedding function and telemetry off, so nothing can
download a model or phone home. An embedded store is safe for one process only, so it is held
under an exclusive lock; separate processes share a store through a server (`chromaUrl`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any, Literal, TypeVar
from urllib.parse import urlsplit

import structlog

from core.errors import KbError, StoreUnavailable
from core.locks import ProcessLock

if TYPE_CHECKING:
    from core.config import Settings

log = structlog.get_logger(__name__)

T = TypeVar("T")
Include = Literal["metadatas", "documents", "embeddings"]

#: Rows per page of a `where` scan. 2,000 keeps a 100,000-chunk scan's peak memory growth near
#: 30 MB; 5,000 is ~2.5x faster per row but grows the process by 70-135 MB (measured, see README
#: "Performance"). Well under the 32,766-row metadata limit either way.
SCAN_PAGE_ROWS = 2_000
#: Ids per `get(ids=...)`: one SQL variable each, far below the limit, large enough that a
#: 5,000-line drain batch needs one call.
IDS_PER_GET = 5_000
#: Session ids per `where sessionId $in [...]` lookup.
SESSIONS_PER_WHERE = 1_000
#: The lock file inside an embedded store folder.
STORE_LOCK_NAME = ".kb-daemons.lock"


class CollectionMissing(KbError):
    """The named collection does not exist in this store (back-fill reason `no-collection`)."""


class VectorStoreError(StoreUnavailable):
    """A Chroma call failed (server down, store error); the caller's work is retried later."""


@dataclass(frozen=True, slots=True)
class ChromaRow:
    """One Chroma row as plain data (embeddings as lists of floats, never numpy)."""

    id: str
    metadata: Mapping[str, Any] = field(default_factory=dict)
    document: str | None = None
    embedding: list[float] | None = None


def _rows_from(result: Mapping[str, Any]) -> list[ChromaRow]:
    ids = result.get("ids") or []
    metadatas = result.get("metadatas")
    documents = result.get("documents")
    embeddings = result.get("embeddings")
    rows = []
    for i, row_id in enumerate(ids):
        embedding = None
        if embeddings is not None and len(embeddings) > i and embeddings[i] is not None:
            embedding = _floats(embeddings[i])
        rows.append(
            ChromaRow(
                id=row_id,
                metadata=dict((metadatas[i] if metadatas else None) or {}),
                document=documents[i] if documents else None,
                embedding=embedding,
            )
        )
    return rows


def _floats(vector: Any) -> list[float]:
    """An embedding as a list of Python floats. Chroma hands back numpy rows; their `tolist`
    gives the same floats as `float()` on each element, in C: ~0.2 s less per 10,000
    384-number embeddings read for an archive (measured)."""
    dtype = getattr(vector, "dtype", None)
    if dtype is not None and dtype.kind == "f" and getattr(vector, "ndim", 0) == 1:
        values: list[float] = vector.tolist()
        return values
    return [float(x) for x in vector]


def _chunks(items: Sequence[T], size: int) -> list[Sequence[T]]:
    return [items[i : i + size] for i in range(0, len(items), size)]


class VectorStore:
    """The project's only door to Chroma."""

    def __init__(
        self,
        client: Any,
        executor: ThreadPoolExecutor,
        *,
        description: str,
        lock: ProcessLock | None = None,
    ) -> None:
        self._client = client
        self._executor = executor
        self._lock = lock
        self._collections: dict[str, Any] = {}
        self.description = description
        self.max_batch = int(client.get_max_batch_size())
        #: Chroma calls made, for tests and metrics that check batching.
        self.calls = 0

    @classmethod
    async def open(cls, settings: Settings) -> VectorStore:
        """Connect to the server at `chromaUrl`, or open the embedded store at `chromaPath`
        under its process lock. Raises LockHeld or StoreUnavailable (exit 1)."""
        executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="chroma")
        lock: ProcessLock | None = None
        if settings.server_mode:
            description = f"Chroma server {settings.chroma_url}"
        else:
            description = f"embedded Chroma store {settings.chroma_path}"
            lock = ProcessLock(
                settings.chroma_path / STORE_LOCK_NAME,
                purpose=description,
                hint="an embedded store serves one process; run both daemons in one process "
                "(python -m daemons) or use server mode (chromaUrl) for separate processes",
            ).acquire()
        try:
            client = await asyncio.get_running_loop().run_in_executor(
                executor, _make_client, settings
            )
            return cls(client, executor, description=description, lock=lock)
        except BaseException as exc:
            executor.shutdown(wait=False)
            if lock is not None:
                lock.release()
            if isinstance(exc, Exception):
                raise VectorStoreError(f"{description}: cannot open: {exc}") from exc
            raise

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
        """Call `collection.<method>(**kwargs)` on the Chroma thread; map failures to project
        errors. A cached collection handle that went stale (the collection was dropped and
        recreated by another program) is refreshed once before the failure is reported."""
        if self._client is None:
            raise VectorStoreError(f"{self.description}: store is closed")
        import chromadb.errors

        loop = asyncio.get_running_loop()
        for attempt in (1, 2):
            self.calls += 1
            try:
                return await loop.run_in_executor(
                    self._executor, partial(self._call_on_collection, name, method, kwargs)
                )
            except chromadb.errors.NotFoundError as exc:
                # A stale handle and a missing collection look alike; one retry tells them apart.
                stale = self._collections.pop(name, None) is not None
                if attempt == 2 or not stale:
                    raise CollectionMissing(
                        f"collection {name!r} not found in {self.description}"
                    ) from exc
            except Exception as exc:
                raise VectorStoreError(
                    f"{self.description}: {method} on {name!r} failed: {exc}"
                ) from exc
        raise AssertionError("unreachable")  # pragma: no cover

    def _call_on_collection(self, name: str, method: str, kwargs: Mapping[str, Any]) -> Any:
        collection = self._collections.get(name)
        if collection is None:
            collection = self._client.get_collection(name, embedding_function=None)
            self._collections[name] = collection
        return getattr(collection, method)(**kwargs)

    async def count(self, name: str) -> int:
        """Rows in a collection."""
        return int(await self._run(name, "count"))

    async def get_by_ids(
        self, name: str, ids: Sequence[str], *, include: Sequence[Include] = ("metadatas",)
    ) -> list[ChromaRow]:
        """The rows with these ids that exist, in chunks of IDS_PER_GET."""
        rows: list[ChromaRow] = []
        for chunk in _chunks(list(dict.fromkeys(ids)), IDS_PER_GET):
            result = await self._run(name, "get", ids=list(chunk), include=list(include))
            rows.extend(_rows_from(result))
        return rows

    async def scan(
        self,
        name: str,
        *,
        where: Mapping[str, Any] | None = None,
        include: Sequence[Include] = ("metadatas",),
        page_rows: int = SCAN_PAGE_ROWS,
    ) -> AsyncIterator[list[ChromaRow]]:
        """Page through every row matching `where`, by offset.

        Only for sets nobody is deleting from during the scan: an offset page over a shrinking
        set skips rows. Deleting callers use `first_page` repeatedly instead.
        """
        offset = 0
        while True:
            result = await self._run(
                name,
                "get",
                where=dict(where) if where else None,
                include=list(include),
                limit=page_rows,
                offset=offset,
            )
            rows = _rows_from(result)
            if rows:
                yield rows
            if len(rows) < page_rows:
                return
            offset += len(rows)

    async def first_page(
        self,
        name: str,
        *,
        where: Mapping[str, Any],
        include: Sequence[Include] = ("metadatas",),
        page_rows: int = SCAN_PAGE_ROWS,
    ) -> list[ChromaRow]:
        """The first `page_rows` rows matching `where` (no offset: safe while deleting)."""
        result = await self._run(
            name, "get", where=dict(where), include=list(include), limit=page_rows
        )
        return _rows_from(result)

    async def get_where_in(
        self,
        name: str,
        key: str,
        values: Sequence[str],
        *,
        include: Sequence[Include] = ("metadatas",),
    ) -> list[ChromaRow]:
        """Every row whose metadata `key` is one of `values` (chunked `$in`, paged)."""
        rows: list[ChromaRow] = []
        for chunk in _chunks(list(dict.fromkeys(values)), SESSIONS_PER_WHERE):
            where = {key: {"$in": list(chunk)}} if len(chunk) > 1 else {key: chunk[0]}
            async for page in self.scan(name, where=where, include=include):
                rows.extend(page)
        return rows

    async def delete_ids(self, name: str, ids: Sequence[str]) -> int:
        """Delete rows by id only (never with `where`: ~150x slower), chunked to the batch limit.

        Returns how many ids were sent in chunks that succeeded; raises on the first failure
        (the caller records what actually went).
        """
        sent = 0
        for chunk in _chunks(list(ids), self.max_batch):
            await self._run(name, "delete", ids=list(chunk))
            sent += len(chunk)
        return sent

    async def upsert(self, name: str, rows: Sequence[ChromaRow], *, create: bool = False) -> None:
        """Write rows (id, embedding, metadata, document) in chunks of the batch limit; with
        `create`, make the collection first when missing (restore, demo, tests)."""
        if create:
            await self.ensure_collection(name)
        for chunk in _chunks(list(rows), self.max_batch):
            await self._run(
                name,
                "upsert",
                ids=[r.id for r in chunk],
                embeddings=[r.embedding for r in chunk]
                if all(r.embedding is not None for r in chunk) else None,
                metadatas=[dict(r.metadata) or None for r in chunk],
                documents=[r.document for r in chunk]
                if all(r.document is not None for r in chunk) else None,
            )

    async def ensure_collection(self, name: str) -> None:
        """Create the collection (no embedding function) if it does not exist."""
        if self._client is None:
            raise VectorStoreError(f"{self.description}: store is closed")
        loop = asyncio.get_running_loop()
        self.calls += 1
        try:
            collection = await loop.run_in_executor(
                self._executor,
                lambda: self._client.get_or_create_collection(name, embedding_function=None),
            )
        except Exception as exc:
            raise VectorStoreError(f"{self.description}: create {name!r} failed: {exc}") from exc
        self._collections[name] = collection


def _make_client(settings: Settings) -> Any:
    """Build the chromadb client; imported lazily because `import chromadb` costs seconds that
    commands such as `enqueue` and `status` should not pay."""
    started = time.monotonic()
    import chromadb
    from chromadb.config import Settings as ChromaSettings

    chroma_settings = ChromaSettings(anonymized_telemetry=False, allow_reset=False)
    if settings.server_mode:
        parts = urlsplit(settings.chroma_url)
        client = chromadb.HttpClient(
            host=parts.hostname or "127.0.0.1",
            port=parts.port or (443 if parts.scheme == "https" else 8000),
            ssl=parts.scheme == "https",
            settings=chroma_settings,
        )
    else:
        settings.chroma_path.mkdir(parents=True, exist_ok=True)
        client = chromadb.PersistentClient(path=str(settings.chroma_path), settings=chroma_settings)
    log.debug("vectors.client_opened", seconds=round(time.monotonic() - started, 3))
    return client
