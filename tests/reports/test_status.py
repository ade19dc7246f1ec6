"""`python -m daemons.status`: read-only, Chroma-free, and showing what the daemons recorded."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from core.drain.rules.dead_letters import UNREADABLE as UNREADABLE_DEAD_LETTER
from core.drain.rules.queue_lines import MAX_LINE_BYTES
from core.drain.stores.dead_letter_file import count_dead_letters as read_dead_letters
from core.drain.stores.queue_files import describe_queue_file as read_queue_file
from core.suite.status import gather_status
from core.suite.status_text import render_status_text
from daemons.status import main
from tests.support import child_env, make_settings, run_module

REPO = Path(__file__).resolve().parents[2]

# Holds the embedded store the way a running daemon does, until its stdin closes.
HOLD_STORE = """
import asyncio, sys
from core.base.runtime.config_file import load_config
from core.base.runtime.logs import configure_logging
from core.base.chroma import VectorStore

async def hold() -> None:
    configure_logging("json")  # logs on stderr: stdout carries only the handshake
    store = await VectorStore.open(load_config(sys.argv[1]).settings.chroma)
    print("held", flush=True)
    await asyncio.to_thread(sys.stdin.read)
    await store.close()

asyncio.run(hold())
"""


def write_config(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    config = folder / "kb.toml"
    config.write_text('[knowledgeBase]\ndataDir = "data"\n')
    return config


def run_command(folder: Path, module: str, *args: str) -> subprocess.CompletedProcess[str]:
    return run_module(module, "--config", str(folder / "kb.toml"), *args,
                      home=folder / "home")


# --- nothing yet -----------------------------------------------------------------------------


def test_status_of_an_empty_data_dir_is_nothing_yet_and_creates_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_config(tmp_path)
    with pytest.raises(SystemExit) as exited:
        main(["--config", str(config), "--json"])
    assert exited.value.code == 0
    out = capsys.readouterr().out
    assert len(out.splitlines()) == 1
    status = json.loads(out)
    assert status["graph"]["present"] is False and status["graph"]["nodes"] == 0
    assert status["queue"]["present"] is False and status["queue"]["lines"] == 0
    assert status["draining"]["present"] is False
    assert status["deadLetters"] == {**status["deadLetters"], "total": 0, "byReason": {}}
    assert (status["ticks"], status["tenants"], status["alerts"]) == ({}, [], [])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kb.toml"]


async def test_the_text_view_of_nothing_says_so(tmp_path: Path) -> None:
    text = render_status_text(await gather_status(make_settings(tmp_path)))
    assert "not created yet" in text and "none recorded yet" in text
    assert "none configured" in text


# --- the files -------------------------------------------------------------------------------


def test_the_oldest_line_time_comes_from_timestamp_then_last_attempt_then_mtime(
    tmp_path: Path,
) -> None:
    queue = tmp_path / "q.jsonl"
    queue.write_bytes(
        b'{"source":"a","target":"b","relationship":"R","timestamp":"2026-03-01T00:00:00Z"}\n'
        b"\n"
        b'{"source":"a","target":"c","relationship":"R","_drain":{"attempts":1,'
        b'"lastAttemptAt":1700000000000}}\n'
        b"not json\n"
        b'{"source":"a","target":"d","relationship":"R","timestamp":1780000000000}')
    status = read_queue_file(queue)
    assert (status.present, status.lines, status.retried_lines) == (True, 4, 1)
    assert status.bytes == queue.stat().st_size
    assert (status.oldest_ms, status.oldest_from) == (1_700_000_000_000, "lastAttemptAt")

    undated = tmp_path / "undated.jsonl"
    undated.write_bytes(b'{"source":"a","target":"b","relationship":"R"}\n')
    os.utime(undated, (1_750_000_000, 1_750_000_000))
    status = read_queue_file(undated)
    assert (status.oldest_ms, status.oldest_from) == (1_750_000_000_000, "mtime")


def test_an_over_long_line_is_counted_without_being_held(tmp_path: Path) -> None:
    queue = tmp_path / "q.jsonl"
    with queue.open("wb") as f:
        f.write(b'{"padding":"' + b"x" * (MAX_LINE_BYTES + 10) + b'"}\n')
        f.write(b'{"source":"a","target":"b","relationship":"R","timestamp":5000000000000}\n')
    status = read_queue_file(queue)
    assert status.lines == 2
    assert (status.oldest_ms, status.oldest_from) == (5_000_000_000_000, "timestamp")


def test_dead_letters_are_counted_by_reason_and_a_torn_record_is_unreadable(
    tmp_path: Path,
) -> None:
    dead = tmp_path / "dead.jsonl"
    dead.write_bytes(
        b'{"reason":"malformed","deadAt":10,"line":"x"}\n'
        b'{"reason":"malformed","deadAt":30,"line":"y"}\n'
        b'{"reason":"chroma-row-not-found","deadAt":20}\n'
        b'{"reason":"malfo')
    status = read_dead_letters(dead)
    assert status.total == 4
    assert dict(status.by_reason) == {"malformed": 2, "chroma-row-not-found": 1,
                                      UNREADABLE_DEAD_LETTER: 1}
    assert status.last_dead_ms == 30


# --- after the demo --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def demo_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A data dir after one `daemons.demo` run (its own process, as a newcomer runs it)."""
    folder = tmp_path_factory.mktemp("demo")
    write_config(folder)
    done = run_command(folder, "daemons.demo")
    assert done.returncode == 0, done.stderr
    yield folder


