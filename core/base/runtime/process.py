"""Process-wide settings made once, at the start of every command, before any store opens:
the umask that keeps everything the process creates owner-only, and the malloc arena cap.

The umask. The project's own code creates its folders and files owner-only explicitly
(`core.base.io.files`), but the libraries it drives create files of their own: the embedded
Chroma store its `chroma.sqlite3`, its index folders and files, SQLite its journals. Under the
usual umask 022 those were 0644 in 0755 folders, readable by every local user.
`restrict_umask` sets PRIVATE_UMASK (`core.base.config.private_data`) for the whole process, so
whatever anything in it creates is its owner's alone; it is called first thing in
`daemons.cli.commands.run_main`, the one place every command starts.

The malloc arena cap. glibc gives each thread that allocates its own malloc arena, up to eight
per core, and memory freed in one arena is not reused by another. A daemon has many threads
that allocate: embedded Chroma's worker pool, aiosqlite's thread, asyncio's executor. Its
resident set therefore grows by whatever each arena last held, long after a pass has freed it.

Capping the arenas at two bounds that growth and costs no time (docs/performance.md,
"Memory at 1,000,000 chunks").
"""

from __future__ import annotations

import ctypes
import os
from typing import Final

from core.base.config.private_data import PRIVATE_UMASK

#: glibc's `mallopt` parameter for the arena cap (`M_ARENA_MAX` in malloc.h).
M_ARENA_MAX: Final = -8
#: The arenas a daemon's process may have: the main thread's and one for every other thread.
MALLOC_ARENAS: Final = 2
#: The environment variable with which glibc reads an operator's own cap at start-up.
ARENA_ENV: Final = "MALLOC_ARENA_MAX"


def restrict_umask() -> int:
    """Set the process umask to PRIVATE_UMASK (nothing created from here on is open to the
    group or others) and return the one it replaces. Call it before anything is created."""
    return os.umask(PRIVATE_UMASK)


def limit_malloc_arenas(arenas: int = MALLOC_ARENAS) -> bool:
    """Cap glibc's malloc arenas at `arenas` for the rest of the process, and return whether
    the cap was set. Call it before threads start: an arena already made stays.

    The cap is left alone (returns False) in two cases:
    - the operator set MALLOC_ARENA_MAX, which glibc has already applied, so theirs wins;
    - the C library has no `mallopt` or refuses the call (not glibc: musl, macOS). Nothing
      else changes there.
    """
    if os.environ.get(ARENA_ENV):
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    return bool(mallopt(M_ARENA_MAX, arenas))
