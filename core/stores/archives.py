"""Tombstone archives: every chunk is on disk, with the content it had, before it is deleted,
and a restore can only ever add back what is missing.

An archive is a JSON-lines file under `<dataDir>/tombstones/`, one per tenant per pass:

- line 1, the **header**: `{"format": 2, "kind": "header", "collection", "tenantId",
  "passId", "createdAt"}`;
- then one **chunk** line per archived row: `{"format": 2, "kind": "chunk", "collection",
  "tenantId", "passId", "archivedAt", "id", "metadata", "document", "embedding"}`.

Every line ends with `"sha256"`: the SHA-256 of the line's own bytes without that key (the
exact bytes written, so checking needs no re-serialization). A line cut short by a crash or
edited by hand fails its check and is named and skipped; the other lines still restore. The
checksum guards against accidents, not forgery: a forged line with a valid checksum is still
held to the rules below, which do not depend on it.

Each band's pages are written, flushed and fsynced (the file and, when new, its folder)
BEFORE its delete is sent. Embeddings are written as float32 (what Chroma stores) in their shortest
round-tripping form, so a restored chunk has bit for bit the embedding it was deleted with.

**Restore is preserve-live** (`restore_archive`): lines are checked against the header and
then against the store, a batch at a time. Absent ids are added back with Chroma `add`, which
leaves any id that exists untouched even if it appeared a moment after the check; an id that
exists under the archive's tenant is kept as it lives now (`keptLive`); an id that lives under
another tenant, a line of another collection, pass or tenant is refused with its reason.
Running a restore twice changes nothing the second time.

Format 1 archives (before headers and checksums) are still restored, with a warning: they are
the only copy of chunks deleted before the upgrade, and the rules that keep a restore from
harming live data (add-only, the archive's own tenant and the knowledge-base collection only)
do not need a checksum. Only edits to such a file cannot be detected.
"""

from __future__ import annotations

import asyncio
import hashlib
import math
import os
import re
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Final

import orjson
import structlog

from core.rules.errors import ConfigError
from core.stores.chroma import ChromaRow, CollectionMissing

if TYPE_CHECKING:
    from core.stores.chroma import ColumnPage, VectorStore

log = structlog.get_logger(__name__)

#: The format this version writes; `LEGACY_FORMAT` is still read.
ARCHIVE_FORMAT: Final = 2
LEGACY_FORMAT: Final = 1
ARCHIVE_SUFFIX: Final = ".jsonl"
KIND_HEADER: Final = "header"
KIND_CHUNK: Final = "chunk"
#: The metadata key that names a chunk's tenant (CONTRACT's knowledge-base fields).
TENANT_KEY: Final = "tenantId"
#: Lines checked and restored per batch: one `get` and one `add` per batch, and memory
#: bounded by a batch whatever the file's size.
RESTORE_BATCH_LINES: Final = 1_000

_UNSAFE_IN_NAME = re.compile(r"[^A-Za-z0-9._-]+")
_CHECKSUM_SUFFIX = re.compile(rb',"sha256":"([0-9a-f]{64})"\}\s*$')

LEGACY_WARNING: Final = (
    "format-1 archive (written before archives had headers and checksums): restored "
    "preserve-live, for its own tenant and the knowledge-base collection only, but an edited "
    "line cannot be detected"
)


class ArchiveError(ConfigError):
    """The archive named on the command line cannot be used at all (missing, not a file, no
    readable header, another collection's): exit 2, nothing restored."""


# --------------------------------------------------------------------------------------------
# Lines (pure)
# --------------------------------------------------------------------------------------------


def seal(record: Mapping[str, Any]) -> bytes:
    """One archive line (without its newline): `record` as compact JSON with its checksum
    appended as the last key. numpy arrays are written as lists. orjson writes NaN and infinity
    as `null`, so callers refuse them first (`chunk_lines` does)."""
    body = orjson.dumps(record, option=orjson.OPT_SERIALIZE_NUMPY)
    digest = hashlib.sha256(body).hexdigest()
    return body[:-1] + b',"sha256":"' + digest.encode("ascii") + b'"}'


def unseal(line: bytes) -> dict[str, Any]:
    """The record of a sealed line; ValueError naming what is wrong (torn, edited, not JSON)."""
    found = _CHECKSUM_SUFFIX.search(line)
    if found is None:
        raise ValueError("no checksum at the end of the line (torn, or not written by an archive)")
    body = line[: found.start()] + b"}"
    if hashlib.sha256(body).hexdigest() != found.group(1).decode("ascii"):
        raise ValueError("checksum mismatch (the line was changed after it was written)")
    return json_object(body)


