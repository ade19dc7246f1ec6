"""Owner-only data, through the commands as operators run them: under the usual umask 022
everything the commands and the daemons create is their owner's alone, and a data folder other
users can reach is refused at start with the `chmod` that fixes it
(core.base.config.private_data)."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from core.base.runtime.config_file import load_config
from core.drain.stores.dead_letter_file import spill_dir
from tests.support import REPO, child_env


def run(tmp_path: Path, *args: str, stdin: str | None = None
        ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", *args], cwd=REPO,
                          env=child_env(tmp_path / "home"), input=stdin, capture_output=True,
                          text=True, timeout=300, check=False)


def open_to_others(root: Path) -> list[str]:
    """Every path under `root` (itself included) that the group or others have any right on."""
    found = []
    for path in [root, *root.rglob("*")]:
        mode = path.lstat().st_mode & 0o777
        if mode & 0o077:
            found.append(f"{path.relative_to(root.parent)} {mode:04o}")
    return found


def write_config(tmp_path: Path, *lines: str) -> Path:
    config = tmp_path / "kb.toml"
    config.write_text("\n".join(["[knowledgeBase]", 'dataDir = "data"', 'logFormat = "json"',
                                 *lines]) + "\n")
    return config


def run_daemons_until_both_ticked(tmp_path: Path, config: Path) -> None:
    """`python -m daemons` until the drain and the reconcile daemon each recorded a tick of
    their own, then Ctrl-C."""
    ticks = tmp_path / "data/graph.sqlite"

    def ticked() -> set[str]:
        db = sqlite3.connect(f"file:{ticks}?mode=ro", uri=True)
        try:
            return {f"{r[0]} {r[1]}" for r in db.execute(
                "SELECT daemon, started_at FROM daemon_ticks")}
        finally:
            db.close()

    before = ticked()
    daemon = subprocess.Popen([sys.executable, "-m", "daemons", "--config", str(config)],
                              cwd=REPO, env=child_env(tmp_path / "home"),
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not {"drain", "reconcile"} <= {t.split()[0] for t in ticked() - before}:
        assert daemon.poll() is None, daemon.communicate()[1][-3000:]
        assert time.monotonic() < deadline, "the daemons never ticked"
        time.sleep(0.1)
    daemon.send_signal(signal.SIGINT)
    _, err = daemon.communicate(timeout=60)
    assert daemon.returncode == 0, err[-3000:]


def test_commands_and_daemons_under_umask_022_create_only_owner_only_paths(
    tmp_path: Path, umask_022: None,
) -> None:
    """The demo seeds the store, the graph and the queue from nothing; the daemons drain it
    (a dead letter, an over-limit line's side file) and tombstone (archives); a pass whose
    rows SQLite refuses spools them; a restore writes chunks back. Nothing is open to
    others."""
    config = write_config(tmp_path, "reconciliationEnabled = true",
                          "reconciliationAutoTombstone = true",
                          "reconciliationMaxStaleFraction = 1.0",
                          # The demo's ticks are recent: the daemons tick again this soon.
                          "remIntervalMs = 1000", "reconciliationIntervalMs = 1000")
    seeded = run(tmp_path, "daemons.demo", "--json", "--config", str(config))
    assert seeded.returncode == 0, seeded.stderr[-3000:]
    settings = load_config(str(config)).settings
    with settings.drain.lazy_edges_queue_path.open("ab") as queue:  # exists: keeps its mode
        queue.write(b'{"source": "memory:x"\n' + b'{"pad": "' + b"x" * (1 << 20) + b'"}\n')

    run_daemons_until_both_ticked(tmp_path, config)
    archives = sorted(settings.tombstones_dir.iterdir())
    assert archives, "the pass tombstoned nothing"
    assert settings.drain.dead_letter_path.exists()
    assert list(spill_dir(settings.drain.dead_letter_path).iterdir()), "the over-limit line's bytes"

    # SQLite refuses the pass's telemetry rows (at once: a held lock would cost busy_timeout
    # per write), so the pass spools them.
    refusing = sqlite3.connect(settings.state.graph_db_path, isolation_level=None)
    refusing.execute("CREATE TRIGGER refuse BEFORE INSERT ON kb_ingestion_metrics "
                     "BEGIN SELECT RAISE(ABORT, 'refused by the test'); END")
    try:
        spooled = run(tmp_path, "daemons.reconcile", "--tick", "--json", "--config", str(config))
    finally:
        refusing.execute("DROP TRIGGER refuse")
        refusing.close()
    assert json.loads(spooled.stdout)["unrecordedRows"] >= 1, spooled.stderr[-3000:]
    assert settings.telemetry_spool_path.exists()
    restored = run(tmp_path, "daemons.reconcile", "restore", str(archives[0]), "--config",
                   str(config))
    assert restored.returncode == 0, restored.stderr[-3000:]

    assert open_to_others(settings.data_dir) == []


@pytest.mark.parametrize(("mode", "can"), [(0o755, "read"), (0o711, "read"),
                                           (0o777, "write to"), (0o750, "read")])
def test_a_data_folder_others_can_reach_is_refused_with_the_chmod_that_fixes_it(
    tmp_path: Path, mode: int, can: str,
) -> None:
    config = write_config(tmp_path)
    data = tmp_path / "data"
    data.mkdir()
    data.chmod(mode)
    refused = run(tmp_path, "daemons.status", "--json", "--config", str(config))
    assert refused.returncode == 2
    [line] = refused.stderr.splitlines()
    assert line == (f"daemons.status: error: {config}: knowledgeBase.dataDir: {data} has mode "
                    f"{mode:04o}, so other users can {can} it; the data folders are "
                    f"owner-only: chmod 700 {data}")
    assert json.loads(refused.stdout) == {"ok": False, "error": line.split("error: ", 1)[1]}
    assert list(data.iterdir()) == [] and data.stat().st_mode & 0o777 == mode


def test_a_daemon_refuses_to_start_on_an_open_data_folder_and_creates_nothing(
    tmp_path: Path,
) -> None:
    config = write_config(tmp_path)
    data = tmp_path / "data"
    data.mkdir()
    data.chmod(0o755)
    refused = run(tmp_path, "daemons.drain", "--config", str(config))
    assert refused.returncode == 2, refused.stderr[-2000:]
    assert f"chmod 700 {data}" in refused.stderr
    assert list(data.iterdir()) == []


def test_a_data_folder_of_another_user_is_refused_and_an_embedded_store_outside_it_is_judged(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    data.mkdir(mode=0o700)
    os.chown(data, 65534, 65534)
    config = write_config(tmp_path)
    refused = run(tmp_path, "daemons.status", "--config", str(config))
    assert refused.returncode == 2
    assert "belongs to" in refused.stderr and "uid 65534" in refused.stderr
    os.chown(data, os.geteuid(), os.getegid())

    store = tmp_path / "elsewhere" / "chroma"
    store.mkdir(parents=True, mode=0o700)
    store.chmod(0o755)
    config = write_config(tmp_path, f'chromaPath = "{store}"')
    refused = run(tmp_path, "daemons.status", "--config", str(config))
    assert refused.returncode == 2
    assert f"knowledgeBase.chromaPath: {store} has mode 0755" in refused.stderr


def test_a_graph_file_and_queue_outside_the_data_folder_are_not_judged_and_left_as_they_are(
    tmp_path: Path,
) -> None:
    """Another program's layout (a neo.mjs deployment's graph and queue) keeps its modes."""
    theirs = tmp_path / "platform"
    theirs.mkdir()
    theirs.chmod(0o755)
    config = write_config(tmp_path, f'graphDbPath = "{theirs / "graph.sqlite"}"',
                          f'lazyEdgesQueuePath = "{theirs / "queue" / "edges.jsonl"}"')
    done = run(tmp_path, "daemons.enqueue", "--config", str(config),
               stdin='{"source": "memory:a", "target": "session:b", "relationship": "R"}\n')
    assert done.returncode == 0, done.stderr[-2000:]
    assert theirs.stat().st_mode & 0o777 == 0o755
    # What kb-daemons creates there is its own, and owner-only.
    assert (theirs / "queue").stat().st_mode & 0o777 == 0o700
    assert (theirs / "queue" / "edges.jsonl").stat().st_mode & 0o777 == 0o600
