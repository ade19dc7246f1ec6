"""Tombstone archive files under `<dataDir>/tombstones/`: created, appended durably, read.

Every chunk is on disk, with the content it had, before it is deleted: each band's pages are
written and flushed, then fsynced (the file and, when new, its folder) BEFORE its delete is
sent. The lines' format and checksums are `core.rules.archive_format`'s.

**Restore is preserve-live** (`restore_archive`): lines are checked against the header and
then against the store, a batch at a time. Absent ids are added back with Chroma `add`, which
leaves any id that exists untouched even if it appeared a moment after the check; an id that
exists under the archive's tenant is kept as it lives now (`keptLive`); an id that lives under
another tenant, a line of another collection, pass or tenant is refused with its reason.
Running a restore twice changes nothing the second time. A format-1 archive is restored with
a warning: the rules that keep a restore from harming live data (add-only, the archive's own
tenant and the knowledge-base collection only) do not need a checksum; only edits to such a
file cannot be detected.
"""

from __future__ import annotations

import asyncio
import os
import re
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Final

import structlog

from core.rules.archive_format import (
    ARCHIVE_FORMAT,
    ARCHIVE_SUFFIX,
    LEGACY_FORMAT,
    LEGACY_WARNING,
    TENANT_KEY,
    ArchivedChunk,
    ArchiveHeader,
    chunk_lines,
    json_object,
    parse_chunk,
    parse_header,
    refusal,
    seal,
    unseal,
)
from core.rules.errors import ConfigError
from core.rules.rows import ChromaRow
from core.stores.chroma import CollectionMissing
from core.stores.files import fsync_dir

if TYPE_CHECKING:
    from core.rules.rows import ColumnPage
    from core.stores.chroma import VectorStore

log = structlog.get_logger(__name__)

#: Lines checked and restored per batch: one `get` and one `add` per batch, and memory
#: bounded by a batch whatever the file's size.
RESTORE_BATCH_LINES: Final = 1_000

_UNSAFE_IN_NAME = re.compile(r"[^A-Za-z0-9._-]+")


class ArchiveError(ConfigError):
    """The archive named on the command line cannot be used at all (missing, not a file, no
    readable header, another collection's): exit 2, nothing restored."""


def archive_file_name(*, collection: str, tenant_id: str, now_ms: int) -> str:
    """`<UTC time>-<collection>-<tenant>-<random>.jsonl`: sorts by time, names its contents,
    and never collides (two passes in one second, two tenants whose names sanitize alike)."""
    stamp = datetime.fromtimestamp(now_ms / 1000, tz=UTC).strftime("%Y%m%dT%H%M%S")
    tenant = _UNSAFE_IN_NAME.sub("_", tenant_id)[:64] or "_"
    return f"{stamp}Z-{collection}-{tenant}-{uuid.uuid4().hex[:8]}{ARCHIVE_SUFFIX}"


# --------------------------------------------------------------------------------------------
# Writing
# --------------------------------------------------------------------------------------------


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
        fsync_dir(path.parent)
        if created_directory:
            fsync_dir(path.parent.parent)

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
