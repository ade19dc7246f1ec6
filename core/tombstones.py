"""Tombstone archives: every chunk is on disk before it is deleted, and can be put back.

An archive is a JSON-lines file under `<dataDir>/tombstones/`, one per tenant per pass. Each
line is self-contained (collection, tenant, id, embedding, metadata, document), so a line cut
short by a crash costs that line only, and a restore needs nothing but the file. Each batch is
written, flushed and fsynced (and the folder fsynced when the file is new) BEFORE its delete is
sent: after a power cut, whatever Chroma lost is in the archive.

Restoring upserts the rows back in batches: running it twice changes nothing the second time.
Embeddings round-trip exactly (Chroma stores float32; JSON keeps the shortest repr of each
value, which parses back to the same float), so a restored chunk is the deleted chunk.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import re
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import structlog

from core.errors import ConfigError
from core.vectors import ChromaRow

if TYPE_CHECKING:
    from core.vectors import VectorStore

log = structlog.get_logger(__name__)

#: Version of the line format; a restore refuses lines of a format it does not know.
ARCHIVE_FORMAT = 1
ARCHIVE_SUFFIX = ".jsonl"
#: Lines parsed per read while restoring: bounds memory by a batch, whatever the file's size.
RESTORE_READ_LINES = 1_000

_UNSAFE_IN_NAME = re.compile(r"[^A-Za-z0-9._-]+")


class ArchiveError(ConfigError):
    """The archive named on the command line cannot be used (missing, not a file): exit 2."""


@dataclass(frozen=True, slots=True)
class ArchivedChunk:
    """One archived chunk: where it lived and the row itself."""

    collection: str
    tenant_id: str
    row: ChromaRow


@dataclass(frozen=True, slots=True)
class BadLine:
    """A line of an archive that could not be restored, and why."""

    line_number: int
    reason: str


@dataclass(frozen=True, slots=True)
class RestoreResult:
    """What a restore did: rows put back (by collection) and the lines it could not use."""

    path: Path
    restored: int
    by_collection: Mapping[str, int] = field(default_factory=dict)
    bad_lines: tuple[BadLine, ...] = ()


def archive_line(chunk: ArchivedChunk, *, archived_at_ms: int) -> str:
    """One archive line (pure). Fails on a row without an embedding: restoring it would need
    an embedding model, which these daemons never run, so such a row must not be deleted."""
    row = chunk.row
    if row.embedding is None:
        raise ValueError(f"chunk {row.id!r} has no embedding; refusing to archive it")
    record = {
        "format": ARCHIVE_FORMAT,
        "collection": chunk.collection,
        "tenantId": chunk.tenant_id,
        "archivedAt": archived_at_ms,
        "id": row.id,
        "embedding": row.embedding,
        "metadata": dict(row.metadata),
        "document": row.document,
    }
    return json.dumps(record, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def parse_archive_line(text: str) -> ArchivedChunk:
    """An archived chunk from one line (pure); ValueError naming what is wrong otherwise."""
    try:
        record = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not JSON ({exc.msg} at column {exc.colno})") from None
    if not isinstance(record, dict):
        raise ValueError("not a JSON object")
    if record.get("format") != ARCHIVE_FORMAT:
        raise ValueError(f"unknown archive format {record.get('format')!r}")
    row_id, collection, tenant = record.get("id"), record.get("collection"), record.get("tenantId")
    for name, value in (("id", row_id), ("collection", collection), ("tenantId", tenant)):
        if not isinstance(value, str) or not value:
            raise ValueError(f"{name} must be a non-empty string")
    embedding = record.get("embedding")
    if not isinstance(embedding, list) or not embedding or not all(map(_is_number, embedding)):
        raise ValueError("embedding must be a non-empty list of finite numbers")
    metadata = record.get("metadata")
    if metadata is None:
        metadata = {}
    if not isinstance(metadata, dict):
        raise ValueError("metadata must be an object")
    document = record.get("document")
    if document is not None and not isinstance(document, str):
        raise ValueError("document must be a string or null")
    assert isinstance(row_id, str) and isinstance(collection, str) and isinstance(tenant, str)
    return ArchivedChunk(
        collection=collection,
        tenant_id=tenant,
        row=ChromaRow(row_id, metadata, document, [float(x) for x in embedding]),
    )


def archive_file_name(*, collection: str, tenant_id: str, now_ms: int) -> str:
    """`<UTC time>-<collection>-<tenant>-<random>.jsonl`: sorts by time, names its contents,
    and never collides (two passes in one second, two tenants whose names sanitize alike)."""
    stamp = datetime.fromtimestamp(now_ms / 1000, tz=UTC).strftime("%Y%m%dT%H%M%S")
    tenant = _UNSAFE_IN_NAME.sub("_", tenant_id)[:64] or "_"
    return f"{stamp}Z-{collection}-{tenant}-{uuid.uuid4().hex[:8]}{ARCHIVE_SUFFIX}"


def _fsync_directory(path: Path) -> None:
    """Make a new directory entry durable (a file fsync alone does not cover its name)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class TombstoneArchive:
    """An archive being written during one tenant's tombstoning.

    Rows go in batch by batch; `append` returns only once the batch is durable, so the caller
    deletes exactly what `append` has made safe.
    """

    def __init__(self, path: Path, *, collection: str, tenant_id: str) -> None:
        self.path = path
        self.collection = collection
        self.tenant_id = tenant_id
        #: Rows made durable so far.
        self.rows_written = 0

    @classmethod
    async def create(
        cls, directory: Path, *, collection: str, tenant_id: str, now_ms: int
    ) -> TombstoneArchive:
        """Create a new empty archive file (exclusively) and make its name durable."""
        path = directory / archive_file_name(
            collection=collection, tenant_id=tenant_id, now_ms=now_ms
        )
        await asyncio.to_thread(cls._create_file, path)
        log.info("tombstones.archive_created", path=str(path))
        return cls(path, collection=collection, tenant_id=tenant_id)

    @staticmethod
    def _create_file(path: Path) -> None:
        created_directory = not path.parent.exists()
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("x", encoding="utf-8") as handle:
            handle.flush()
            os.fsync(handle.fileno())
        _fsync_directory(path.parent)
        if created_directory:
            _fsync_directory(path.parent.parent)

    async def append(self, rows: Sequence[ChromaRow], *, archived_at_ms: int) -> None:
        """Write rows as lines, flush and fsync; raises (and nothing may be deleted) on error."""
        lines = [
            archive_line(
                ArchivedChunk(self.collection, self.tenant_id, row), archived_at_ms=archived_at_ms
            )
            for row in rows
        ]
        await asyncio.to_thread(self._write_durably, lines)
        self.rows_written += len(lines)

    def _write_durably(self, lines: list[str]) -> None:
        with self.path.open("a", encoding="utf-8") as handle:
            handle.write("".join(line + "\n" for line in lines))
            handle.flush()
            os.fsync(handle.fileno())


