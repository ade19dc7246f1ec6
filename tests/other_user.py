"""A second local Unix user for the tests of what another user can do (squat, flood, send),
created for a test module and removed after it, and the intruder it runs
(`tests/door_intruder.py`, stdlib only, run by that user's own interpreter process).

Creating a user needs root and `useradd`; the suite runs as root in CI. Where it cannot, the
tests that need one are skipped with the reason (never silently passed).
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

INTRUDER = Path(__file__).with_name("door_intruder.py")
#: Interpreters the other user may be able to run (the venv's may live under /root, which
#: another user cannot enter); the first that runs as that user is used.
PYTHONS = ("/usr/bin/python3", "/usr/local/bin/python3", sys.executable)


@dataclass(frozen=True)
class OtherUser:
    """A local user other than the one running the tests."""

    name: str
    uid: int
    gid: int
    python: str
    #: Every intruder started, so none outlives the user (userdel refuses a user whose
    #: processes run, and would leave it behind).
    started: list[subprocess.Popen[str]] = field(default_factory=list)

    def start(self, *args: str) -> subprocess.Popen[str]:
        """The intruder, run as this user (its own uid and gid, no supplementary groups),
        with `args`; its stdin is a pipe that ends it when closed."""
        intruder = subprocess.Popen(
            [self.python, "-I", "-c", INTRUDER.read_text(encoding="utf-8"), *args],
            user=self.uid, group=self.gid, extra_groups=[], cwd="/",
            env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"},
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.started.append(intruder)
        return intruder


def finish(intruder: subprocess.Popen[str], timeout: float = 60) -> dict[str, Any]:
    """End the intruder (its stdin closed) and return what it reports it saw."""
    out, err = intruder.communicate(timeout=timeout)
    assert intruder.returncode == 0, err[-3000:]
    report: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    return report


@contextmanager
def other_user() -> Iterator[OtherUser]:
    """A fresh user (no home, no login shell), removed with its group afterwards."""
    if os.geteuid() != 0:
        pytest.skip("a second Unix user needs root to create (the suite runs as root in CI)")
    useradd, userdel = shutil.which("useradd"), shutil.which("userdel")
    if useradd is None or userdel is None:
        pytest.skip("a second Unix user needs useradd and userdel, which are not installed")
    name = f"kbint{secrets.token_hex(4)}"
    made = subprocess.run([useradd, "--no-create-home", "--home-dir", "/nonexistent",
                           "--shell", "/usr/sbin/nologin", "--user-group", name],
                          capture_output=True, text=True, check=False)
    if made.returncode != 0:
        pytest.skip(f"useradd could not create a second user: {made.stderr.strip()}")
    started: list[subprocess.Popen[str]] = []
    try:
        import pwd

        entry = pwd.getpwnam(name)
        python = _python_for(entry.pw_uid, entry.pw_gid)
        if python is None:
            pytest.skip(f"no Python interpreter that user {name} may run (tried "
                        f"{', '.join(PYTHONS)})")
        yield OtherUser(name, entry.pw_uid, entry.pw_gid, python, started)
    finally:
        for intruder in started:
            if intruder.poll() is None:
                intruder.kill()
            intruder.communicate()
        removed = subprocess.run([userdel, name], capture_output=True, text=True, check=False)
    assert removed.returncode == 0, f"user {name} left behind: {removed.stderr.strip()}"


def _python_for(uid: int, gid: int) -> str | None:
    for python in PYTHONS:
        try:
            ran = subprocess.run([python, "-I", "-c", "import socket, select, json"],
                                 user=uid, group=gid, extra_groups=[], cwd="/",
                                 capture_output=True, timeout=30, check=False)
        except OSError:
            continue
        if ran.returncode == 0:
            return python
    return None


def let_traverse(*folders: Path) -> None:
    """Let any user pass through (search, not list) each of `folders`, so what the other user
    meets past them is the door's own check, not a folder's mode."""
    for folder in folders:
        folder.chmod(folder.stat().st_mode & 0o7777 | 0o011)
