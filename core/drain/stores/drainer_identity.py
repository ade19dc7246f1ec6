"""A drainer's identity: a random id kept beside its queue file, created once.

Several drainers (one per host, each with its own queue) may share one PostgreSQL state
(`stateUrl`). Each tags the segment rows it commits with its id, so that when it rotates
to a new segment it forgets only its own older rows, never another host's row in flight
(forgetting that row would make the other host, after a crash, drain its file again from the
first byte: every mention counted twice).

The id lives in `<queue>.drainer-id` (32 hex digits and a newline), beside the queue it
names, so it follows the queue (and the host's `dataDir`) and never a copied configuration.
It is written once, atomically and durably (temp file, fsync, hard link that fails if another
process made it first, fsync of the folder); a file that exists but cannot be read or does
not hold an id is refused (`DrainerIdentityError`, exit 1): guessing a new id would orphan
the rows of the old one, and a copied id would make two drainers forget each other's rows.
A dry run never creates it (`read_drainer_id`).
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
from pathlib import Path

from core.base.io.files import create_private_file, fsync_dir, write_all
from core.base.rules.errors import StoreUnavailable

_ID = re.compile(r"[0-9a-f]{32}")


class DrainerIdentityError(StoreUnavailable):
    """The drainer's id file exists but is unreadable or holds no id: exit 1, nothing lost."""


def drainer_id_path(queue_path: Path) -> Path:
    """Where the drainer of `queue_path` keeps its id."""
    return queue_path.with_name(queue_path.name + ".drainer-id")


def read_drainer_id(queue_path: Path) -> str | None:
    """The id of the drainer of `queue_path`, or None when it has none yet; raises
    DrainerIdentityError when the file exists but holds no valid id."""
    path = drainer_id_path(queue_path)
    try:
        text = path.read_bytes().decode("ascii").strip()
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise DrainerIdentityError(f"drainer id {path}: unreadable ({exc}); restore it, or "
                                   "remove it only if no other drainer shares its id") from exc
    if not _ID.fullmatch(text):
        raise DrainerIdentityError(f"drainer id {path}: not a drainer id (32 hex digits); "
                                   "restore it, or remove it only if this host's queue is empty")
    return text


def drainer_id(queue_path: Path) -> str:
    """The id of the drainer of `queue_path`, created (once, durably) when it has none."""
    existing = read_drainer_id(queue_path)
    if existing is not None:
        return existing
    path = drainer_id_path(queue_path)
    temp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    fd = create_private_file(temp, os.O_WRONLY | os.O_TRUNC)
    try:
        write_all(fd, secrets.token_hex(16).encode() + b"\n")
        os.fsync(fd)
    finally:
        os.close(fd)
    try:
        os.link(temp, path)  # fails when another process created it first: theirs stands
    except FileExistsError:
        pass
    finally:
        with contextlib.suppress(FileNotFoundError):
            temp.unlink()
    fsync_dir(path.parent)
    made = read_drainer_id(queue_path)
    assert made is not None
    return made
