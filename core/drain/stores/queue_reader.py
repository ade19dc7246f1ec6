"""Reading `.draining` in bounded memory, and handing a bare producer's late bytes back.

`QueueReader` reads a queue file from a byte offset in batches of whole lines, holding at most
READ_CHUNK_BYTES + MAX_LINE_BYTES: a longer line is streamed to a side file (and fsynced, with
its folder) and comes back as a `ReadLine` naming that file, its size and SHA-256.

Producers that append without the lock (a bare `>>`, `appendFileSync`) are served too: before
the drainer removes `.draining` it reads any bytes that arrived after its last read, and after
the removal it reads the open file once more and hands anything new to the live queue
(`hand_back_late_bytes`, under the producers' lock of `core.drain.stores.queue_files`). A bare
producer that keeps one file handle open across drains would keep writing into the removed
file; such a producer must reopen per write, as those two do.

Everything here is blocking file I/O; the drainer calls it through `asyncio.to_thread`.
"""

from __future__ import annotations

import hashlib
import itertools
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO

from core.base.io.files import create_private_file, fsync_dir, make_private_dirs
from core.drain.rules.queue_lines import MAX_LINE_BYTES, ReadLine, SpilledBytes, parsed_size_bound
from core.drain.stores.queue_files import READ_CHUNK_BYTES, append_stream_locked


class _Spill:
    """An over-limit line being copied out: hashed and (unless a dry run) written to a file."""

    def __init__(self, offset: int, folder: Path | None, name: str) -> None:
        self.offset = offset
        self.size = 0
        self.hasher = hashlib.sha256()
        self.folder = folder
        self.name = name
        self.file: BinaryIO | None = None
        if folder is not None:
            make_private_dirs(folder)
            self.file = os.fdopen(
                create_private_file(folder / name, os.O_WRONLY | os.O_TRUNC), "wb")

    def write(self, data: bytes | memoryview) -> None:
        self.size += len(data)
        self.hasher.update(data)
        if self.file is not None:
            self.file.write(data)

    def finish(self) -> ReadLine:
        relative = None
        if self.file is not None and self.folder is not None:
            self.file.flush()
            os.fsync(self.file.fileno())
            self.file.close()
            self.file = None
            fsync_dir(self.folder)
            relative = f"{self.folder.name}/{self.name}"
        return ReadLine(self.offset, b"",
                        SpilledBytes(relative, self.size, self.hasher.hexdigest()))

    def close(self) -> None:
        if self.file is not None:
            self.file.close()
            self.file = None


