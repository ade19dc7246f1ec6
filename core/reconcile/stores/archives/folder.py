"""The archive folder (`<dataDir>/tombstones/`) as a whole: its files listed and summed, one
archive's contents read, a header read on its own, an archive file removed.

What `status` shows of the folder (`describe_archive_folder`) costs one `stat` per file and
the first line of one file (at most HEADER_BYTES), so it stays cheap beside a folder of
thousands of archives; `archives` and pruning read the archives they report on.

Everything here is blocking file I/O: callers take it through `asyncio.to_thread`.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from core.base.io.files import fsync_dir
from core.base.rules.camel_json import omitted_when_none
from core.base.rules.timestamps import iso_from_ms
from core.reconcile.rules.archives.format import (
    ARCHIVE_SUFFIX,
    ArchiveHeader,
    parse_header,
    unseal,
)
from core.reconcile.rules.archives.listing import NO_HEADER, ArchiveContents, read_contents
from core.reconcile.stores.archives.files import ArchiveError, archive_line_batches

#: The most of a file read to find its header: a header line is about 200 bytes.
HEADER_BYTES: Final = 4096


@dataclass(frozen=True, slots=True)
class NewestArchive:
    """The archive written last in the folder, as its header names it."""

    name: str
    tenant_id: str | None
    created_at: int | None
    created_at_iso: str | None
    #: Why its header could not be read (None when it was).
    problem: str | None = field(default=None, metadata=omitted_when_none())


@dataclass(frozen=True, slots=True)
class ArchiveFolder:
    """The archive folder: how many archives, their bytes, and the newest."""

    path: Path
    present: bool
    count: int
    bytes: int
    newest: NewestArchive | None


def archive_paths(folder: Path) -> list[Path]:
    """The archive files (`*.jsonl`, regular files) in `folder`, by name; [] when there is
    no folder."""
    try:
        entries = list(os.scandir(folder))
    except (FileNotFoundError, NotADirectoryError):
        return []
    return sorted(Path(e.path) for e in entries
                  if e.name.endswith(ARCHIVE_SUFFIX) and e.is_file(follow_symlinks=False))


def read_header(path: Path) -> tuple[ArchiveHeader | None, str | None]:
    """The archive's header, or why there is none, reading at most HEADER_BYTES of its
    first line (a format-1 archive has none: `archive_contents` reads it whole)."""
    try:
        with path.open("rb") as handle:
            first = handle.readline(HEADER_BYTES)
    except OSError as exc:
        return None, f"cannot read: {exc.strerror or exc}"
    try:
        return parse_header(unseal(first.rstrip(b"\r\n"))), None
    except ValueError:
        return None, NO_HEADER


def describe_archive_folder(folder: Path) -> ArchiveFolder:
    """Count and size of the folder's archives and the newest one (by modification time,
    then name), whose header alone is read."""
    sized: list[tuple[int, str, Path, int]] = []
    for path in archive_paths(folder):
        try:
            stat = path.stat()
        except FileNotFoundError:
            continue  # pruned or moved since the listing
        sized.append((stat.st_mtime_ns, path.name, path, stat.st_size))
    newest = None
    if sized:
        _, name, path, _ = max(sized)
        header, problem = read_header(path)
        created = header.created_at_ms if header is not None else None
        newest = NewestArchive(name, header.tenant_id if header is not None else None, created,
                               iso_from_ms(created) if created is not None else None, problem)
    return ArchiveFolder(folder, folder.is_dir(), len(sized), sum(s[3] for s in sized), newest)


def _lines(batches: Iterator[list[tuple[int, bytes]]]) -> Iterator[tuple[int, bytes]]:
    for batch in batches:
        yield from batch


def archive_contents(path: Path, *, content: bytes | None = None) -> ArchiveContents:
    """What the archive at `path` (or the bytes `content`, a shared copy) holds, read line by
    line in bounded memory; a file that cannot be read is an archive with that problem."""
    try:
        with archive_line_batches(path, content=content) as batches:
            return read_contents(_lines(batches))
    except (ArchiveError, OSError) as exc:
        return ArchiveContents(None, None, None, None, None, problem=str(exc))


def remove_archive(path: Path) -> None:
    """Remove an archive file and make its removal durable (the folder fsynced)."""
    path.unlink()
    fsync_dir(path.parent)