def json_object(raw: bytes) -> dict[str, Any]:
    """A JSON object from bytes; ValueError naming what is wrong otherwise."""
    try:
        record = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise ValueError(f"not JSON ({exc})") from None
    if not isinstance(record, dict):
        raise ValueError("not a JSON object")
    return record


@dataclass(frozen=True, slots=True)
class ArchiveHeader:
    """Whose chunks an archive holds and which pass wrote it."""

    collection: str
    tenant_id: str
    pass_id: str
    created_at_ms: int
    format: int = ARCHIVE_FORMAT

    def record(self) -> dict[str, Any]:
        """The header line's record (before sealing)."""
        return {"format": self.format, "kind": KIND_HEADER, "collection": self.collection,
                "tenantId": self.tenant_id, "passId": self.pass_id,
                "createdAt": self.created_at_ms}


@dataclass(frozen=True, slots=True)
class ArchivedChunk:
    """One archived chunk: where it lived, which pass archived it, and the row itself."""

    collection: str
    tenant_id: str
    row: ChromaRow
    pass_id: str | None = None


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _float32_exact(embeddings: Any) -> Any:
    """The page's embeddings as float32 when that loses nothing (Chroma stores float32, so it
    always should), else as they are; refuses NaN and infinity."""
    import numpy as np

    array = np.asarray(embeddings)
    if not np.isfinite(array).all():
        raise ValueError("an embedding holds NaN or infinity; refusing to archive it")
    narrow = array.astype(np.float32)
    return narrow if np.array_equal(narrow, array) else array


def chunk_lines(
    page: ColumnPage, *, header: ArchiveHeader, archived_at_ms: int
) -> list[bytes]:
    """The sealed lines of a page of whole rows (pure). Refuses (ValueError) a row without an
    embedding or with a value JSON cannot hold exactly: restoring it would need an embedding
    model, or would not give back what was deleted, so such a row must not be deleted."""
    if len(page) and page.embeddings is None:
        raise ValueError(f"chunk {page.ids[0]!r} has no embedding; refusing to archive it")
    embeddings = _float32_exact(page.embeddings) if len(page) else ()
    lines = []
    for i, row_id in enumerate(page.ids):
        metadata = page.metadatas[i]
        bad = [k for k, v in metadata.items() if isinstance(v, float) and not math.isfinite(v)]
        if bad:
            raise ValueError(f"chunk {row_id!r}: metadata {bad[0]!r} is not a finite number")
        lines.append(seal({
            "format": ARCHIVE_FORMAT, "kind": KIND_CHUNK, "collection": header.collection,
            "tenantId": header.tenant_id, "passId": header.pass_id,
            "archivedAt": archived_at_ms, "id": row_id, "metadata": metadata,
            "document": page.documents[i], "embedding": embeddings[i],
        }))
    return lines


def _require_string(record: Mapping[str, Any], name: str) -> str:
    value = record.get(name)
    if not isinstance(value, str) or not value:
        raise ValueError(f"{name} must be a non-empty string")
    return value


def parse_header(record: Mapping[str, Any]) -> ArchiveHeader:
    """The header of a format-2 archive from its (unsealed) record; ValueError otherwise."""
    if record.get("format") != ARCHIVE_FORMAT or record.get("kind") != KIND_HEADER:
        raise ValueError("not an archive header")
    created = record.get("createdAt")
    if not isinstance(created, int) or isinstance(created, bool):
        raise ValueError("createdAt must be an integer")
    return ArchiveHeader(_require_string(record, "collection"),
                         _require_string(record, "tenantId"),
                         _require_string(record, "passId"), created)


def parse_chunk(record: Mapping[str, Any], *, expected_format: int) -> ArchivedChunk:
    """An archived chunk from an unsealed (format 2) or plain (format 1) record (pure);
    ValueError naming what is wrong otherwise."""
    found = record.get("format")
    if found != expected_format:
        raise ValueError(f"archive format {found!r} in a format-{expected_format} archive")
    if expected_format == ARCHIVE_FORMAT and record.get("kind") != KIND_CHUNK:
        raise ValueError(f"a {record.get('kind')!r} line where a chunk was expected")
    row_id = _require_string(record, "id")
    collection = _require_string(record, "collection")
    tenant = _require_string(record, "tenantId")
    embedding = record.get("embedding")
    if not isinstance(embedding, list) or not embedding or not all(map(_finite, embedding)):
        raise ValueError("embedding must be a non-empty list of finite numbers")
    metadata = record.get("metadata")
    if metadata is None:
        metadata = {}
    if not isinstance(metadata, dict):
        raise ValueError("metadata must be an object")
    document = record.get("document")
    if document is not None and not isinstance(document, str):
        raise ValueError("document must be a string or null")
    pass_id = record.get("passId") if expected_format == ARCHIVE_FORMAT else None
    return ArchivedChunk(collection, tenant,
                         ChromaRow(row_id, metadata, document, _as_stored(embedding)),
                         pass_id if isinstance(pass_id, str) else None)


