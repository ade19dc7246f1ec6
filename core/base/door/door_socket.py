"""The store door on disk: a Unix socket in an owner-only folder of the embedded store, how the
daemon opens it and how a command reaches it after verifying who listens (the judgements are
`core.base.rules.door_trust`; the wire format and the command's client are
`core.base.door.chroma_door`; the daemon's server is `core.base.runtime.store_door`).

    <chromaPath>/.kb-daemons-door/         mode 0700, the daemon's user
        pid                                mode 0600, the daemon's pid
        socket                             mode 0600, the listening Unix socket

What it guarantees:
- **Only the owner reaches it.** The folder is created 0700 and chmodded so whatever the umask;
  the socket is bound inside it, chmodded 0600 and only then renamed to its name, listening.
  No TCP port exists: nothing another user could bind in its place.
- **A command verifies before it sends a byte.** It opens the folder without following
  symlinks and checks, from the descriptor, that the folder, the pid file and the socket are
  this user's and owner-only, and of their kind; it connects through that descriptor, then
  checks with SO_PEERCRED that the listening process is this user's and is the pid the door
  names. Anything else is DoorClosed (one clause saying why) and the socket is closed unused.
- **Deep store folders work.** A socket address holds 107 bytes; both sides bind and connect
  through `/proc/self/fd/<folder descriptor>/<name>` (a short path to the same folder, resolved
  by the kernel through the descriptor, so no rename of a parent can redirect it).
- **A door left behind is replaced, never trusted.** The daemon holds the store's lock when it
  opens the door, so no other daemon can be serving it: a leftover folder of its own user is
  emptied of the door's names and reused; one of another user, a symlink or a file in its
  place fails the start (one line), as it means someone else wrote into the store folder.
"""

from __future__ import annotations

import os
import socket
import stat
import struct
import time
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path

from core.base.rules.door_trust import (
    FILE,
    FOLDER,
    OTHER,
    SOCKET,
    SYMLINK,
    Entry,
    Peer,
    door_pid,
    entry_problem,
    listener_problem,
)
from core.base.rules.errors import StoreUnavailable

#: The door's folder inside an embedded store folder.
DOOR_FOLDER = ".kb-daemons-door"
#: The listening socket inside the door's folder (present only while a daemon listens).
SOCKET_NAME = "socket"
#: The daemon's pid inside the door's folder.
PID_NAME = "pid"
#: Where the socket is bound and the pid written before each is renamed to its name, so a
#: command never finds a socket that does not listen yet or a half-written pid.
_PENDING = ".pending"
#: The TCP door's file of earlier versions (a port and a secret); removed when a daemon opens
#: the new door, never read.
EARLIER_DOOR_FILE = ".kb-daemons.door"
#: The longest socket address Linux accepts (`sun_path` is 108 bytes with its NUL).
_SUN_PATH_MAX = 107
#: How often a command tries again to connect while the daemon's accept queue is full.
_QUEUE_FULL_RETRY_S = 0.02
_PEERCRED = struct.Struct("3i")  # struct ucred: pid, uid, gid
_OPEN_FOLDER = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class DoorClosed(Exception):
    """No daemon that can be trusted answers at the door (why is the message); nothing was
    sent to whatever is there."""


def door_folder(chroma_path: Path) -> Path:
    """The door's folder of the embedded store at `chroma_path`."""
    return chroma_path / DOOR_FOLDER


def door_path(chroma_path: Path) -> Path:
    """The door's socket: it exists while a daemon listens there (or one died and left it)."""
    return door_folder(chroma_path) / SOCKET_NAME


def peer_of(sock: socket.socket) -> Peer:
    """The process at the other end of a connected Unix socket, as the kernel records it."""
    raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _PEERCRED.size)
    pid, uid, _gid = _PEERCRED.unpack(raw)
    return Peer(pid=pid, uid=uid)


@dataclass(frozen=True, slots=True)
class Listening:
    """The daemon's open door: its listening socket, its folder's descriptor, and the identity
    (device, inode) of the socket file, so closing removes only what this daemon made."""

    sock: socket.socket
    folder: Path
    folder_fd: int
    identity: tuple[int, int]


# --------------------------------------------------------------------------------------------
# The daemon's side
# --------------------------------------------------------------------------------------------


