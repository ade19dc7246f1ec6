"""Advisory process locks (`flock`) that name their holder when refused.

Used for the embedded Chroma store (safe for one process only) and for the drainer (one drain
at a time). The kernel drops a flock when its holder dies, so a crash never leaves a stale lock
behind; the pid written inside is only there to tell the operator who holds it.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from core.base.io.files import create_private_file, make_private_dirs
from core.base.rules.errors import LockHeld


class ProcessLock:
    """An exclusive, non-blocking flock on `path`, held until `release()`."""

    def __init__(self, path: Path, *, purpose: str, hint: str = "") -> None:
        self.path = path
        self.purpose = purpose
        self.hint = hint
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        """Whether this object currently holds the lock."""
        return self._fd is not None

    def acquire(self, *, record: bool = True) -> ProcessLock:
        """Take the lock or raise LockHeld naming the holder's pid. With `record` false (a
        dry run, which writes nothing) an existing lock file is locked as it is, its bytes
        unchanged (the pid in it stays its last recorder's); a missing one is still created,
        empty, since the lock is what keeps a daemon from opening the store beside the run."""
        if not record and self.path.exists():
            fd = os.open(self.path, os.O_RDONLY)
        else:
            make_private_dirs(self.path.parent)
            fd = create_private_file(self.path, os.O_RDWR)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read_holder(fd)
            os.close(fd)
            message = f"{self.purpose} is held by pid {holder} (lock file {self.path})"
            raise LockHeld(message + (f"; {self.hint}" if self.hint else "")) from None
        except BaseException:
            os.close(fd)
            raise
        if record:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd
        return self

    def release(self) -> None:
        """Drop the lock (idempotent). The file stays; its pid is stale but harmless."""
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> ProcessLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


def _read_holder(fd: int) -> str:
    try:
        text = os.pread(fd, 64, 0).decode("ascii", "replace").strip()
    except OSError:
        return "unknown"
    return text or "unknown"
