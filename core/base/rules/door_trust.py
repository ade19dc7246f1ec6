"""When the store door may be trusted: pure judgements over what the kernel says of the door's
files and of the process at the other end of its socket (`core.base.door.door_socket` gathers
those facts; `core.base.door.chroma_door` and `core.base.runtime.store_door` act on the verdicts).

The door is a Unix socket in a folder of its own inside the store folder. Both ends trust
only what the kernel vouches for: who owns each entry, its type and mode (`lstat`/`fstat`),
and the uid and pid of the peer process (SO_PEERCRED). A verdict is `None` (trusted) or one
short clause saying what is wrong, for the command's one line and the daemon's log.
"""

from __future__ import annotations

from dataclasses import dataclass

#: The kinds of directory entry the door can meet (what `lstat` says, in words).
FOLDER = "folder"
SOCKET = "socket"
FILE = "regular file"
SYMLINK = "symlink"
OTHER = "special file"

#: Permission bits that let a user other than the owner reach an entry (group or other,
#: any of read, write, search). Every entry of the door is created without them.
OTHERS_BITS = 0o077


@dataclass(frozen=True, slots=True)
class Entry:
    """What the kernel says of one entry of the door: its kind, owner uid and mode bits."""

    kind: str
    owner: int
    mode: int


@dataclass(frozen=True, slots=True)
class Peer:
    """The process at the other end of a connected socket, as SO_PEERCRED gives it."""

    pid: int
    uid: int


def entry_problem(what: str, entry: Entry, *, expected: str, my_uid: int) -> str | None:
    """None when `entry` is of the `expected` kind, owned by `my_uid` and reachable by no one
    else; otherwise what is wrong with it (a symlink or another kind, another owner, a mode
    that lets others in), naming `what`."""
    if entry.kind != expected:
        return f"{what} is a {entry.kind}, not a {expected}"
    if entry.owner != my_uid:
        return f"{what} belongs to uid {entry.owner}, not to this user (uid {my_uid})"
    if entry.mode & OTHERS_BITS:
        return (f"{what} is reachable by other users (mode {entry.mode & 0o7777:04o}, "
                f"expected owner-only)")
    return None


def peer_uid_problem(peer: Peer, *, my_uid: int) -> str | None:
    """None when the peer runs as `my_uid`; otherwise that it is another user's process.
    The daemon refuses such a peer before reading a byte from it."""
    if peer.uid != my_uid:
        return f"uid {peer.uid} (pid {peer.pid}), not this user (uid {my_uid})"
    return None


def listener_problem(peer: Peer, *, my_uid: int, door_pid: int) -> str | None:
    """None when the process listening at the door is this user's and is the daemon the door
    names (`door_pid`); otherwise who it is instead. A command sends nothing before this
    verdict is None."""
    wrong_user = peer_uid_problem(peer, my_uid=my_uid)
    if wrong_user is not None:
        return f"the process listening at it is {wrong_user}"
    if peer.pid != door_pid:
        return (f"the process listening at it is pid {peer.pid}, not the daemon the door "
                f"names (pid {door_pid})")
    return None


def door_pid(text: str) -> int | None:
    """The daemon's pid from the door's pid file (one positive decimal number and a newline),
    or None when the text is anything else."""
    stripped = text.strip()
    if not stripped.isascii() or not stripped.isdigit() or len(stripped) > 10:
        return None
    pid = int(stripped)
    return pid if pid > 0 else None