def open_listening(chroma_path: Path, *, backlog: int) -> Listening:
    """Create (or reclaim) the owner-only door folder, write the pid, bind and listen;
    StoreUnavailable when the door's place holds something this daemon must not reuse."""
    _remove_earlier_door(chroma_path)
    folder = door_folder(chroma_path)
    fd = _own_folder(folder)
    try:
        for name in (SOCKET_NAME, PID_NAME, SOCKET_NAME + _PENDING, PID_NAME + _PENDING):
            with suppress(FileNotFoundError):
                os.unlink(name, dir_fd=fd)
        _write_pid(fd)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        try:
            pending = SOCKET_NAME + _PENDING
            sock.bind(_address(fd, folder, pending))
            os.chmod(pending, 0o600, dir_fd=fd)
            sock.listen(backlog)
            sock.setblocking(False)
            os.rename(pending, SOCKET_NAME, src_dir_fd=fd, dst_dir_fd=fd)
            made = os.stat(SOCKET_NAME, dir_fd=fd, follow_symlinks=False)
        except BaseException:
            sock.close()
            raise
    except BaseException:
        os.close(fd)
        raise
    return Listening(sock, folder, fd, (made.st_dev, made.st_ino))


def close_listening(listening: Listening) -> None:
    """Stop listening and remove the door, but only the socket this daemon bound (a door
    reopened by a later daemon is left alone); idempotent enough to call once in a finally."""
    fd = listening.folder_fd
    try:
        with suppress(OSError):
            found = os.stat(SOCKET_NAME, dir_fd=fd, follow_symlinks=False)
            if (found.st_dev, found.st_ino) == listening.identity:
                os.unlink(SOCKET_NAME, dir_fd=fd)
                with suppress(FileNotFoundError):
                    os.unlink(PID_NAME, dir_fd=fd)
                with suppress(OSError):  # not empty: something else is in it; leave it
                    os.rmdir(listening.folder)
        listening.sock.close()
    finally:
        os.close(fd)


def _own_folder(folder: Path) -> int:
    """The door folder's descriptor, created or reclaimed 0700; StoreUnavailable when it is
    not this user's folder."""
    with suppress(FileExistsError):
        os.mkdir(folder, 0o700)
    try:
        fd = os.open(folder, _OPEN_FOLDER)
    except OSError:
        raise _refuse(folder, _lstat_entry(folder)) from None
    found = _entry(os.fstat(fd))
    if found.kind != FOLDER or found.owner != os.geteuid():
        os.close(fd)
        raise _refuse(folder, found)
    os.fchmod(fd, 0o700)
    return fd


def _refuse(folder: Path, found: Entry | None) -> StoreUnavailable:
    problem = (entry_problem(str(folder), found, expected=FOLDER, my_uid=os.geteuid())
               if found is not None else None) or f"{folder} cannot be opened as a folder"
    return StoreUnavailable(f"refusing to open the store door: {problem}; something other "
                            f"than this daemon's user wrote into the store folder: remove it "
                            f"and start again")


def _write_pid(fd: int) -> None:
    pending = PID_NAME + _PENDING
    pid_fd = os.open(pending, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                     | os.O_CLOEXEC, 0o600, dir_fd=fd)
    try:
        os.fchmod(pid_fd, 0o600)  # the umask may have taken the owner's own bits
        os.write(pid_fd, f"{os.getpid()}\n".encode("ascii"))
    finally:
        os.close(pid_fd)
    os.rename(pending, PID_NAME, src_dir_fd=fd, dst_dir_fd=fd)


def _remove_earlier_door(chroma_path: Path) -> None:
    """The TCP door's file of an earlier version held a secret: gone, when it is ours."""
    earlier = chroma_path / EARLIER_DOOR_FILE
    found = _lstat_entry(earlier)
    if found is not None and found.kind == FILE and found.owner == os.geteuid():
        with suppress(FileNotFoundError):
            earlier.unlink()


# --------------------------------------------------------------------------------------------
# The command's side
# --------------------------------------------------------------------------------------------


def connect_verified(chroma_path: Path, *, timeout: float) -> tuple[socket.socket, int]:
    """A socket connected to the daemon serving the store at `chroma_path`, and its pid, once
    the door is verified (see the module docstring); nothing sent on it. DoorClosed otherwise."""
    folder = door_folder(chroma_path)
    try:
        fd = os.open(folder, _OPEN_FOLDER)
    except FileNotFoundError:
        raise DoorClosed(f"no daemon serves it (no door {folder})") from None
    except OSError as exc:
        found = _lstat_entry(folder)
        problem = (entry_problem(f"its door {folder}", found, expected=FOLDER,
                                 my_uid=os.geteuid()) if found is not None else None)
        raise _untrusted(folder, problem or f"its door {folder}: {exc.strerror}") from None
    try:
        _check(folder, _entry(os.fstat(fd)), expected=FOLDER, what=f"its door {folder}")
        pid = _read_pid(fd, folder)
        try:
            found = _entry(os.stat(SOCKET_NAME, dir_fd=fd, follow_symlinks=False))
        except FileNotFoundError:
            raise _stale(folder, pid, "it has no socket") from None
        _check(folder, found, expected=SOCKET, what=f"{folder / SOCKET_NAME}")
        return _connect(fd, folder, pid, timeout=timeout), pid
    finally:
        os.close(fd)


