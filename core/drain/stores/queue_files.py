"""The lazy-edge queue files: the producers' append protocol and the drainer's file handling.

Producer protocol (CONTRACT): open for append and create, take an exclusive `flock`, check the
open file is still the one at the path (same inode) or reopen, write whole lines in one write,
close. A write that fails part-way (a full disk) is cut back to the file's size before it under
the same lock, so a producer appends all of its lines or none. The drainer renames the queue
to `<queue>.draining` while holding that lock, so a cooperating producer can never write into
a file that is being drained: it wakes up holding a lock on a renamed inode, sees the path no
longer points at it, and reopens.

Segments. Before the rename, the drainer writes a sidecar `<queue>.draining.id` (atomically)
naming a fresh random segment id (JSON key `generation`); a line is (segment, byte offset)
(see `core.drain`). The sidecar, not the inode, binds the id to the file: an unlinked
`.draining`'s inode number can be handed to the next queue file, and resuming that file at a
stale offset would skip real lines. The sidecar is removed only after `.draining` is (one
found without `.draining` is stale and removed first thing), so it never outlives its file. A
`.draining` without a sidecar (made by hand) gets a fresh segment, drained from its first byte.

Producers that append without the lock (a bare `>>`, `appendFileSync`) are served too: the
drainer hands the bytes they wrote into `.draining` late back to the live queue
(`core.drain.stores.queue_reader`, which also reads `.draining` in bounded memory).

A queue path that is a symbolic link is refused (`QueuePathIsSymlink`, exit 2): renaming it
would move the link and leave its target growing, never drained again.

Everything here is blocking file I/O; the drainer calls it through `asyncio.to_thread`.
"""

from __future__ import annotations

import fcntl
import os
import uuid
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import orjson

from core.base.config.private_data import PRIVATE_FILE_MODE
from core.base.io.files import (
    create_private_file,
    fsync_dir,
    make_private_dirs,
    open_lines,
    write_all,
)
from core.base.rules.errors import ConfigError
from core.drain.rules.queue_lines import (
    DRAIN_KEY,
    MAX_LINE_BYTES,
    LineProblem,
    check_lines,
    line_time,
)

#: Bytes read from `.draining` per call: the reader's buffer stays small whatever the lines.
READ_CHUNK_BYTES = 1 << 20


class QueuePathIsSymlink(ConfigError):
    """`lazyEdgesQueuePath` is a symbolic link: refused (exit 2, one line)."""


def refuse_symlinked_queue(queue_path: Path) -> None:
    """Raise QueuePathIsSymlink when the queue path is a symbolic link (see module docstring)."""
    if queue_path.is_symlink():
        raise QueuePathIsSymlink(
            f"lazyEdgesQueuePath {queue_path} is a symbolic link (to {os.readlink(queue_path)}); "
            "the drainer renames the queue file, which would move the link: point "
            "lazyEdgesQueuePath at the file itself")


def append_locked(path: Path, lines: Sequence[bytes], *, durable: bool = True) -> int:
    """Append whole lines to `path` with the producer lock protocol; returns the file's size
    after the write (0 when there was nothing to write)."""
    if not lines:
        return 0
    payload = b"".join(line.rstrip(b"\r\n") + b"\n" for line in lines)
    return append_stream_locked(path, [payload], durable=durable)


def append_stream_locked(path: Path, chunks: Iterable[bytes], *, durable: bool = True) -> int:
    """Append `chunks` (whole lines together) under the producer lock, all or none; returns
    the size after. A failed write is truncated back under the lock and re-raised.

    A torn last line (a producer crashed mid-line) gets a newline first, so it stays a line
    of its own instead of corrupting ours.
    """
    make_private_dirs(path.parent)
    # Read-write (not write-only) so that the last byte can be checked through this fd.
    with _locked(path, os.O_RDWR | os.O_APPEND | os.O_CREAT) as held:
        assert held is not None, "O_CREAT: there is always a file to lock"
        fd, opened = held
        original_size = opened.st_size
        try:
            if original_size > 0 and os.pread(fd, 1, original_size - 1) != b"\n":
                write_all(fd, b"\n")
            last = b"\n"
            for chunk in chunks:
                if chunk:
                    write_all(fd, chunk)
                    last = chunk[-1:]
            if last != b"\n":
                write_all(fd, b"\n")
            if durable:
                os.fsync(fd)
        except BaseException:
            # All or nothing: cut our bytes off before anyone else can take the lock.
            os.ftruncate(fd, original_size)
            if durable:
                os.fsync(fd)
            raise
        return os.fstat(fd).st_size


@contextmanager
def _locked(path: Path, flags: int) -> Iterator[tuple[int, os.stat_result] | None]:
    """The producers' lock on `path` (see the module docstring): yields the locked fd and its
    stat, or None when there is no file; leaving closes the fd, releasing the lock."""
    while True:
        try:
            fd = os.open(path, flags, PRIVATE_FILE_MODE)
        except FileNotFoundError:
            yield None
            return
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            opened = os.fstat(fd)
            try:
                current = os.stat(path)
            except FileNotFoundError:
                continue  # renamed away while we waited for the lock: reopen
            if (opened.st_dev, opened.st_ino) == (current.st_dev, current.st_ino):
                yield fd, opened
                return
            # the path now names a new file: reopen
        finally:
            os.close(fd)


