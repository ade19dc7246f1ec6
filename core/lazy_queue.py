"""The lazy-edge queue file: the producers' append protocol and the drainer's file handling.

Producer protocol (CONTRACT): open for append and create, take an exclusive `flock`, check the
open file is still the one at the path (same inode) or reopen, write whole lines in one write,
close. The drainer renames the queue to `<queue>.draining` while holding that same lock, so a
cooperating producer can never write into a file that is being drained: it wakes up holding a
lock on a renamed inode, sees the path no longer points at it, and reopens.

Producers that append without the lock (a bare `>>`, `appendFileSync`) are served too: before
the drainer removes `.draining` it reads any bytes that arrived after its last read, and after
the removal it reads the open file once more and hands anything new to the live queue. (A bare
producer that keeps one file handle open across drains would keep writing into the removed
file; such a producer must reopen per write, as those two do.)

Everything here is blocking file I/O; the drainer calls it through `asyncio.to_thread`.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from core.queue_lines import EdgeLine, MalformedLine, parse_line


def fsync_dir(path: Path) -> None:
    """Make a rename or unlink inside `path` durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_all(fd: int, payload: bytes) -> None:
    view = memoryview(payload)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def append_locked(path: Path, lines: Sequence[bytes], *, durable: bool = True) -> None:
    """Append whole lines to `path` with the producer lock protocol (see module docstring).

    If the file does not end with a newline (a producer crashed mid-line), a newline is written
    first, so the torn fragment stays a line of its own instead of corrupting ours.
    """
    if not lines:
        return
    payload = b"".join(line.rstrip(b"\r\n") + b"\n" for line in lines)
    path.parent.mkdir(parents=True, exist_ok=True)
    while True:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            opened = os.fstat(fd)
            try:
                current = os.stat(path)
            except FileNotFoundError:
                continue  # renamed away while we waited for the lock: reopen
            if (opened.st_dev, opened.st_ino) != (current.st_dev, current.st_ino):
                continue  # the path now names a new file: reopen
            prefix = b""
            if opened.st_size > 0:
                with open(path, "rb") as tail:
                    tail.seek(opened.st_size - 1)
                    if tail.read(1) != b"\n":
                        prefix = b"\n"
            _write_all(fd, prefix + payload)
            if durable:
                os.fsync(fd)
            return
        finally:
            os.close(fd)  # also releases the flock


@dataclass(frozen=True, slots=True)
class LineProblem:
    """A line `enqueue` refuses: its 1-based number and why."""

    number: int
    detail: str


def check_lines(raw_lines: Iterable[bytes]) -> tuple[list[bytes], list[LineProblem]]:
    """Validate producer input: the non-blank lines, and a problem for each malformed one."""
    valid: list[bytes] = []
    problems: list[LineProblem] = []
    for number, raw in enumerate(raw_lines, start=1):
        line = raw.rstrip(b"\r\n")
        if not line.strip():
            continue
        parsed = parse_line(line)
        if isinstance(parsed, MalformedLine):
            problems.append(LineProblem(number, parsed.detail))
        else:
            valid.append(line)
    return valid, problems


def enqueue_edges(queue_path: Path, raw_lines: Iterable[bytes]) -> list[LineProblem]:
    """The library producer call: check every line, then append all of them in one locked
    write, or none when any is malformed (the problems are returned)."""
    valid, problems = check_lines(raw_lines)
    if not problems:
        append_locked(queue_path, valid)
    return problems


def rotate_queue(queue_path: Path, draining_path: Path) -> bool:
    """Rename the live queue to `.draining` under the producers' lock; False when there is no
    queue or it is empty. The caller has made sure `.draining` does not exist (a leftover is
    always drained first, so a rotation never overwrites unread lines)."""
    while True:
        try:
            fd = os.open(queue_path, os.O_RDONLY)
        except FileNotFoundError:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            opened = os.fstat(fd)
            try:
                current = os.stat(queue_path)
            except FileNotFoundError:
                return False
            if (opened.st_dev, opened.st_ino) != (current.st_dev, current.st_ino):
                continue
            if opened.st_size == 0:
                return False
            if draining_path.exists():
                raise FileExistsError(f"{draining_path} exists; drain it before rotating")
            os.rename(queue_path, draining_path)
            fsync_dir(queue_path.parent)
            return True
        finally:
            os.close(fd)


class DrainingFile:
    """Reads `.draining` in batches of whole lines, remembering how far it got.

    An unterminated last line is held back (a bare producer may be mid-write) until
    `take_fragment`, which the drainer calls once it has waited for the writer to finish.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._file: BinaryIO = open(path, "rb")  # noqa: SIM115 - closed in close()
        self.offset = 0

    def read_lines(self, max_lines: int) -> list[bytes]:
        """Up to `max_lines` complete lines after the last one read (newlines stripped)."""
        lines: list[bytes] = []
        self._file.seek(self.offset)
        while len(lines) < max_lines:
            line = self._file.readline()
            if not line.endswith(b"\n"):
                break
            self.offset += len(line)
            lines.append(line[:-1])
        return lines

    def has_fragment(self) -> bool:
        """Whether bytes follow the last complete line."""
        return os.fstat(self._file.fileno()).st_size > self.offset

    def take_fragment(self) -> bytes:
        """The bytes after the last complete line, consumed as one final line."""
        self._file.seek(self.offset)
        rest = self._file.read()
        self.offset += len(rest)
        return rest

    def remove_and_collect_late_bytes(self) -> bytes:
        """Unlink the file, then read anything a bare producer wrote after our last read,
        through the handle we still hold (the inode lives until we close it)."""
        os.unlink(self.path)
        fsync_dir(self.path.parent)
        return self.take_fragment()

    def close(self) -> None:
        """Close the handle."""
        self._file.close()


def split_lines(payload: bytes) -> list[bytes]:
    """Whole lines of a byte string (a final unterminated fragment counts as a line)."""
    return [line for line in payload.split(b"\n") if line.strip()]


def parse_many(raw_lines: Iterable[bytes]) -> list[EdgeLine | MalformedLine]:
    """Parse non-blank lines in order."""
    return [parse_line(raw) for raw in raw_lines if raw.strip()]