def _as_stored(embedding: list[Any]) -> list[float]:
    """An embedding as Chroma will hold it: each number rounded to float32 (what Chroma
    stores) and given back as a Python float, so an archived row compares equal to the row
    Chroma returned before the delete and will return after the restore."""
    import numpy as np

    with np.errstate(over="ignore"):
        narrow = np.asarray(embedding, dtype=np.float64).astype(np.float32)
    if not np.isfinite(narrow).all():
        raise ValueError("embedding holds a number too large for float32")
    values: list[float] = narrow.astype(np.float64).tolist()
    return values


def refusal(chunk: ArchivedChunk, *, collection: str, tenant_id: str,
            pass_id: str | None) -> str | None:
    """Why a well-formed line does not belong in this restore (pure), or None when it does:
    another collection than the knowledge-base one, another tenant than the archive's, a
    metadata tenant that differs from the line's, a line copied in from another pass."""
    if chunk.collection != collection:
        return (f"collection {chunk.collection!r} is not the knowledge-base collection "
                f"{collection!r}")
    if chunk.tenant_id != tenant_id:
        return f"tenant {chunk.tenant_id!r} differs from the archive's tenant {tenant_id!r}"
    owner = chunk.row.metadata.get(TENANT_KEY)
    if owner != tenant_id:
        return f"metadata tenantId {owner!r} differs from the archive's tenant {tenant_id!r}"
    if pass_id is not None and chunk.pass_id != pass_id:
        return f"pass {chunk.pass_id!r} differs from the archive's pass {pass_id!r}"
    return None


def archive_file_name(*, collection: str, tenant_id: str, now_ms: int) -> str:
    """`<UTC time>-<collection>-<tenant>-<random>.jsonl`: sorts by time, names its contents,
    and never collides (two passes in one second, two tenants whose names sanitize alike)."""
    stamp = datetime.fromtimestamp(now_ms / 1000, tz=UTC).strftime("%Y%m%dT%H%M%S")
    tenant = _UNSAFE_IN_NAME.sub("_", tenant_id)[:64] or "_"
    return f"{stamp}Z-{collection}-{tenant}-{uuid.uuid4().hex[:8]}{ARCHIVE_SUFFIX}"


# --------------------------------------------------------------------------------------------
# Writing
# --------------------------------------------------------------------------------------------


