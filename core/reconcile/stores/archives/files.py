"""Tombstone archive files under `<dataDir>/tombstones/`: created, appended durably, read.

A band's pages are written, then made durable (`sync_archives`) before its delete is sent
(the engine's guarantees: `core.reconcile.deletion`). The lines' format and checksums are
`core.reconcile.rules.archives.format`'s; restoring is `core.reconcile.archives.restore`'s.
"""

from __future__ import annotations

import asyncio
import hashlib
import io
import os
import re
import uuid
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, TYPE_CHECKING, Final

import structlog

from core.base.config.private_data import PRIVATE_FILE_MODE
from core.base.io.files import FilesystemFlush, fsync_dir, make_private_dirs, write_all
from core.base.rules.errors import ConfigError
from core.reconcile.rules.archives.format import (
    ARCHIVE_SUFFIX,
    ArchiveHeader,
    chunk_lines,
    seal,
    withdrawn_line,
)

if TYPE_CHECKING:
    from core.base.rules.rows import ColumnPage

log = structlog.get_logger(__name__)

#: Threads that fsync many archives at once when one `syncfs` cannot.
ARCHIVE_IO_THREADS: Final = 8
#: Lines checked and restored per batch (one `get`, one `add`): memory bounded by a batch.
RESTORE_BATCH_LINES: Final = 1_000
#: Archives made durable at once from which one `syncfs` replaces their fsyncs (below it,
#: fsyncs are cheap and flush nothing but the archives).
SYNCFS_MIN_ARCHIVES: Final = 64
#: Bytes of lines joined into one write.
WRITE_BYTES: Final = 1 << 20

_CREATE_FLAGS: Final = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC
_APPEND_FLAGS: Final = os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC
_SYNC_FLAGS: Final = os.O_WRONLY | os.O_CLOEXEC
#: Archives hold the chunks' documents and embeddings: their owner's alone.
_FILE_MODE: Final = PRIVATE_FILE_MODE

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


@dataclass(frozen=True, slots=True)
class SharedCopy:
    """What of one archive file is in the shared state (`core.reconcile.stores.archives.shared`):
    its first `size` bytes, in `parts`, and their running SHA-256."""

    parts: int = 0
    size: int = 0
    digest: hashlib._Hash = field(default_factory=hashlib.sha256)


class TombstoneArchive:
    """An archive being written during one tenant's tombstoning: pages are appended, and `sync`
    makes them durable once before each delete request (not per page: a band's pages are only
    worth protecting together, just before the band goes)."""

    def __init__(self, path: Path, header: ArchiveHeader) -> None:
        self.path = path
        self.header = header
        self.rows_written = 0
        self.rows_synced = 0
        #: The file and its folder entry (`new_unsynced` files: not until `sync_archives`).
        self.durable = True
        self.created_directory = False
        #: Kept with the file, so every plan of the pass that adds to it continues the same copy.
        self.shared_copy: SharedCopy | None = None

    @classmethod
    async def create(
        cls, directory: Path, *, collection: str, tenant_id: str, pass_id: str, now_ms: int
    ) -> TombstoneArchive:
        """Create a new archive holding only its header (exclusively), durably."""
        def create_durably() -> TombstoneArchive:
            archive = cls.new_unsynced(directory, collection=collection, tenant_id=tenant_id,
                                       pass_id=pass_id, now_ms=now_ms)
            sync_archives([archive])
            return archive

        archive = await asyncio.to_thread(create_durably)
        log.info("tombstones.archive_created", path=str(archive.path))
        return archive

    @classmethod
    def new_unsynced(
        cls, directory: Path, *, collection: str, tenant_id: str, pass_id: str, now_ms: int,
        first_page: ColumnPage | None = None,
    ) -> TombstoneArchive:
        """(blocking) Create a new archive holding its header and `first_page`'s rows,
        exclusively, NOT yet durable (`sync_archives` makes many at once). The rows are encoded
        and checked before the file exists, so a row that cannot be archived leaves no file."""
        header = ArchiveHeader(collection, tenant_id, pass_id, now_ms)
        lines = [seal(header.record())]
        if first_page is not None and len(first_page):
            lines += chunk_lines(first_page, header=header, archived_at_ms=now_ms)
        path = directory / archive_file_name(
            collection=collection, tenant_id=tenant_id, now_ms=now_ms
        )
        created_directory = False
        try:
            fd = os.open(path, _CREATE_FLAGS, _FILE_MODE)
        except FileNotFoundError:
            created_directory = not directory.exists()
            make_private_dirs(directory)
            fd = os.open(path, _CREATE_FLAGS, _FILE_MODE)
        try:
            _write_lines(fd, lines)
        finally:
            os.close(fd)
        archive = cls(path, header)
        archive.durable, archive.created_directory = False, created_directory
        archive.rows_written = len(lines) - 1
        return archive

    def withdraw(self, ids: list[str], *, withdrawn_at_ms: int) -> None:
        """(blocking) Append a durable withdrawn line naming these ids (restore skips them)."""
        fd = os.open(self.path, _APPEND_FLAGS)
        try:
            _write_lines(fd, [withdrawn_line(self.header, ids, withdrawn_at_ms=withdrawn_at_ms)])
            os.fsync(fd)
        finally:
            os.close(fd)

    def write_page(self, page: ColumnPage, *, archived_at_ms: int) -> None:
        """(blocking) `append` without its thread, for a caller already on one."""
        if len(page):
            self._write(page, archived_at_ms)
            self.rows_written += len(page)

    async def append(self, page: ColumnPage, *, archived_at_ms: int) -> None:
        """Write a page of whole rows (durable after `sync`); raises when a row cannot be
        archived exactly or the disk refuses."""
        if not len(page):
            return
        await asyncio.to_thread(self._write, page, archived_at_ms)
        self.rows_written += len(page)

    def _write(self, page: ColumnPage, archived_at_ms: int) -> None:
        # Encoded and checked before the first write: a bad row leaves the file as it was.
        lines = chunk_lines(page, header=self.header, archived_at_ms=archived_at_ms)
        fd = os.open(self.path, _APPEND_FLAGS)
        try:
            _write_lines(fd, lines)
        finally:
            os.close(fd)

    async def sync(self) -> None:
        """Make every appended row durable (fsync); raises when the disk refuses."""
        if self.durable and self.rows_synced == self.rows_written:
            return
        await asyncio.to_thread(sync_archives, [self])

    def _fsync(self) -> None:
        fd = os.open(self.path, _SYNC_FLAGS)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _write_lines(fd: int, lines: Iterable[bytes]) -> None:
    """(blocking) Write each line and its newline to `fd`, in writes of about WRITE_BYTES (no
    copy of a whole page)."""
    pending: list[bytes] = []
    size = 0
    for line in lines:
        pending += (line, b"\n")
        size += len(line) + 1
        if size >= WRITE_BYTES:
            write_all(fd, b"".join(pending))
            pending, size = [], 0
    if pending:
        write_all(fd, b"".join(pending))


