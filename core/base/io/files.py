"""Small file helpers every on-disk format shares: durable renames, whole writes, bounded reads.
"""

from __future__ import annotations

import ctypes
import os
import platform
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import IO

import structlog

from core.base.config.private_data import PRIVATE_DIR_MODE, PRIVATE_FILE_MODE

log = structlog.get_logger(__name__)

#: Bytes read per call while skipping an over-long line.
_SKIP_CHUNK = 1 << 16


def make_private_dirs(folder: Path) -> None:
    """Create `folder` and every missing folder above it owner-only, whatever the umask; a
    folder that exists (or another process creates meanwhile) is left as it is."""
    missing: list[Path] = []
    while not folder.is_dir():
        missing.append(folder)
        if folder.parent == folder:
            break
        folder = folder.parent
    for path in reversed(missing):
        try:
            path.mkdir(mode=PRIVATE_DIR_MODE)
        except FileExistsError:
            if not path.is_dir():
                raise


def create_private_file(path: Path, flags: int = os.O_WRONLY) -> int:
    """Open `path`, created owner-only whatever the umask (one that exists keeps its mode)."""
    return os.open(path, flags | os.O_CREAT, PRIVATE_FILE_MODE)


def fsync_dir(path: Path) -> None:
    """Make a rename, create or unlink inside the folder `path` durable (a file's fsync alone
    does not cover its name)."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class FilesystemFlush:
    """A handle on the filesystem holding `folder`, opened BEFORE the writes it is to make
    durable, whose `flush` makes them all durable with one `syncfs` (in place of an fsync per
    file: docs/performance.md, "Fleet scale").

    Why opened first: `syncfs` reports the write-back errors recorded since its descriptor was
    opened, so one opened after the writes could miss an error another program's `syncfs` was
    told of in between."""

    def __init__(self, folder: Path, fd: int) -> None:
        self.folder = folder
        self._fd = fd

    @classmethod
    def open(cls, folder: Path) -> FilesystemFlush:
        """(blocking) The handle on `folder`, created (durably) when missing."""
        if not folder.is_dir():
            make_private_dirs(folder)
            fsync_dir(folder.parent)
        return cls(folder, os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC))

    def flush(self) -> bool:
        """(blocking) Whether everything written since the handle was opened is now durable:
        False when this system cannot tell (see `_syncfs`) or it failed; the caller then falls
        back to one fsync per file."""
        syncfs = _syncfs()
        if syncfs is None:
            return False
        if syncfs(self._fd) == 0:
            return True
        log.warning("files.syncfs_failed", folder=str(self.folder),
                    error=os.strerror(ctypes.get_errno()))
        return False

    def close(self) -> None:
        """Close the handle (once)."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


@cache
def _syncfs() -> Callable[[int], int] | None:
    """libc's `syncfs` where it reports write-back errors (Linux 5.8 and later), else None."""
    found = re.match(r"(\d+)\.(\d+)", platform.release())
    if platform.system() != "Linux" or found is None:
        return None
    if (int(found.group(1)), int(found.group(2))) < _SYNCFS_REPORTS_ERRORS_SINCE:
        return None
    try:
        function: Callable[[int], int] = ctypes.CDLL(None, use_errno=True).syncfs
    except (AttributeError, OSError):
        return None
    return function


#: The first Linux whose `syncfs` reports write-back errors (before it, it always succeeded).
_SYNCFS_REPORTS_ERRORS_SINCE = (5, 8)


def write_all(fd: int, payload: bytes) -> None:
    """Write every byte of `payload` to `fd` (a short write is continued, never dropped)."""
    view = memoryview(payload)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def file_size(path: Path) -> int:
    """A file's size, 0 when it does not exist."""
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def iter_bounded_lines(stream: IO[bytes], *, limit: int) -> Iterator[bytes | None]:
    """Each line of a binary stream without its newline, or None for a line longer than
    `limit` (skipped, never held whole); an unterminated last line counts."""
    while True:
        line = stream.readline(limit + 1)
        if not line:
            return
        if line.endswith(b"\n"):
            yield line[:-1]
        elif len(line) <= limit:
            yield line  # the unterminated last line
        else:
            while (chunk := stream.readline(_SKIP_CHUNK)) and not chunk.endswith(b"\n"):
                pass
            yield None


@dataclass(frozen=True, slots=True)
class OpenLines:
    """A file being read: its size and mtime when opened, and its non-blank lines (None for
    a line longer than the limit)."""

    size: int
    mtime_ms: int
    lines: Iterator[bytes | None]


@contextmanager
def open_lines(path: Path, *, limit: int) -> Iterator[OpenLines | None]:
    """The non-blank bounded lines of `path` (see `iter_bounded_lines`); None when the file
    does not exist ("nothing yet")."""
    try:
        stream = open(path, "rb")  # noqa: SIM115 - closed by the with below
    except FileNotFoundError:
        yield None
        return
    with stream:
        info = os.fstat(stream.fileno())
        lines = (raw for raw in iter_bounded_lines(stream, limit=limit)
                 if raw is None or raw.strip())
        yield OpenLines(info.st_size, int(info.st_mtime * 1000), lines)
