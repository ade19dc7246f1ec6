"""The malloc arena cap every command sets at start-up (`core.base.runtime.process`): threads that
allocate share at most two glibc arenas, and an operator's own MALLOC_ARENA_MAX wins.

Arenas are counted the way glibc reports them (`malloc_info`: one `<heap nr=...>` per arena),
in a fresh interpreter each time, since a cap only governs arenas made after it is set.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from core.base.runtime.process import ARENA_ENV, MALLOC_ARENAS

ROOT = Path(__file__).resolve().parents[2]

#: Cap (or not), then eight threads allocate at the same time; print what the cap call
#: returned and how many arenas glibc reports.
COUNT_ARENAS = """
import ctypes, sys, tempfile, threading
from core.base.runtime.process import limit_malloc_arenas
applied = limit_malloc_arenas() if sys.argv[1] == "capped" else None
barrier = threading.Barrier(8)
def allocate():
    barrier.wait()
    blocks = [bytearray(64 * 1024) for _ in range(50)]
    barrier.wait()
threads = [threading.Thread(target=allocate) for _ in range(8)]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
libc = ctypes.CDLL(None)
libc.fdopen.restype = ctypes.c_void_p
libc.fdopen.argtypes = (ctypes.c_int, ctypes.c_char_p)
libc.malloc_info.argtypes = (ctypes.c_int, ctypes.c_void_p)
libc.fflush.argtypes = (ctypes.c_void_p,)
with tempfile.TemporaryFile() as report:
    stream = libc.fdopen(report.fileno(), b"w")
    libc.malloc_info(0, stream)
    libc.fflush(stream)
    report.seek(0)
    print(applied, report.read().decode().count("<heap nr="))
"""


def arenas_after_eight_threads(mode: str, **env: str) -> tuple[str, int]:
    clean = {k: v for k, v in os.environ.items() if k != ARENA_ENV}
    done = subprocess.run([sys.executable, "-c", COUNT_ARENAS, mode], cwd=ROOT,
                          env={**clean, **env}, capture_output=True, text=True, check=True,
                          timeout=60)
    applied, count = done.stdout.split()
    return applied, int(count)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc only")
def test_threads_share_at_most_two_arenas_once_the_cap_is_set() -> None:
    _, uncapped = arenas_after_eight_threads("uncapped")
    applied, capped = arenas_after_eight_threads("capped")
    assert uncapped > MALLOC_ARENAS, "without the cap each thread gets an arena of its own"
    assert (applied, capped) == ("True", MALLOC_ARENAS)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc only")
def test_an_operators_malloc_arena_max_wins() -> None:
    applied, count = arenas_after_eight_threads("capped", **{ARENA_ENV: "4"})
    assert (applied, count) == ("False", 4)
