"""Chroma access: one client per process, every blocking call on one worker thread, every call
paged or chunked to the limits this Chroma has.

Facts this module is built around, about chromadb 1.5.9 (embedded and `chroma run` alike
unless said otherwise; timings in docs/performance.md, "Notes moved from the code"):

- a `get` returning metadatas for more than 32,766 rows fails with "too many SQL variables";
  an ids-only `get` has no such limit (100,000 ids in one call); writes take at most
  `get_max_batch_size()` rows (5,461 here); a `$in` list of 50,000 values fails, 10,000 works;
- `delete(where=...)` is one request (one HTTP POST in server mode, one binding call embedded)
  evaluated by the store when it runs, and returns how many rows it removed; with `limit` it
  removes at most that many of the matching rows. `delete(ids=..., where=...)` costs per id
  whatever the `where`, many times a delete by ids alone, so it is never used;
- a numeric `$lt`/`$lte`/`$gt` never matches a row whose key is missing, a string or a bool
  (a bool operand is refused); an integer value is compared with a fractional operand
  truncated toward zero (`$lte 2.5` matches int 2, `$lt 1000.5` does not match int 1000);
  floats compare exactly; `$ne`/`$nin` DO match rows without the key, so they are never used;
- `add` of an id that exists leaves that row untouched (no error); a batch mixing existing and
  absent ids adds the absent ones only, and returns nothing to say which were which;
- embeddings come back as a float64 numpy array holding float32 values (Chroma stores float32).

Collections are opened with no embedding function and telemetry off, so nothing can download a
model or phone home. An embedded store is safe for one process only, so it is held under an
exclusive lock; separate processes share a store through a server (`chromaUrl`), or, while a
daemon holds the embedded store, through that daemon (`core.stores.chroma_door`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import TYPE_CHECKING, Any, Literal, TypeVar

import structlog

from core.rules.chroma_server import auth_header
from core.rules.errors import KbError, LockHeld, StoreUnavailable
from core.rules.rows import ChromaRow, ColumnPage
from core.stores.chroma_door import ENSURE_COLLECTION, DaemonStoreClient, DoorClosed
from core.stores.locks import ProcessLock

if TYPE_CHECKING:
    from core.rules.config import Settings

log = structlog.get_logger(__name__)

T = TypeVar("T")
Include = Literal["metadatas", "documents", "embeddings"]

#: Rows per page of a `where` scan: bounds what one page holds in Chroma's conversion buffers
#: (the trade of time for memory is in docs/performance.md, "Notes moved from the code").
#: Well under the 32,766-row metadata limit.
SCAN_PAGE_ROWS = 2_000
#: Ids per `get(ids=...)`: one SQL variable each, far below the limit, large enough that a
#: 5,000-line drain batch needs one call.
IDS_PER_GET = 5_000
#: Session ids per `where sessionId $in [...]` lookup.
SESSIONS_PER_WHERE = 1_000
#: The lock file inside an embedded store folder.
STORE_LOCK_NAME = ".kb-daemons.lock"
#: The file an embedded store holds once Chroma has opened it.
EMBEDDED_STORE_FILE = "chroma.sqlite3"


class CollectionMissing(KbError):
    """The named collection does not exist in this store (back-fill reason `no-collection`)."""


class VectorStoreError(StoreUnavailable):
    """A Chroma call failed (server down, store error); the caller's work is retried later."""


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
    gives the same floats as `float()` on each element, converted in C rather than one Python
    call per number."""
    dtype = getattr(vector, "dtype", None)
    if dtype is not None and dtype.kind == "f" and getattr(vector, "ndim", 0) == 1:
        values: list[float] = vector.tolist()
        return values
    return [float(x) for x in vector]


def column_page(result: Mapping[str, Any]) -> ColumnPage:
    """From a `get` result; missing columns become empty values of the right length."""
    ids = list(result.get("ids") or [])
    metadatas = result.get("metadatas") or [None] * len(ids)
    documents = result.get("documents") or [None] * len(ids)
    embeddings = result.get("embeddings")
    return ColumnPage(ids, [dict(m or {}) for m in metadatas], list(documents),
                      embeddings if embeddings is not None and len(embeddings) else None)


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

    @classmethod
    async def open(cls, settings: Settings, *, via_daemon: bool = True) -> VectorStore:
        """Connect to the server at `chromaUrl`, or open the embedded store at `chromaPath`
        under its process lock. When a running daemon holds that lock, the store is reached
        through the daemon (`core.stores.chroma_door`) unless `via_daemon` is false (a
        daemon never rides on another one). Raises LockHeld or StoreUnavailable (exit 1)."""
        executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="chroma")
        lock: ProcessLock | None = None
        if settings.server_mode:
            description = f"Chroma server {settings.chroma_url_shown}"
        else:
            description = f"embedded Chroma store {settings.chroma_path}"
            try:
                lock = ProcessLock(
                    settings.chroma_path / STORE_LOCK_NAME,
                    purpose=description,
                    hint="an embedded store serves one process; run both daemons in one "
                    "process (python -m daemons) or use server mode (chromaUrl) for separate "
                    "processes",
                ).acquire()
            except LockHeld as held:
                executor.shutdown(wait=False)
                if not via_daemon:
                    raise
                return await cls._open_via_daemon(settings, description, held)
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
                # One line (the client's messages can span several), the description names
                # the store; the client never puts the token in its messages.
                reason = " ".join(str(exc).split()) or type(exc).__name__
                raise VectorStoreError(f"{description}: cannot open: {reason}") from exc
            raise

    @classmethod
    async def _open_via_daemon(cls, settings: Settings, description: str,
                               held: LockHeld) -> VectorStore:
        """The store held by the daemon, through its door; LockHeld (one line) when no daemon
        answers. The description stays the store's, so messages read as when run alone."""
        executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="chroma")
        try:
            client = await asyncio.get_running_loop().run_in_executor(
                executor, partial(DaemonStoreClient.connect, settings.chroma_path,
                                  rebuild_error=_peer_error))
        except DoorClosed as closed:
            executor.shutdown(wait=False)
            raise LockHeld(f"{held}; {closed}") from None
        except BaseException:
            executor.shutdown(wait=False)
            raise
        log.debug("vectors.via_daemon", store=description, daemonPid=client.daemon_pid)
        return cls(client, executor, description=description)

    async def call_for_peer(self, name: str, method: str, kwargs: Mapping[str, Any]) -> Any:
        """One collection call for a command beside this daemon (`core.runtime.store_door`),
        on this store's one Chroma thread, so it is serialized with the daemon's own calls.
        The raw result or the raw error, which the command's own VectorStore maps exactly as
        it would here; a handle that went stale is dropped, so the command's retry reopens
        it. ENSURE_COLLECTION creates a missing collection."""
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
    async def open_for_dry_run(cls, settings: Settings) -> VectorStore:
        """The store as `open` gives it, except that an embedded store that does not exist is
        not created (a dry run creates nothing: no folder, no lock file, no database): it
        reads as a store without collections, and any write is refused."""
        if settings.server_mode or (settings.chroma_path / EMBEDDED_STORE_FILE).exists():
            return await cls.open(settings)
        description = f"embedded Chroma store {settings.chroma_path} (not created yet)"
        executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="chroma")
        return cls(_AbsentStore(description), executor, description=description)

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
            try:
                return await loop.run_in_executor(
                    self._executor, partial(self._call_on_collection, name, method, kwargs)
                )
            except CollectionMissing:
                raise
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
        first_page_rows: int | None = None,
    ) -> AsyncIterator[list[ChromaRow]]:
        """Page through every row matching `where`, by offset (the first page of
        `first_page_rows` when given, for a caller that may not need more).

        Only for sets nobody is deleting from during the scan: an offset page over a shrinking
        set skips rows (deleting callers read what they delete with `ids_where`).
        """
        offset = 0
        limit = first_page_rows or page_rows
        while True:
            result = await self._run(
                name,
                "get",
                where=dict(where) if where else None,
                include=list(include),
                limit=limit,
                offset=offset,
            )
            rows = _rows_from(result)
            if rows:
                yield rows
            if len(rows) < limit:
                return
            offset += len(rows)
            limit = page_rows

    async def metadata_pages(
        self, name: str, *, where: Mapping[str, Any] | None = None,
        page_rows: int = SCAN_PAGE_ROWS,
    ) -> AsyncIterator[ColumnPage]:
        """`scan` for a reader of many rows that keeps few of them: ids and metadatas column
        by column as Chroma returns them (no per-row object is built, no metadata copied),
        by offset, under the same rule (nobody deleting from the set meanwhile)."""
        offset = 0
        while True:
            result = await self._run(name, "get", where=dict(where) if where else None,
                                     include=["metadatas"], limit=page_rows, offset=offset)
            ids = list(result.get("ids") or [])
            if ids:
                yield ColumnPage(ids, list(result.get("metadatas") or [{}] * len(ids)),
                                 [None] * len(ids), None)
            if len(ids) < page_rows:
                return
            offset += len(ids)

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

    async def get_page(
        self,
        name: str,
        *,
        where: Mapping[str, Any] | None = None,
        ids: Sequence[str] | None = None,
        limit: int | None = None,
        offset: int = 0,
    ) -> ColumnPage:
        """Whole rows (metadatas, documents, embeddings) matching `where`, or with these `ids`
        (at most IDS_PER_GET), column by column as Chroma returns them (see `ColumnPage`).
        One `get`: a snapshot of the store at that moment."""
        if (where is None) == (ids is None):
            raise ValueError("get_page takes where or ids")
        kwargs: dict[str, Any] = {"include": ["metadatas", "documents", "embeddings"]}
        if where is not None:
            kwargs.update(where=dict(where), limit=limit, offset=offset)
        else:
            assert ids is not None
            if len(ids) > IDS_PER_GET:
                raise ValueError(f"get_page takes at most {IDS_PER_GET} ids")
            kwargs["ids"] = list(dict.fromkeys(ids))
        return column_page(await self._run(name, "get", **kwargs))

    async def ids_where(self, name: str, *, where: Mapping[str, Any],
                        ids: Sequence[str] | None = None) -> list[str]:
        """Every id matching `where` (and among `ids` when given), in ONE ids-only `get` (no
        paging, so no row can slip between pages while others write; ids-only reads have no
        SQL-variable limit)."""
        kwargs: dict[str, Any] = {"ids": list(ids)} if ids else {}
        result = await self._run(name, "get", where=dict(where), include=[], **kwargs)
        return list(result.get("ids") or [])

    async def delete_where(
        self, name: str, *, where: Mapping[str, Any], limit: int | None = None,
        ids: Sequence[str] | None = None,
    ) -> int:
        """Delete the rows matching `where` (at most `limit` of them) in one request, and
        return how many went.

        The store evaluates `where` when the request runs, so a row changed so that it no
        longer matches before then is not deleted. Which rows a `limit` keeps is the store's
        choice: callers must treat every matching row as possibly deleted.
        """
        kwargs: dict[str, Any] = {"where": dict(where)}
        if ids:  # only these ids, and of them only those `where` matches (Chroma ANDs them)
            kwargs["ids"] = list(ids)
        if limit is not None:
            kwargs["limit"] = limit
        result = await self._run(name, "delete", **kwargs)
        deleted = result.get("deleted") if isinstance(result, Mapping) else None
        if not isinstance(deleted, int):
            raise VectorStoreError(
                f"{self.description}: delete on {name!r} did not say how many rows went"
            )
        return deleted

    async def add(self, name: str, rows: Sequence[ChromaRow]) -> None:
        """Insert rows whose ids are absent, leaving every existing id's row untouched (Chroma
        `add`, checked on 1.5.9: an existing id is skipped silently, the absent ids of the same
        batch are added). Rows need embeddings; chunked to the batch limit."""
        await self.ensure_collection(name)
        for chunk in _chunks(list(rows), self.max_batch):
            if any(r.embedding is None for r in chunk):
                raise ValueError("add needs an embedding for every row")
            await self._run(
                name,
                "add",
                ids=[r.id for r in chunk],
                embeddings=[r.embedding for r in chunk],
                metadatas=[dict(r.metadata) or None for r in chunk],
                documents=[r.document for r in chunk],
            )

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
        try:
            collection = await loop.run_in_executor(
                self._executor,
                lambda: self._client.get_or_create_collection(name, embedding_function=None),
            )
        except Exception as exc:
            raise VectorStoreError(f"{self.description}: create {name!r} failed: {exc}") from exc
        self._collections[name] = collection


