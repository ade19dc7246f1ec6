"""The start-up check of the data folders: a folder other users can reach is refused before
anything is opened or created in it (which folders, and why: `core.base.config.private_data`)."""

from __future__ import annotations

import os
import pwd
import stat

from core.base.config.config import TABLE, Settings
from core.base.config.private_data import FolderOwner, JudgedFolder, folder_problem, judged_folders
from core.base.rules.errors import ConfigError


def _user_name(uid: int) -> str | None:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return None


def refuse_open_data_folders(settings: Settings) -> None:
    """ConfigError (exit 2, one line) for the first judged data folder that exists and that
    another user can reach; a folder that does not exist yet is created owner-only later.
    A path there that is not a folder is refused too: nothing could be kept in it."""
    where = str(settings.source) if settings.source is not None else "configuration"
    uid = os.geteuid()
    runner = FolderOwner(0, uid, _user_name(uid))
    for folder in judged_folders(settings):
        problem = _problem(folder, runner)
        if problem is not None:
            raise ConfigError(f"{where}: {problem}")


def _problem(folder: JudgedFolder, runner: FolderOwner) -> str | None:
    try:
        info = folder.path.stat()
    except FileNotFoundError:
        return None
    except OSError as exc:
        return f"{TABLE}.{folder.key}: {folder.path}: cannot be examined: {exc.strerror or exc}"
    if not stat.S_ISDIR(info.st_mode):
        return f"{TABLE}.{folder.key}: {folder.path} is not a folder"
    owner = FolderOwner(stat.S_IMODE(info.st_mode), info.st_uid, _user_name(info.st_uid))
    return folder_problem(folder, owner, runner=runner)
