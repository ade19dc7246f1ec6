"""On a terminal, a one-shot command's answer comes first: it logs only warnings and errors
(its summary on stdout is the answer) unless `--verbose`; off a terminal every event is still
logged, as a unit or a CI log wants. The command runs as a process whose stderr is a real
pseudo-terminal."""

from __future__ import annotations

import os
import pty
import subprocess
import sys
from pathlib import Path

from tests.support import REPO, child_env


def run_on_a_terminal(*args: str, home: Path) -> tuple[int, str, str]:
    """`python -m <args>` with stderr on a pseudo-terminal; exit code, stdout, stderr."""
    leader, follower = pty.openpty()
    try:
        done = subprocess.run([sys.executable, "-m", *args], cwd=REPO, env=child_env(home),
                              stdout=subprocess.PIPE, stderr=follower, text=True,
                              timeout=120, check=False)
        os.close(follower)
        follower = -1
        chunks = []
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # EIO: the terminal's other side is closed and drained
                break
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        if follower >= 0:
            os.close(follower)
        os.close(leader)
    return done.returncode, done.stdout, b"".join(chunks).decode(errors="replace")


def config(tmp_path: Path) -> str:
    path = tmp_path / "kb.toml"
    path.write_text(f'[knowledgeBase]\ndataDir = "{tmp_path / "data"}"\n'
                    "reconciliationEnabled = true\n")
    return str(path)


def test_a_command_on_a_terminal_prints_its_summary_without_info_events(tmp_path: Path) -> None:
    code, out, err = run_on_a_terminal("daemons.reconcile", "--tick", "--dry-run",
                                       "--config", config(tmp_path), home=tmp_path / "home")
    assert code == 0, err
    assert out.startswith("reconcile pass"), out
    assert "tick.completed" not in err and "[info" not in err, err


def test_verbose_shows_every_event_on_a_terminal(tmp_path: Path) -> None:
    code, out, err = run_on_a_terminal("daemons.reconcile", "--tick", "--dry-run", "--verbose",
                                       "--config", config(tmp_path), home=tmp_path / "home")
    assert code == 0, err
    assert out.startswith("reconcile pass"), out
    assert "tick.completed" in err


def test_off_a_terminal_every_event_is_logged(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "daemons.reconcile", "--tick", "--dry-run",
                           "--config", config(tmp_path)], cwd=REPO,
                          env=child_env(tmp_path / "home"), capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert '"event": "tick.completed"' in done.stderr