class _AbsentStore:
    """The client of an embedded store that does not exist, for a dry run: every collection
    is missing, and creating one is refused (nothing may be created)."""

    def __init__(self, description: str) -> None:
        self.description = description

    def get_max_batch_size(self) -> int:
        return 1

    def get_collection(self, name: str, **_: Any) -> Any:
        raise CollectionMissing(f"collection {name!r} not found in {self.description}")

    def get_or_create_collection(self, name: str, **_: Any) -> Any:
        raise VectorStoreError(f"{self.description}: a dry run creates nothing ({name!r})")

    def close(self) -> None:
        """Nothing to release."""


def refused_for_its_data(error: VectorStoreError) -> bool:
    """Whether Chroma refused the request for what it asked (a 400/413 ChromaError: an invalid
    argument, a duplicate id, a batch too big), or the client did before sending it (a
    ValueError or TypeError). A server error, a rate limit, a refused connection, a timeout
    is an outage."""
    import chromadb.errors

    cause = error.__cause__
    if isinstance(cause, chromadb.errors.ChromaError):
        return cause.code() in (400, 413)
    return isinstance(cause, (ValueError, TypeError))


def _peer_error(classes: list[tuple[str, str]], message: str) -> Exception:
    """A store error raised in the daemon, rebuilt for the command beside it: the same Chroma
    error class (or ValueError/TypeError) with the same text, so `_run` and
    `refused_for_its_data` judge it as they would the original; anything else is an outage."""
    import chromadb.errors

    for module, name in classes:
        if module == "builtins" and name in ("ValueError", "TypeError"):
            return ValueError(message) if name == "ValueError" else TypeError(message)
        if module == chromadb.errors.__name__:
            kind = getattr(chromadb.errors, name, None)
            if isinstance(kind, type) and issubclass(kind, chromadb.errors.ChromaError):
                return kind(message)
    return RuntimeError(message)