class QueueReader:
    """Reads a queue file from a byte offset in batches of whole lines (see the module docstring).

    An over-limit line goes to `<spill_to>/<name_of(offset)>` (only hashed when `spill_to` is
    None, a dry run). An unterminated last line is held back (a bare producer may be
    mid-write) until a read with `final=True`.
    """

    def __init__(
        self,
        path: Path,
        *,
        start: int = 0,
        spill_to: Path | None = None,
        name_of: Callable[[int], str] = lambda offset: f"{offset}.line",
        chunk_bytes: int = READ_CHUNK_BYTES,
        max_line_bytes: int = MAX_LINE_BYTES,
    ) -> None:
        self.path = path
        self._file: BinaryIO = open(path, "rb")  # noqa: SIM115 - closed in close()
        self._file.seek(start)
        #: File offset of the first byte not yet handed out as part of a line.
        self.offset = start
        self._buf = b""
        self._pos = 0  # bytes of _buf already handed out
        self._spill: _Spill | None = None
        self._spill_to = spill_to
        self._name_of = name_of
        self._chunk = chunk_bytes
        self._max_line = max_line_bytes

    def read_lines(self, max_lines: int, max_bytes: int, *, final: bool = False,
                   max_parsed_bytes: int | None = None) -> list[ReadLine]:
        """Up to `max_lines` lines, `max_bytes` or `max_parsed_bytes` (`parsed_size_bound`),
        and at least one when there is one. With `final`, the end of the file ends the last
        line even without a newline."""
        lines: list[ReadLine] = []
        taken = parsed = 0
        while len(lines) < max_lines and taken < max_bytes:
            if self._spill is None:
                taken, parsed = self._take_buffered(lines, max_lines, max_bytes, taken, parsed,
                                                    max_parsed_bytes)
                if (len(lines) >= max_lines or taken >= max_bytes
                        or (max_parsed_bytes is not None and parsed >= max_parsed_bytes)):
                    break
            line = self._next_line(final=final)
            if line is None:
                break
            lines.append(line)
            taken += len(line.raw) + 1
            if max_parsed_bytes is not None:
                parsed += parsed_size_bound(line.raw)
                if parsed >= max_parsed_bytes:
                    break
        return lines

    def _take_buffered(self, lines: list[ReadLine], max_lines: int, max_bytes: int,
                       taken: int, parsed: int, max_parsed_bytes: int | None) -> tuple[int, int]:
        """`read_lines`' fast path: append the whole lines already in the buffer (none over the
        limit) in one split, up to the same bounds; returns the new `taken` and `parsed`.
        What is left (a partial or over-limit line, an empty buffer) is `_next_line`'s."""
        buf, pos = self._buf, self._pos
        end = buf.rfind(b"\n", pos)
        if end < 0 or max_lines <= len(lines):
            return taken, parsed
        parts = buf[pos:end].split(b"\n", max_lines - len(lines))[: max_lines - len(lines)]
        offset, first = self.offset, len(lines)
        append = lines.append
        limit = self._max_line
        parsed_limit = max_parsed_bytes if max_parsed_bytes is not None else -1
        # The parsed-size bound of all the lines at once (one pass in C, less the newlines
        # between them, which count one byte each and open no value: the same sum), line by
        # line only when it could reach the limit, to stop at the same line.
        exact = (parsed_limit >= 0
                 and parsed + parsed_size_bound(buf[pos:end]) - (len(parts) - 1) >= parsed_limit)
        for raw in parts:
            size = len(raw)
            if size > limit:
                break
            append(ReadLine(offset, raw))
            offset += size + 1
            taken += size + 1
            if exact:
                parsed += parsed_size_bound(raw)
                if parsed >= parsed_limit:
                    break
            if taken >= max_bytes:
                break
        if parsed_limit >= 0 and not exact:
            parsed += parsed_size_bound(buf[pos:pos + offset - self.offset]) - (len(lines) - first)
        self._pos += offset - self.offset
        self.offset = offset
        return taken, parsed

    def _next_line(self, *, final: bool) -> ReadLine | None:
        if self._spill is not None:
            return self._continue_spill(final=final)
        while True:
            newline = self._buf.find(b"\n", self._pos)
            if newline >= 0:
                start = self.offset
                raw = self._buf[self._pos:newline]
                self._pos = newline + 1
                self.offset += len(raw) + 1
                if len(raw) > self._max_line:  # complete, already in memory, but over the limit
                    spill = self._start_spill(start)
                    spill.write(raw)
                    self._spill = None
                    return spill.finish()
                return ReadLine(start, raw)
            pending = len(self._buf) - self._pos
            if pending > self._max_line:
                spill = self._start_spill(self.offset)
                spill.write(memoryview(self._buf)[self._pos:])
                self._buf, self._pos = b"", 0
                return self._continue_spill(final=final)
            chunk = self._file.read(self._chunk)
            if not chunk:
                if final and pending:
                    start = self.offset
                    raw = self._buf[self._pos:]
                    self._buf, self._pos = b"", 0
                    self.offset += len(raw)
                    return ReadLine(start, raw)
                return None
            self._buf = self._buf[self._pos:] + chunk
            self._pos = 0

    def _start_spill(self, offset: int) -> _Spill:
        self._spill = _Spill(offset, self._spill_to, self._name_of(offset))
        return self._spill

    def _continue_spill(self, *, final: bool) -> ReadLine | None:
        spill = self._spill
        assert spill is not None
        while True:
            chunk = self._file.read(self._chunk)
            if not chunk:
                if not final:
                    return None  # the writer may still be writing it
                self.offset = spill.offset + spill.size
                self._spill = None
                return spill.finish()
            newline = chunk.find(b"\n")
            if newline < 0:
                spill.write(chunk)
                continue
            spill.write(memoryview(chunk)[:newline])
            self._buf, self._pos = chunk, newline + 1
            self.offset = spill.offset + spill.size + 1
            self._spill = None
            return spill.finish()

    def has_more(self) -> bool:
        """Whether bytes follow the last line handed out."""
        return os.fstat(self._file.fileno()).st_size > self.offset

    def remove_and_collect_late_bytes(self) -> Iterator[bytes]:
        """Unlink the file, then yield what a bare producer wrote after the last line handed
        out, through the handle we still hold (the inode lives until we close it)."""
        os.unlink(self.path)
        fsync_dir(self.path.parent)
        return self._rest()

    def _rest(self) -> Iterator[bytes]:
        self._file.seek(self.offset)
        while chunk := self._file.read(self._chunk):
            yield chunk

    def close(self) -> None:
        """Close the handle (and an unfinished spill file)."""
        if self._spill is not None:
            self._spill.close()
        self._file.close()


def hand_back_late_bytes(reader: QueueReader, queue_path: Path) -> int:
    """Remove `.draining` and append to the live queue what a bare producer wrote into it
    after the last line read (under the producers' lock); the number of lines handed back."""
    late = reader.remove_and_collect_late_bytes()
    first = next((chunk for chunk in late if chunk.strip()), None)
    if first is None:
        return 0
    lines = 0
    last = b"\n"

    def counted() -> Iterator[bytes]:
        nonlocal lines, last
        for chunk in itertools.chain([first], late):
            lines += chunk.count(b"\n")
            last = chunk[-1:]
            yield chunk

    append_stream_locked(queue_path, counted())
    return lines + (last != b"\n")
