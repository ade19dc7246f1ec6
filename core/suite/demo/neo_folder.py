"""The neo demo's own folder (`kb-demo --neo`): claimed only when it does not exist or when the
demo made it (its marker file is there), emptied of what the demo made and nothing else, and
given a fresh graph file as a boot of the original leaves one.

A folder the demo did not make is never written into: an operator pointing `--neo` at a real
checkout gets exit 2, not a demo graph over the platform's own.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from core.base.io.files import create_private_file, make_private_dirs, write_all
from core.base.rules.errors import ConfigError
from core.base.rules.graph_schema import NeoEra
from core.base.state.neo.schema import NEO_GRAPH_DDL
from core.base.state.sqlite.connection import connect_file

#: The file that says the demo made the folder (and may empty it again).
MARKER = ".kb-neo-demo"
MARKER_TEXT = ("This folder was made by `kb-demo --neo` (a made-up neo.mjs checkout and the "
               "daemons' data folder). The next `kb-demo --neo` on it empties and rebuilds "
               "what the demo made here.\n")


def claim_demo_folder(folder: Path, *, made: tuple[str, ...]) -> None:
    """Make `folder` the demo's, empty of what an earlier run made (`made`: the names of the
    entries the demo creates in it; any other entry is left alone): created owner-only with
    its marker when absent; ConfigError (exit 2) when it exists without the marker."""
    if folder.exists() or folder.is_symlink():
        if not (folder / MARKER).is_file() or folder.is_symlink():
            raise ConfigError(f"{folder}: exists and was not made by the neo demo; name a "
                              "new folder (kb-demo --neo DIR)")
        for name in made:
            entry = folder / name
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink(missing_ok=True)
    make_private_dirs(folder)
    write_new_file(folder / MARKER, MARKER_TEXT)


def write_new_file(path: Path, text: str) -> None:
    """Write `text` to `path` owner-only, replacing only a file the demo made (the folder's
    entries it empties first); never follows a link."""
    if path.is_symlink() or (path.exists() and not path.is_file()):
        raise ConfigError(f"{path}: not a file the neo demo made")
    path.unlink(missing_ok=True)
    fd = create_private_file(path, os.O_WRONLY | os.O_EXCL)
    try:
        write_all(fd, text.encode())
    finally:
        os.close(fd)


async def create_original_graph(path: Path, era: NeoEra) -> None:
    """A graph file as a fresh boot of the original's `era` leaves it (its DDL, quoted in
    `core.base.state.neo.schema`), with no rows; FileExistsError when `path` exists (the demo
    never writes over a graph it did not create)."""
    if path.exists() or path.is_symlink():
        raise FileExistsError(f"{path}: exists")
    file = await connect_file(path, read_only=False)
    try:
        await file.prepare([NEO_GRAPH_DDL[era]])
    finally:
        await file.close()