def _make_client(settings: Settings) -> Any:
    """Build the chromadb client; imported lazily because `import chromadb` costs seconds that
    commands such as `enqueue` and `status` should not pay."""
    started = time.monotonic()
    import chromadb
    from chromadb.config import DEFAULT_DATABASE, DEFAULT_TENANT
    from chromadb.config import Settings as ChromaSettings

    tenant = settings.chroma_tenant or DEFAULT_TENANT
    database = settings.chroma_database or DEFAULT_DATABASE
    server = settings.chroma_server
    if server is not None:
        ca_file = settings.chroma_ca_file
        chroma_settings = ChromaSettings(
            anonymized_telemetry=False, allow_reset=False,
            # None keeps httpx's default: certificates verified against the system's CAs.
            chroma_server_ssl_verify=str(ca_file) if ca_file is not None and server.tls
            else None)
        token = settings.chroma_token
        # The client takes a full URL as its host (a path prefix included) and then ignores
        # `port`; without a port in the URL, the scheme's default applies.
        client = chromadb.HttpClient(
            host=server.url,
            port=server.effective_port,
            ssl=server.tls,
            headers=auth_header(settings.chroma_auth_header, token.reveal())
            if token is not None else None,
            settings=chroma_settings,
            tenant=tenant,
            database=database,
        )
    else:
        chroma_settings = ChromaSettings(anonymized_telemetry=False, allow_reset=False)
        settings.chroma_path.mkdir(parents=True, exist_ok=True)
        client = chromadb.PersistentClient(path=str(settings.chroma_path),
                                           settings=chroma_settings, tenant=tenant,
                                           database=database)
    log.debug("vectors.client_opened", seconds=round(time.monotonic() - started, 3))
    return client
