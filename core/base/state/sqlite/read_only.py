"""How a dry run reads the SQLite state file without creating or changing a byte, and without
a wrong read when a writer is active.

The trap: the state file is in WAL mode, and SQLite opened `mode=ro` on a WAL file whose
`-wal` and `-shm` are absent CREATES them (a reader needs the shared-memory index), and being
read-only it can never delete them again: every `status` and dry run left two files behind.
(Measured with SQLite 3.40: `mode=ro` creates both and leaves both; `readonly_shm=1` without
a `-shm` creates the `-wal` and then fails; `locking_mode=EXCLUSIVE` on a read-only connection
fails with a disk I/O error.) So the URI depends on what is on disk (https://www.sqlite.org/
wal.html, "Read-Only Databases"; https://www.sqlite.org/uri.html):

- not in WAL mode (header bytes 18-19 are not 2): `mode=ro`. A rollback-journal reader only
  takes shared locks on the file itself and creates nothing.
- `-wal` and `-shm` both exist (a writer has the file open, or one was killed):
  `mode=ro&readonly_shm=1`. SQLite maps the existing index read-only (a private heap copy when
  it cannot trust it) and reads the committed frames of the WAL: the same answer a writer's
  reader gets, while not one byte of either file changes. Measured beside a writer in another
  process: plain `mode=ro` writes its read mark into the `-shm`, `readonly_shm=1` changes
  nothing, and both read every commit; the files a SIGKILLed writer left are read whole.
  (Within one process SQLite shares one mapping of the `-shm` between connections, so a
  read-only connection beside a writer of the same process writes through the writer's.)
- neither exists: no connection has the file open in WAL mode, so every committed page is in
  the file itself: `immutable=1`, which reads the file and nothing else (no locks, no side
  files). The trade-off: an immutable reader holds no read lock, so a writer that starts
  during the dry run can checkpoint into the file under it. That is never taken for a read:
  the file's identity, size, mtime and ctime are noted at open and checked after every query
  (`ImmutableRead.check`); once they changed, the query's answer is discarded and the dry run
  fails with StoreUnavailable (exit 1: run it again). A writer that only appends to a new WAL
  does not touch the file, and every query keeps reading the state as of the open: one
  consistent, slightly older snapshot.
- only `-wal` exists (a writer opening or closing this instant, or a `-shm` deleted by hand):
  refused with StoreUnavailable; reading it would need a `-shm`, that is creating one.
A writer that closes (deleting both files) between the look and the open is the one window
left: a few microseconds in which the `readonly_shm` open may still create a `-wal`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from core.base.rules.errors import StoreUnavailable

#: Offset of the file format's write and read versions in a SQLite header: 2 means WAL.
_FORMAT_VERSION_OFFSET = 18
_WAL_FORMAT = b"\x02\x02"


def side_files(path: Path) -> tuple[Path, Path]:
    """The `-wal` and `-shm` of the SQLite file at `path`."""
    return path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")


def _in_wal_mode(path: Path) -> bool:
    with open(path, "rb") as handle:
        handle.seek(_FORMAT_VERSION_OFFSET)
        return handle.read(2) == _WAL_FORMAT


@dataclass(frozen=True, slots=True)
class ImmutableRead:
    """A read of the file alone (`immutable=1`): what it looked like at open, so a writer
    that changes it under the read is noticed (`check`)."""

    path: Path
    stamp: tuple[int, int, int, int, int]

    @classmethod
    def noted(cls, path: Path) -> ImmutableRead:
        return cls(path, _stamp(path))

    def check(self) -> None:
        """StoreUnavailable when the file changed since the open (a writer started and wrote
        into it): what was just read may mix two states and is not to be used."""
        try:
            changed = _stamp(self.path) != self.stamp
        except FileNotFoundError:
            changed = True
        if changed:
            raise StoreUnavailable(
                f"SQLite {self.path}: a writer changed the file during this read-only run "
                "(nothing was written by it): run it again")


def _stamp(path: Path) -> tuple[int, int, int, int, int]:
    info = os.stat(path)
    return (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)


def read_only_uri(path: Path) -> tuple[str, ImmutableRead | None]:
    """The URI a dry run opens the existing file at `path` with (see the module docstring),
    and, for an immutable read, what to check after each query. StoreUnavailable when the
    file cannot be read without creating a side file."""
    uri = path.resolve().as_uri()
    try:
        wal_mode = _in_wal_mode(path)
    except OSError as exc:
        raise StoreUnavailable(f"SQLite {path}: open failed: {exc.strerror or exc}") from exc
    if not wal_mode:
        return f"{uri}?mode=ro", None
    wal, shm = side_files(path)
    if wal.exists() and shm.exists():
        return f"{uri}?mode=ro&readonly_shm=1", None
    if wal.exists():
        raise StoreUnavailable(
            f"SQLite {path}: {wal.name} exists without {shm.name} (a writer is opening or "
            "closing it, or stopped uncleanly): a read-only run cannot read it without "
            "creating one; run it again, or run a command that writes once")
    read = ImmutableRead.noted(path)
    return f"{uri}?mode=ro&immutable=1", read
