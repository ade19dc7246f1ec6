"""The daemons as real processes: signals, graceful shutdown, nothing lost."""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from tests.support import child_env

ROOT = Path(__file__).resolve().parents[2]


def start(args: list[str], tmp_path: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", *args], cwd=ROOT,
                            env=child_env(tmp_path / "home"), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)


def wait_for(predicate: object, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():  # type: ignore[operator]
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.01)


def test_sigterm_during_a_long_drain_exits_0_and_loses_no_line(tmp_path: Path) -> None:
    config = tmp_path / "kb.toml"
    config.write_text('[knowledgeBase]\ndataDir = "data"\nlogFormat = "json"\n')
    data = tmp_path / "data"
    data.mkdir()
    graph = sqlite3.connect(data / "graph.sqlite")
    graph.executescript(
        "CREATE TABLE nodes (id TEXT PRIMARY KEY, label TEXT NOT NULL, properties TEXT NOT NULL);"
        "INSERT INTO nodes VALUES ('CONCEPT:a', 'CONCEPT', '{}'), ('CONCEPT:b', 'CONCEPT', '{}');")
    graph.close()
    total = 60_000
    queue = data / "memory-core/lazy-edges.jsonl"
    queue.parent.mkdir()
    queue.write_text("".join(
        json.dumps({"source": "CONCEPT:a", "target": "CONCEPT:b", "relationship": f"R{i}"})
        + "\n" for i in range(total)))
    draining = queue.with_name(queue.name + ".draining")

    daemon = start(["daemons.drain", "--config", str(config)], tmp_path)
    wait_for(lambda: draining.exists() or daemon.poll() is not None, timeout=60)
    time.sleep(0.3)  # let it get into the batches
    daemon.send_signal(signal.SIGTERM)
    _, err = daemon.communicate(timeout=60)
    events = [json.loads(x)["event"] for x in err.decode().splitlines() if x.startswith("{")]
    assert daemon.returncode == 0, err.decode()[-2000:]
    assert "drain.interrupted" in events, "the signal arrived mid-drain"
    assert "shutdown.completed" in events
    assert not any("raised an exception" in e for e in events)

    graph = sqlite3.connect(data / "graph.sqlite")
    ok, figures = graph.execute("SELECT ok, figures FROM daemon_ticks WHERE daemon = 'drain'"
                                ).fetchone()
    graph.close()
    assert ok == 0 and "stopped mid-drain" in json.loads(figures)["incomplete"], \
        "a stopped tick is not recorded as a completed one"

    # Restarted with the hour-long default interval, it drains the rest at once.
    restarted = start(["daemons.drain", "--config", str(config)], tmp_path)

    def all_applied() -> bool:
        db = sqlite3.connect(f"file:{data / 'graph.sqlite'}?mode=ro", uri=True)
        try:
            return bool(db.execute("SELECT COUNT(*) FROM edges").fetchone()[0] == total)
        finally:
            db.close()

    try:
        wait_for(lambda: (all_applied() and not draining.exists()) or restarted.poll() is not None,
                 timeout=90)
    finally:
        restarted.send_signal(signal.SIGTERM)
        _, err = restarted.communicate(timeout=60)
    assert restarted.returncode == 0, err.decode()[-2000:]
    scheduled = [json.loads(x) for x in err.decode().splitlines()
                 if x.startswith("{") and '"job.scheduled"' in x]
    assert scheduled[0]["firstTickInS"] == 0 and scheduled[0]["resuming"] is True
    assert scheduled[0]["message"] == f"first tick in 0 s (at {scheduled[0]['firstTickAt']})"
    graph = sqlite3.connect(data / "graph.sqlite")
    weights = graph.execute("SELECT COUNT(*), MIN(weight), MAX(weight) FROM edges").fetchone()
    graph.close()
    assert weights == (total, 1.0, 1.0), "every line applied exactly once"
    assert not draining.exists()


def test_both_daemons_run_in_one_process_tick_and_stop_cleanly_on_ctrl_c(
    tmp_path: Path,
) -> None:
    config = tmp_path / "kb.toml"
    config.write_text('[knowledgeBase]\ndataDir = "data"\nlogFormat = "json"\n'
                      "reconciliationEnabled = true\n")
    daemon = start(["daemons", "--config", str(config)], tmp_path)
    ticks = tmp_path / "data/graph.sqlite"

    def both_ticked() -> bool:
        if not ticks.exists():
            return False
        db = sqlite3.connect(f"file:{ticks}?mode=ro", uri=True)
        try:
            return {r[0] for r in db.execute("SELECT daemon FROM daemon_ticks")} == {
                "drain", "reconcile"}
        except sqlite3.OperationalError:
            return False
        finally:
            db.close()

    wait_for(lambda: both_ticked() or daemon.poll() is not None, timeout=60)
    daemon.send_signal(signal.SIGINT)
    _, err = daemon.communicate(timeout=60)
    assert daemon.returncode == 0, err.decode()[-2000:]
    events = [json.loads(x)["event"] for x in err.decode().splitlines() if x.startswith("{")]
    assert events.count("tick.completed") >= 2
    assert events[-1] == "shutdown.completed"
