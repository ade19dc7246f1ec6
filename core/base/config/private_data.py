"""Owner-only data: the modes kb-daemons creates with, which data folders it judges at start,
and what is wrong with one that other users can reach (pure).

Everything kb-daemons creates is its owner's alone, whatever the umask it was started under:
- every command sets the process umask to PRIVATE_UMASK once, first thing
  (`core.base.runtime.process.restrict_umask`), so what the libraries create on their own (the
  embedded Chroma store's SQLite file and index folders, SQLite's -wal and -shm) is
  owner-only too;
- the folders and files the project's own code creates carry PRIVATE_DIR_MODE /
  PRIVATE_FILE_MODE explicitly (`core.base.io.files`), so they are owner-only even in a process
  that never went through a command (a test, a library caller).
Nothing that exists is ever chmod'ed: a folder kb-daemons did not create is not its to change.

Which folders are judged at start (`judged_folders`), because kb-daemons alone writes them and
everything it keeps lives below them:
- `dataDir`, always: the graph file, the queue, the dead letters, the archives, the telemetry
  spool and the embedded store all default to folders inside it;
- `chromaPath`, the embedded store (no `chromaUrl`), when it is outside `dataDir`.
A folder inside an owner-only folder needs no judging: no other user can pass its parent.
Not judged: the folders of `graphDbPath` and `lazyEdgesQueuePath` when they are outside
`dataDir`. Such a file belongs to another program's layout (a neo.mjs deployment's graph under
its `.neo-ai-data`, a producer's queue folder), whose modes are that program's business.

A judged folder that exists is refused (exit 2, one line) when another user can reach it, as
PostgreSQL refuses its data directory: when its mode gives the group or others any right (an
`x` alone lets them open the files by name), and when another user owns it (they can read and
write it whatever its mode). The line names the folder, its mode and the command that fixes it.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final

from core.base.config.config_schema import TABLE

if TYPE_CHECKING:
    from core.base.config.config_settings import Settings

#: The umask every command runs under: nothing it or a library creates is open to others.
PRIVATE_UMASK: Final = 0o077
#: The mode of every file the project's code creates.
PRIVATE_FILE_MODE: Final = 0o600
#: The mode of every folder the project's code creates.
PRIVATE_DIR_MODE: Final = 0o700
#: The permission bits that let someone other than the owner in.
_OTHERS_BITS: Final = 0o077
_WRITE_BITS: Final = 0o022


@dataclass(frozen=True, slots=True)
class FolderOwner:
    """Who may use a folder: its permission bits and its owner (a user id, and a name when
    the system knows one)."""

    mode: int
    uid: int
    user: str | None = None


@dataclass(frozen=True, slots=True)
class JudgedFolder:
    """A data folder judged at start: the key that names it, and its path."""

    key: str
    path: Path


def judged_folders(settings: Settings) -> tuple[JudgedFolder, ...]:
    """The data folders kb-daemons refuses to run on when others can reach them (see the
    module docstring): `dataDir`, and the embedded store when it is outside `dataDir`."""
    folders = [JudgedFolder("dataDir", settings.data_dir)]
    chroma = settings.chroma
    if not chroma.server_mode and not chroma.path.is_relative_to(settings.data_dir):
        folders.append(JudgedFolder("chromaPath", chroma.path))
    return tuple(folders)


def _named(uid: int, user: str | None) -> str:
    return f"{user} (uid {uid})" if user else f"uid {uid}"


def folder_problem(folder: JudgedFolder, owner: FolderOwner, *, runner: FolderOwner) -> str | None:
    """Why other users can reach `folder` (one line: the key, the folder, its owner or mode,
    and how to fix it), or None when it is its runner's alone. `runner` is the user running
    the command (its `mode` is unused)."""
    head = f"{TABLE}.{folder.key}: {folder.path}"
    if owner.uid != runner.uid:
        return (f"{head} belongs to {_named(owner.uid, owner.user)}, not to "
                f"{_named(runner.uid, runner.user)} who runs this command, so another user "
                f"can read and write it: run the command as its owner")
    if owner.mode & _OTHERS_BITS == 0:
        return None
    what = "write to" if owner.mode & _WRITE_BITS else "read"
    return (f"{head} has mode {owner.mode & 0o7777:04o}, so other users can {what} it; the "
            f"data folders are owner-only: chmod 700 {shlex.quote(str(folder.path))}")