@contextmanager
def producers_held(path: Path) -> Iterator[None]:
    """Hold the producers' lock on the queue at `path` (created empty when absent, never
    through a symlink). The file may be removed under this hold: a waiting producer then
    reopens (the protocol), so its line goes to a new file, not lost."""
    with _locked(path, os.O_RDONLY | os.O_CREAT | os.O_NOFOLLOW):
        yield


def enqueue_edges(queue_path: Path, raw_lines: Iterable[bytes]) -> list[LineProblem]:
    """The library producer call: append all the lines in one locked write, or none when any
    is malformed (the problems are returned). Raises QueuePathIsSymlink or OSError."""
    refuse_symlinked_queue(queue_path)
    valid, problems = check_lines(raw_lines)
    if not problems:
        append_locked(queue_path, valid)
    return problems


# --------------------------------------------------------------------------------------------
# Segments
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Segment:
    """The identity of one `.draining` file, as its sidecar records it."""

    id: str
    rotated_at_ms: int
    #: The dead-letter file's size at rotation: records of this segment can only follow it.
    dead_letters_size: int


def new_segment(*, now_ms: int, dead_letters_size: int) -> Segment:
    """A fresh segment with a random 128-bit id (32 hex digits)."""
    return Segment(uuid.uuid4().hex, now_ms, dead_letters_size)


def sidecar_path(draining_path: Path) -> Path:
    """The sidecar of `.draining`: `<queue>.draining.id`."""
    return draining_path.with_name(draining_path.name + ".id")


def write_sidecar(draining_path: Path, segment: Segment) -> None:
    """Write the sidecar atomically and durably (temp file, fsync, rename, fsync folder)."""
    target = sidecar_path(draining_path)
    temp = target.with_name(target.name + ".tmp")
    payload = orjson.dumps({"generation": segment.id, "rotatedAt": segment.rotated_at_ms,
                            "deadLettersSize": segment.dead_letters_size})
    fd = create_private_file(temp, os.O_WRONLY | os.O_TRUNC)
    try:
        write_all(fd, payload + b"\n")
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(temp, target)
    fsync_dir(target.parent)


def read_sidecar(draining_path: Path) -> Segment | None:
    """The sidecar's segment, or None when there is none or it is unreadable."""
    try:
        value = orjson.loads(sidecar_path(draining_path).read_bytes())
    except (FileNotFoundError, orjson.JSONDecodeError):
        return None
    if not isinstance(value, dict):
        return None
    gen, rotated, dead = (value.get("generation"), value.get("rotatedAt"),
                          value.get("deadLettersSize"))
    if not (isinstance(gen, str) and len(gen) == 32 and type(rotated) is int
            and type(dead) is int):
        return None
    return Segment(gen, rotated, dead)


def remove_sidecar(draining_path: Path) -> None:
    """Remove the sidecar (after `.draining` is gone, or when it is stale)."""
    try:
        sidecar_path(draining_path).unlink()
    except FileNotFoundError:
        return
    fsync_dir(draining_path.parent)


def rotate_queue(queue_path: Path, draining_path: Path, segment: Segment) -> bool:
    """Under the producers' lock: write `segment`'s sidecar, then rename the live queue to
    `.draining`; False when there is no queue or it is empty. `.draining` must not exist."""
    with _locked(queue_path, os.O_RDONLY | os.O_NOFOLLOW) as held:
        if held is None or held[1].st_size == 0:
            return False
        if draining_path.exists():
            raise FileExistsError(f"{draining_path} exists; drain it before rotating")
        write_sidecar(draining_path, segment)
        os.rename(queue_path, draining_path)
        fsync_dir(queue_path.parent)
        return True


@dataclass(slots=True)
class QueueFileCounts:
    """A queue file (`lazy-edges.jsonl` or its `.draining`): lines, bytes and the oldest line."""

    present: bool = False
    lines: int = 0
    bytes: int = 0
    #: Lines the drainer put back after a failed attempt (they carry `_drain`).
    retried_lines: int = 0
    oldest_ms: int | None = None
    #: Where `oldest_ms` came from: "timestamp", "lastAttemptAt", or "mtime".
    oldest_from: str | None = None


def describe_queue_file(path: Path) -> QueueFileCounts:
    """A queue file's lines and oldest line's time (else its mtime), in bounded memory."""
    counts = QueueFileCounts()
    drain_marker = b'"' + DRAIN_KEY.encode() + b'"'
    with open_lines(path, limit=MAX_LINE_BYTES) as opened:
        if opened is None:
            return counts
        counts.present, counts.bytes = True, opened.size
        for raw in opened.lines:
            counts.lines += 1
            if raw is None:
                continue
            if drain_marker in raw:
                counts.retried_lines += 1
            found = line_time(raw)
            if found is not None and (counts.oldest_ms is None or found[0] < counts.oldest_ms):
                counts.oldest_ms, counts.oldest_from = found
        if counts.oldest_ms is None and counts.lines:
            counts.oldest_ms, counts.oldest_from = opened.mtime_ms, "mtime"
    return counts


def count_newlines(path: Path) -> int:
    """The newlines in a file (its lines, none parsed); 0 when it is absent."""
    try:
        handle = path.open("rb")
    except FileNotFoundError:
        return 0
    lines = 0
    with handle:
        while chunk := handle.read(READ_CHUNK_BYTES):
            lines += chunk.count(b"\n")
    return lines