def _fsync_directory(path: Path) -> None:
    """Make a new directory entry durable (a file fsync alone does not cover its name)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class TombstoneArchive:
    """An archive being written during one tenant's tombstoning.

    Pages go in one after another (`append`: written and flushed); `sync` makes everything
    appended so far durable and returns only then, so a caller syncs once before each delete
    request and deletes nothing that is not on disk. One fsync per delete rather than per page:
    the pages of a band are only worth protecting together, just before the band goes.
    """

    def __init__(self, path: Path, header: ArchiveHeader) -> None:
        self.path = path
        self.header = header
        #: Rows appended so far, and how many of them are durable.
        self.rows_written = 0
        self.rows_synced = 0

    @classmethod
    async def create(
        cls, directory: Path, *, collection: str, tenant_id: str, pass_id: str, now_ms: int
    ) -> TombstoneArchive:
        """Create a new archive holding only its header (exclusively), durably."""
        header = ArchiveHeader(collection, tenant_id, pass_id, now_ms)
        path = directory / archive_file_name(
            collection=collection, tenant_id=tenant_id, now_ms=now_ms
        )
        await asyncio.to_thread(cls._create_file, path, seal(header.record()))
        log.info("tombstones.archive_created", path=str(path))
        return cls(path, header)

    @staticmethod
    def _create_file(path: Path, header_line: bytes) -> None:
        created_directory = not path.parent.exists()
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("xb") as handle:
            handle.write(header_line + b"\n")
            handle.flush()
            os.fsync(handle.fileno())
        _fsync_directory(path.parent)
        if created_directory:
            _fsync_directory(path.parent.parent)

    async def append(self, page: ColumnPage, *, archived_at_ms: int) -> None:
        """Write a page of whole rows and flush it (durable only after `sync`); raises (and
        nothing may be deleted) when a row cannot be archived exactly or the disk refuses."""
        if not len(page):
            return
        await asyncio.to_thread(self._write, page, archived_at_ms)
        self.rows_written += len(page)

    def _write(self, page: ColumnPage, archived_at_ms: int) -> None:
        # Every line is encoded (and checked) before the first is written, so a row that
        # cannot be archived leaves the file as it was; lines go out one by one, never joined
        # into one more copy of the page.
        lines = chunk_lines(page, header=self.header, archived_at_ms=archived_at_ms)
        with self.path.open("ab") as handle:
            for line in lines:
                handle.write(line)
                handle.write(b"\n")

    async def sync(self) -> None:
        """Make every appended row durable (fsync); raises when the disk refuses."""
        if self.rows_synced == self.rows_written:
            return
        await asyncio.to_thread(self._fsync)
        self.rows_synced = self.rows_written

    def _fsync(self) -> None:
        with self.path.open("ab") as handle:
            os.fsync(handle.fileno())


# --------------------------------------------------------------------------------------------
# Restoring
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LineProblem:
    """A line that was not applied, and why."""

    line_number: int
    reason: str
    chunk_id: str | None = None

    def as_dict(self) -> dict[str, Any]:
        """The `--json` shape."""
        return {"line": self.line_number, "id": self.chunk_id, "reason": self.reason}


@dataclass(frozen=True, slots=True)
class RestoreResult:
    """What a restore did, line by line counted."""

    path: Path
    collection: str
    tenant_id: str | None
    format: int | None
    restored: int = 0
    kept_live: int = 0
    #: Well-formed lines that do not belong (another tenant, collection, pass, owner).
    refused: tuple[LineProblem, ...] = ()
    #: Lines that could not be read (torn, edited, not an archive line).
    unreadable: tuple[LineProblem, ...] = ()
    warnings: tuple[str, ...] = ()

    @property
    def clean(self) -> bool:
        """Every line was either restored or kept live."""
        return not self.refused and not self.unreadable

    def as_dict(self) -> dict[str, Any]:
        """The figures of `restore --json`."""
        return {
            "archive": str(self.path), "collection": self.collection,
            "tenantId": self.tenant_id, "format": self.format,
            "restored": self.restored, "keptLive": self.kept_live,
            "refused": len(self.refused), "unreadable": len(self.unreadable),
            "problems": [p.as_dict() for p in sorted((*self.unreadable, *self.refused),
                                                     key=lambda p: p.line_number)],
            "warnings": list(self.warnings),
        }


def ensure_archive_file(path: Path) -> None:
    """Raise ArchiveError unless `path` is an existing file (checked before opening Chroma,
    which takes seconds, so a mistyped path fails at once)."""
    if not path.is_file():
        raise ArchiveError(f"{path}: archive not found (or not a file)")


def _numbered_lines(handle: IO[bytes]) -> Iterator[tuple[int, bytes]]:
    """Non-blank lines (bytes, so a crash cutting a character in half spoils only that line)
    with their 1-based numbers."""
    for number, raw in enumerate(handle, start=1):
        if raw.strip():
            yield number, raw.rstrip(b"\r\n")


def _batches(lines: Iterator[tuple[int, bytes]]) -> Iterator[list[tuple[int, bytes]]]:
    batch: list[tuple[int, bytes]] = []
    for item in lines:
        batch.append(item)
        if len(batch) >= RESTORE_BATCH_LINES:
            yield batch
            batch = []
    if batch:
        yield batch


@dataclass(slots=True)
class _Restore:
    """A restore in progress: the archive's identity and the running counts."""

    collection: str
    format: int | None = None
    tenant_id: str | None = None
    pass_id: str | None = None
    restored: int = 0
    kept_live: int = 0
    refused: list[LineProblem] = field(default_factory=list)
    unreadable: list[LineProblem] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def read_first_line(self, path: Path, raw: bytes) -> bool:
        """Learn the archive's format from its first line; True when that line was a header
        (nothing more to do with it), False when it is a format-1 chunk line to restore."""
        try:
            header = parse_header(unseal(raw))
        except ValueError:
            header = None
        if header is not None:
            if header.collection != self.collection:
                raise ArchiveError(
                    f"{path}: an archive of collection {header.collection!r}, not of the "
                    f"knowledge-base collection {self.collection!r}; nothing restored")
            self.format, self.tenant_id, self.pass_id = (ARCHIVE_FORMAT, header.tenant_id,
                                                         header.pass_id)
            return True
        try:
            legacy = parse_chunk(json_object(raw), expected_format=LEGACY_FORMAT)
        except ValueError:
            raise ArchiveError(
                f"{path}:1: no readable archive header (a torn or edited header, or not a "
                "tombstone archive); nothing restored") from None
        self.format, self.tenant_id = LEGACY_FORMAT, legacy.tenant_id
        self.warnings.append(LEGACY_WARNING)
        log.warning("tombstones.legacy_archive", path=str(path), message=LEGACY_WARNING)
        return False

    def parse(self, number: int, raw: bytes) -> ArchivedChunk | None:
        """A line that may be applied, or None (recorded as unreadable or refused)."""
        try:
            record = unseal(raw) if self.format == ARCHIVE_FORMAT else json_object(raw)
            chunk = parse_chunk(record, expected_format=self.format or ARCHIVE_FORMAT)
        except ValueError as exc:
            self.unreadable.append(LineProblem(number, str(exc)))
            return None
        assert self.tenant_id is not None
        reason = refusal(chunk, collection=self.collection, tenant_id=self.tenant_id,
                         pass_id=self.pass_id)
        if reason is not None:
            self.refused.append(LineProblem(number, reason, chunk.row.id))
            return None
        return chunk

    async def apply(self, vectors: VectorStore, batch: list[tuple[int, ArchivedChunk]]) -> None:
        """Classify a batch against the store, then add only the absent ids."""
        if not batch:
            return
        try:
            live = await vectors.get_by_ids(self.collection, [c.row.id for _, c in batch])
        except CollectionMissing:
            live = []
        owner = {row.id: row.metadata.get(TENANT_KEY) for row in live}
        to_add: dict[str, ChromaRow] = {}
        for number, chunk in batch:
            row_id = chunk.row.id
            if row_id in owner and owner[row_id] != self.tenant_id:
                self.refused.append(LineProblem(
                    number, f"id lives under tenant {owner[row_id]!r} now", row_id))
            elif row_id in owner or row_id in to_add:
                # Live now (or restored by an earlier line of this archive): keep it as it is.
                self.kept_live += 1
            else:
                to_add[row_id] = chunk.row
        if to_add:
            await vectors.add(self.collection, list(to_add.values()))
            self.restored += len(to_add)

    def result(self, path: Path) -> RestoreResult:
        def in_file_order(problems: list[LineProblem]) -> tuple[LineProblem, ...]:
            return tuple(sorted(problems, key=lambda p: p.line_number))

        return RestoreResult(path, self.collection, self.tenant_id, self.format, self.restored,
                             self.kept_live, in_file_order(self.refused),
                             in_file_order(self.unreadable), tuple(self.warnings))


