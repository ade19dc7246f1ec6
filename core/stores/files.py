"""Small file helpers every on-disk format shares: durable renames, whole writes, bounded reads.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO

#: Bytes read per call while skipping an over-long line.
_SKIP_CHUNK = 1 << 16


def fsync_dir(path: Path) -> None:
    """Make a rename, create or unlink inside the folder `path` durable (a file's fsync alone
    does not cover its name)."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


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
    `limit` (which is skipped in chunks, never held whole). A last line without a newline
    counts: a producer may be writing it."""
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
    """The non-blank bounded lines of `path` (see `iter_bounded_lines`): a file of millions
    of lines, or one runaway line, costs a read and not the memory to hold it. None when the
    file does not exist, which for every reader of these files means "nothing yet"."""
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