def status_json(folder: Path) -> dict[str, Any]:
    done = run_command(folder, "daemons.status", "--json")
    assert done.returncode == 0, done.stderr
    assert len(done.stdout.splitlines()) == 1
    parsed: dict[str, Any] = json.loads(done.stdout)
    return parsed


def test_status_json_after_the_demo_shows_backfill_dead_letters_drift_and_ticks(
    demo_dir: Path,
) -> None:
    status = status_json(demo_dir)
    graph = status["graph"]
    assert graph["present"] and graph["memories"]["backfilled"] == 3
    assert graph["sessions"]["backfilled"] == 5 and graph["sessions"]["minimal"] == 2
    assert graph["sessions"]["liveIngested"] == 3
    assert status["deadLetters"]["byReason"] == {"malformed": 3}
    queue = status["queue"]
    assert (queue["lines"], queue["retriedLines"], queue["oldestFrom"]) == (
        2, 2, "lastAttemptAt")
    assert status["draining"]["present"] is False
    ticks = status["ticks"]
    assert set(ticks) == {"drain", "reconcile"}
    assert ticks["drain"]["ok"] and ticks["drain"]["figures"]["drain"]["succeeded"] == 8
    assert ticks["reconcile"]["figures"]["staleCount"] == 6
    assert all(t["durationMs"] >= 0 and t["startedAt"] > 0 for t in ticks.values())
    tenants = {t["tenantId"]: t for t in status["tenants"]}
    assert tenants["acme"]["currentVersion"] == 3 and tenants["acme"]["lastStaleCount"] == 5
    assert tenants["globex"]["lastStaleCount"] is None
    # The force-pushed tenant: 3 chunks of 2 paths its manifest dropped, 1 path never ingested.
    assert (tenants["hooli"]["lastStaleCount"], tenants["hooli"]["lastManifestOrphanCount"],
            tenants["hooli"]["lastTotalOrphanCount"],
            tenants["hooli"]["lastMissingPathCount"]) == (0, 3, 3, 1)
    assert status["alerts"] == []


def test_status_works_while_another_process_holds_the_embedded_store(demo_dir: Path) -> None:
    graph_file = demo_dir / "data" / "graph.sqlite"
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_STORE, str(demo_dir / "kb.toml")],
        cwd=REPO, env=child_env(demo_dir / "home"), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL, text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        # The hold is real: a command that opens Chroma is refused...
        refused = run_command(demo_dir, "daemons.backfill", "--days", "1", "--dry-run")
        assert refused.returncode == 1 and "held by pid" in refused.stderr
        # ...while status, which never opens it, reads everything and writes nothing.
        before = (graph_file.read_bytes(), graph_file.stat().st_mtime_ns)
        started = time.monotonic()
        status = status_json(demo_dir)
        assert time.monotonic() - started < 10
        assert status["graph"]["nodes"] > 0 and status["tenants"]
        assert (graph_file.read_bytes(), graph_file.stat().st_mtime_ns) == before
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(timeout=30)