async def restore_archive(vectors: VectorStore, path: Path, *, collection: str) -> RestoreResult:
    """Put back the archived chunks of `path` that are absent now, into `collection` (the
    knowledge-base collection) only, for the archive's own tenant only; see the module's
    docstring for the rules. Raises ArchiveError when the file cannot be used at all; a bad
    line does not stop the others (it is returned with its number and reason).
    """
    ensure_archive_file(path)
    try:
        handle = path.open("rb")
    except OSError as exc:
        raise ArchiveError(f"{path}: cannot read archive: {exc.strerror or exc}") from exc
    state = _Restore(collection)
    with handle:
        batches = _batches(_numbered_lines(handle))
        first = True
        while (raw_batch := await asyncio.to_thread(next, batches, None)) is not None:
            chunks: list[tuple[int, ArchivedChunk]] = []
            for number, raw in raw_batch:
                if first:
                    first = False
                    if state.read_first_line(path, raw):
                        continue
                chunk = state.parse(number, raw)
                if chunk is not None:
                    chunks.append((number, chunk))
            await state.apply(vectors, chunks)
    if first:
        raise ArchiveError(f"{path}: empty archive; nothing restored")
    result = state.result(path)
    log.info("tombstones.restored", path=str(path), restored=result.restored,
             keptLive=result.kept_live, refused=len(result.refused),
             unreadable=len(result.unreadable))
    return result


def read_archived_chunks(path: Path) -> Iterator[tuple[ArchiveHeader | None, ArchivedChunk]]:
    """Every readable chunk line of an archive with the archive's header (None for format 1),
    for tests and audits; unreadable lines are skipped."""
    with path.open("rb") as handle:
        header: ArchiveHeader | None = None
        first = True
        for _number, raw in _numbered_lines(handle):
            try:
                if first:
                    first = False
                    try:
                        header = parse_header(unseal(raw))
                        continue
                    except ValueError:
                        pass
                record = unseal(raw) if header is not None else json_object(raw)
                yield header, parse_chunk(
                    record, expected_format=ARCHIVE_FORMAT if header else LEGACY_FORMAT)
            except ValueError:
                continue