def _numbered_batches(handle: IO[bytes]) -> Iterator[list[tuple[int, bytes]]]:
    """Non-blank lines with their 1-based numbers, RESTORE_READ_LINES at a time."""
    batch: list[tuple[int, bytes]] = []
    for number, raw in enumerate(handle, start=1):
        if raw.strip():
            batch.append((number, raw))
            if len(batch) >= RESTORE_READ_LINES:
                yield batch
                batch = []
    if batch:
        yield batch


def _parse_raw_line(raw: bytes) -> ArchivedChunk:
    """Decode one line (bytes, so that a crash cutting a character in half spoils only that
    line) and parse it."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError("not valid UTF-8") from None
    return parse_archive_line(text)


def ensure_archive_file(path: Path) -> None:
    """Raise ArchiveError unless `path` is an existing file (checked before opening Chroma,
    which takes seconds, so a mistyped path fails at once)."""
    if not path.is_file():
        raise ArchiveError(f"{path}: archive not found (or not a file)")


async def restore_archive(vectors: VectorStore, path: Path) -> RestoreResult:
    """Upsert every valid line of an archive back into its collection (idempotently).

    Raises ArchiveError when the path is not a readable file. A corrupt line (a crash cut it
    short, someone edited it) does not stop the restore: the valid lines are restored and the
    bad ones are returned by line number for the caller to report.
    """
    ensure_archive_file(path)
    try:
        handle = path.open("rb")
    except OSError as exc:
        raise ArchiveError(f"{path}: cannot read archive: {exc.strerror or exc}") from exc

    bad: list[BadLine] = []
    by_collection: dict[str, int] = {}
    # Rows wait here per (collection, has-document): an upsert sends documents for all rows of
    # a chunk or for none, so mixing the two would drop the documents of the ones that had one.
    pending: dict[tuple[str, bool], list[ChromaRow]] = {}

    async def flush(key: tuple[str, bool]) -> None:
        rows = pending.pop(key, [])
        if rows:
            await vectors.upsert(key[0], rows, create=True)
            by_collection[key[0]] = by_collection.get(key[0], 0) + len(rows)

    with handle:
        batches = _numbered_batches(handle)
        while True:
            batch = await asyncio.to_thread(next, batches, None)
            if batch is None:
                break
            for number, raw in batch:
                try:
                    chunk = _parse_raw_line(raw)
                except ValueError as exc:
                    bad.append(BadLine(number, str(exc)))
                    continue
                key = (chunk.collection, chunk.row.document is not None)
                pending.setdefault(key, []).append(chunk.row)
                if len(pending[key]) >= vectors.max_batch:
                    await flush(key)
        for key in list(pending):
            await flush(key)

    restored = sum(by_collection.values())
    log.info("tombstones.restored", path=str(path), restored=restored,
             collections=by_collection, badLines=len(bad))
    return RestoreResult(path, restored, by_collection, tuple(bad))