def _connect(fd: int, folder: Path, pid: int, *, timeout: float) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
    try:
        sock.settimeout(timeout)
        try:
            _connect_within(sock, _address(fd, folder, SOCKET_NAME), timeout=timeout)
        except (ConnectionRefusedError, FileNotFoundError):
            raise _stale(folder, pid, "nothing listens at it") from None
        except OSError as exc:
            raise DoorClosed(f"its door {folder} cannot be reached: "
                             f"{exc.strerror or exc}; nothing was sent") from None
        problem = listener_problem(peer_of(sock), my_uid=os.geteuid(), door_pid=pid)
        if problem is not None:
            raise _untrusted(folder, problem)
        return sock
    except BaseException:
        sock.close()
        raise


def _connect_within(sock: socket.socket, address: str | bytes, *, timeout: float) -> None:
    """Connect, waiting up to `timeout` while the daemon's accept queue is full (a Unix socket
    then answers EAGAIN at once)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            sock.connect(address)
            return
        except BlockingIOError:
            if time.monotonic() >= deadline:
                raise TimeoutError("the daemon's door accepts no connection (queue full)") \
                    from None
            time.sleep(_QUEUE_FULL_RETRY_S)


def _read_pid(fd: int, folder: Path) -> int:
    """The pid the door names; its file must be this user's own regular file. O_NONBLOCK: a
    FIFO planted in its place must not hang the command (it is then refused by kind)."""
    try:
        pid_fd = os.open(PID_NAME, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                         dir_fd=fd)
    except FileNotFoundError:
        raise _stale(folder, None, "it names no daemon (no pid file)") from None
    except OSError:
        found = _lstat_entry(folder / PID_NAME)
        raise _untrusted(folder, (entry_problem(f"{folder / PID_NAME}", found, expected=FILE,
                                                my_uid=os.geteuid()) if found else None)
                         or f"{folder / PID_NAME} cannot be read") from None
    try:
        _check(folder, _entry(os.fstat(pid_fd)), expected=FILE, what=f"{folder / PID_NAME}")
        text = os.read(pid_fd, 32).decode("ascii", "replace")
    finally:
        os.close(pid_fd)
    pid = door_pid(text)
    if pid is None:
        raise _untrusted(folder, f"{folder / PID_NAME} holds no pid")
    return pid


def _check(folder: Path, found: Entry, *, expected: str, what: str) -> None:
    problem = entry_problem(what, found, expected=expected, my_uid=os.geteuid())
    if problem is not None:
        raise _untrusted(folder, problem)


def _stale(folder: Path, pid: int | None, why: str) -> DoorClosed:
    gone = f" (its daemon, pid {pid}, is gone)" if pid is not None else ""
    return DoorClosed(f"its door {folder} is stale: {why}{gone}; nothing was sent")


def _untrusted(folder: Path, problem: str) -> DoorClosed:
    return DoorClosed(f"its door {folder} is not to be trusted: {problem}; nothing was sent")


# --------------------------------------------------------------------------------------------
# Both sides
# --------------------------------------------------------------------------------------------


def _address(fd: int, folder: Path, name: str) -> str | bytes:
    """A socket address for `name` in the folder open as `fd`: through /proc (see the module
    docstring), else the path itself when it fits."""
    via_fd = f"/proc/self/fd/{fd}"
    if os.path.isdir(via_fd):
        return f"{via_fd}/{name}"
    direct = os.fsencode(folder / name)
    if len(direct) > _SUN_PATH_MAX:
        raise OSError(f"{folder / name} is longer than a socket address may be "
                      f"({_SUN_PATH_MAX} bytes) and /proc is not mounted")
    return direct


def _entry(found: os.stat_result) -> Entry:
    mode = found.st_mode
    kind = (FOLDER if stat.S_ISDIR(mode) else SOCKET if stat.S_ISSOCK(mode)
            else FILE if stat.S_ISREG(mode) else SYMLINK if stat.S_ISLNK(mode) else OTHER)
    return Entry(kind=kind, owner=found.st_uid, mode=stat.S_IMODE(mode))


def _lstat_entry(path: Path) -> Entry | None:
    try:
        return _entry(os.lstat(path))
    except OSError:
        return None