def _fsync_each(archives: Sequence[TombstoneArchive]) -> None:
    """(blocking) fsync every archive, on threads (an fsync waits on the disk, not the GIL); the
    first error is raised after all finished."""
    if len(archives) < 2:
        for archive in archives:
            archive._fsync()
        return
    with ThreadPoolExecutor(max_workers=ARCHIVE_IO_THREADS,
                            thread_name_prefix="archive-io") as pool:
        for future in [pool.submit(archive._fsync) for archive in archives]:
            future.result()


def sync_archives(archives: list[TombstoneArchive],
                  flush: FilesystemFlush | None = None) -> None:
    """(blocking) Make every row written to these archives durable, and every new one's folder
    entry; raises when the disk refuses (and nothing may then be deleted).

    With `flush` (opened on the folder before any unsynced row was written) and
    SYNCFS_MIN_ARCHIVES archives or more, one `syncfs` when the system can; otherwise an fsync
    per file. Then one fsync per new archives' folder."""
    pending = [a for a in archives if not a.durable or a.rows_synced != a.rows_written]
    flushed = (flush is not None and len(pending) >= SYNCFS_MIN_ARCHIVES
               and all(a.path.parent == flush.folder for a in pending) and flush.flush())
    if not flushed:
        _fsync_each(pending)
    new = [a for a in pending if not a.durable]
    created = {a.path.parent.parent for a in new if a.created_directory}
    for folder in sorted({a.path.parent for a in new} | created,
                         key=lambda f: len(f.parts), reverse=True):
        fsync_dir(folder)
    for archive in archives:
        archive.durable, archive.rows_synced = True, archive.rows_written


# --------------------------------------------------------------------------------------------
# Reading
# --------------------------------------------------------------------------------------------


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


@contextmanager
def archive_line_batches(
    path: Path, *, content: bytes | None = None
) -> Iterator[Iterator[list[tuple[int, bytes]]]]:
    """The archive's numbered non-blank lines, RESTORE_BATCH_LINES at a time (from `content`,
    an archive's bytes from the shared state, when given). Raises ArchiveError when the file
    cannot be used at all. Blocking: take each batch through a thread."""
    if content is not None:
        yield _batches(_numbered_lines(io.BytesIO(content)))
        return
    ensure_archive_file(path)
    try:
        handle = path.open("rb")
    except OSError as exc:
        raise ArchiveError(f"{path}: cannot read archive: {exc.strerror or exc}") from exc
    with handle:
        yield _batches(_numbered_lines(handle))