def test_the_text_view_after_the_demo_is_a_readable_table(demo_dir: Path) -> None:
    done = run_command(demo_dir, "daemons.status")
    assert done.returncode == 0, done.stderr
    for heading in ("Graph", "Lazy-edge queue", "Last ticks", "Tenants", "Recent alerts"):
        assert heading in done.stdout
    assert "dead letters: 3 (malformed 3)" in done.stdout
    acme = next(line for line in done.stdout.splitlines() if line.strip().startswith("acme"))
    assert acme.split()[:5] == ["acme", "acme/platform", "3", "5", "0"]


# --- drainers and the leader on SQLite ---------------------------------------------------------

#: `daemon_ticks` and `daemon_state` as the versions before per-drainer records made them.
OLD_STATE_DDL = """
CREATE TABLE daemon_ticks (daemon TEXT PRIMARY KEY, started_at INTEGER NOT NULL,
    finished_at INTEGER NOT NULL, duration_ms INTEGER NOT NULL, ok INTEGER NOT NULL,
    figures TEXT NOT NULL);
CREATE TABLE daemon_state (key TEXT PRIMARY KEY, value TEXT NOT NULL, updated_at INTEGER NOT NULL);
"""
OLD_DRAIN_FIGURES = {"drain": {"totalLines": 3, "succeeded": 2, "requeued": 1,
                               "deadLettered": 0}, "durationMs": 40}
#: The keys `status --json` had before drainers and the leader were shown: kept as they were.
KEYS_BEFORE = {"generatedAt", "config", "queue", "draining", "deadLetters", "graph", "ticks",
               "tenants", "alerts"}


def _old_state_file(folder: Path) -> Path:
    """A state file of an earlier version: one `drain` and one `reconcile` row in the
    one-row-per-daemon `daemon_ticks`, no `drainer_ticks`."""
    import sqlite3

    path = folder / "data/graph.sqlite"
    path.parent.mkdir(parents=True)
    db = sqlite3.connect(path)
    try:
        db.executescript(OLD_STATE_DDL)
        db.executemany("INSERT INTO daemon_ticks VALUES (?, ?, ?, ?, ?, ?)", [
            ("drain", 1_000_000, 1_000_040, 40, 1, json.dumps(OLD_DRAIN_FIGURES)),
            ("reconcile", 2_000_000, 2_000_500, 500, 1, json.dumps({"tenants": []}))])
        db.commit()
    finally:
        db.close()
    return path


def test_an_old_state_file_carries_on_with_its_drain_tick_shown_as_its_drainer(
    tmp_path: Path,
) -> None:
    write_config(tmp_path)
    path = _old_state_file(tmp_path)
    before = path.read_bytes()

    old = status_json(tmp_path)
    assert path.read_bytes() == before, "status reads an old file without changing it"
    assert set(old) == KEYS_BEFORE | {"drainers", "leader", "archives"}
    assert old["ticks"]["drain"]["startedAt"] == 1_000_000
    assert old["drainers"] == [{
        "drainer": "", "host": None, "local": True, "lastTick": old["ticks"]["drain"],
        "queueLines": None, "draining": None, "deadLetters": None,
        "gone": True}]  # its one tick is from 1970: long past drainerGoneIntervals
    assert old["leader"] == {"election": "none", "holder": None}
    text = run_command(tmp_path, "daemons.status").stdout
    assert "3 lines: 2 linked, 1 re-queued, 0 dead-lettered" in text.split("Drainers")[1]
    assert "Reconcile leader: no election (SQLite" in text

    (tmp_path / "data/memory-core").mkdir(parents=True)
    (tmp_path / "data/memory-core/lazy-edges.jsonl").write_text("{not json\n")
    ticked = run_command(tmp_path, "daemons.drain", "--tick", "--json")
    assert ticked.returncode == 0, ticked.stderr

    after = status_json(tmp_path)
    assert after["ticks"]["reconcile"] == old["ticks"]["reconcile"], "kept as it was"
    assert after["ticks"]["drain"]["startedAt"] > 1_000_000, "the drain row carries on"
    [drainer] = after["drainers"]
    assert drainer["drainer"] == "" and drainer["local"] is True
    assert drainer["lastTick"] == after["ticks"]["drain"]
    assert (drainer["queueLines"], drainer["deadLetters"], drainer["draining"]) == (0, 1, False)
    assert drainer["host"]
