"""Work resumes by itself after a store restart: a real `python -m daemons.drain` on a
PostgreSQL of this module's own, the server restarted between ticks and in the middle of a
tick's write transaction (fast shutdown, and crash-like `immediate` in the long run), lines
appended all along. Every line must end up in the graph exactly once (each has its own
relationship `R<n>`, so it is one edge of weight 1.0; a line applied twice would weigh 1.1),
the tick the restart cut short fails as store unavailable, nothing lost, and the tick after
it succeeds, without the daemon being restarted.

Also: a one-shot run during an outage is exit 1 with that reason (never "another host leads"),
and a daemon on a `chroma run` server that is stopped and started again between ticks goes on
(the chromadb HTTP client reconnects by itself; nothing of ours has to).
`make test-reliability` runs the restarts many more times (`daemon_through_restarts`).
"""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncpg

from core.base.chroma import VectorStore
from core.base.runtime.config_file import load_config
from core.base.state.postgres.connection import WRITE_LOCK_KEY
from tests.chroma_server import ChromaServer
from tests.postgres_server import PostgresServer
from tests.support import (
    REPO,
    child_env,
    edge_mentions,
    log_events,
    run_module,
    seed,
    seed_concepts,
    wait_until,
)

CONCEPTS = 10
#: Lines of a round whose tick a restart cuts short inside its write transaction.
MID_TICK_LINES = 2_000
_databases = iter(range(1, 1_000_000))


def _line(n: int) -> bytes:
    return json.dumps({"source": f"CONCEPT:c{n % CONCEPTS}",
                       "target": f"CONCEPT:c{(n * 7 + 1) % CONCEPTS}",
                       "relationship": f"R{n}", "justification": f"line {n}",
                       "timestamp": n}).encode()


class Daemon:
    """One daemon process of `module` over a data folder; its JSON log lines in a file."""

    def __init__(self, root: Path, module: str, **keys: Any) -> None:
        root.mkdir(parents=True, exist_ok=True)
        self.root = root
        self.module = module
        lines = ["[knowledgeBase]", 'dataDir = "data"', 'logFormat = "json"']
        lines += [f"{k} = {json.dumps(v)}" for k, v in keys.items()]
        self.config = root / "kb.toml"
        self.config.write_text("\n".join(lines) + "\n", encoding="utf-8")
        self.settings = load_config(str(self.config), environ={}).settings
        self.log = root / "daemon.log"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with self.log.open("ab") as sink:
            self.process = subprocess.Popen(
                [sys.executable, "-m", self.module, "--config", str(self.config)], cwd=REPO,
                env=child_env(self.root / "home"), stdout=subprocess.DEVNULL, stderr=sink)

    def events(self, name: str) -> list[dict[str, Any]]:
        return log_events(self.log, name)

    def stop(self) -> int | None:
        if self.process is None:
            return None
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(30)
        return self.process.returncode


@dataclass
class RestartsOutcome:
    """What a drain daemon left in the graph after the state's server was restarted under it."""

    restarts: int
    lines_appended: int
    mentions: Counter[str] = field(default_factory=Counter)
    cut_short: int = 0
    reopened: int = 0
    daemon_exit: int | None = None

    @property
    def lost(self) -> list[str]:
        return [f"R{n}" for n in range(self.lines_appended) if f"R{n}" not in self.mentions]

    @property
    def applied_twice(self) -> list[str]:
        return [rel for rel, copies in self.mentions.items() if copies > 1]

    @property
    def ok(self) -> bool:
        """Nothing lost or applied twice, every restart inside a write transaction failed its
        tick (store unavailable, nothing lost), and the daemon ran to a clean stop."""
        return not self.lost and not self.applied_twice and self.daemon_exit == 0 \
            and self.cut_short >= self.restarts // 2

    def row(self) -> dict[str, int]:
        return {"linesAppended": self.lines_appended, "linesInGraph": len(self.mentions),
                "linesLost": len(self.lost), "appliedTwice": len(self.applied_twice)}


async def _restart_inside_a_write(server: PostgresServer, url: str, mode: str,
                                  append: Callable[[], None]) -> None:
    """Restart the server while the daemon is inside a write transaction: hold the write lock
    every write transaction takes first, `append` lines, wait until the daemon's transaction
    waits for that lock (it has begun, and cannot end), then restart."""
    conn = await asyncpg.connect(url)
    try:
        await conn.execute("SELECT pg_advisory_lock($1)", WRITE_LOCK_KEY)
        append()
        deadline = time.monotonic() + 60
        while not await conn.fetchval(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                " AND pid <> pg_backend_pid() AND xact_start IS NOT NULL"
                " AND wait_event_type = 'Lock'"):
            assert time.monotonic() < deadline, "no write transaction waited for the lock"
            await asyncio.sleep(0.01)
        await asyncio.to_thread(server.restart, mode=mode)
    finally:
        conn.terminate()


def daemon_through_restarts(root: Path, server: PostgresServer, url: str, *,
                            restarts: int) -> RestartsOutcome:
    """A drain daemon (ticks every second) on the database `url` of `server`, through
    `restarts` restarts of the server, alternately between ticks and inside a tick's write
    transaction (every fourth one crash-like, `immediate`), lines appended before each; then
    until every line is drained. What the graph holds, and how the daemon told it."""
    daemon = Daemon(root, "daemons.drain", stateUrl=url, remIntervalMs=1_000)
    asyncio.run(seed_concepts(daemon.settings, CONCEPTS))
    queue = daemon.settings.drain.lazy_edges_queue_path
    queue.parent.mkdir(parents=True, exist_ok=True)
    appended = 0

    def append(count: int) -> None:
        nonlocal appended
        with queue.open("ab") as sink:
            sink.write(b"".join(_line(n) + b"\n" for n in range(appended, appended + count)))
        appended += count

    def drained() -> bool:
        return not queue.exists() and not daemon.settings.drain.draining_path.exists()

    outcome = RestartsOutcome(restarts, 0)
    daemon.start()
    try:
        wait_until(lambda: bool(daemon.events("tick.completed")), 120, "the first tick")
        for number in range(restarts):
            mode = "immediate" if number % 4 == 3 else "fast"
            if number % 2 == 0:  # between ticks: the queue drained, the daemon idle
                append(300)
                wait_until(drained, 120, "the lines drained")
                server.restart(mode=mode)
            else:  # inside a tick: while one of its batches is in its write transaction
                asyncio.run(_restart_inside_a_write(server, url, mode,
                                                    lambda: append(MID_TICK_LINES)))
        append(300)
        wait_until(drained, 300, "every line drained after the last restart")
        completed = len(daemon.events("tick.completed"))
        wait_until(lambda: len(daemon.events("tick.completed")) > completed, 60,
                   "one more tick after the last drain")
    finally:
        outcome.daemon_exit = daemon.stop()
    outcome.lines_appended = appended
    outcome.mentions = asyncio.run(edge_mentions(url))
    outcome.cut_short = sum("store unavailable, nothing lost" in str(e.get("error"))
                            for e in daemon.events("tick.failed"))
    outcome.reopened = len(daemon.events("store.reopened"))
    return outcome


def test_a_drain_daemon_carries_on_through_restarts_between_and_inside_ticks_losing_nothing(
    tmp_path: Path, restartable_postgres: PostgresServer
) -> None:
    url = restartable_postgres.create_database(f"restarts{next(_databases)}")
    outcome = daemon_through_restarts(tmp_path / "drain", restartable_postgres, url,
                                      restarts=2)
    assert outcome.lost == [] and outcome.applied_twice == []
    assert len(outcome.mentions) == outcome.lines_appended
    assert outcome.cut_short >= 1, "the restart inside a tick failed that tick, nothing lost"
    assert outcome.reopened >= 2, "each restart's connection was replaced"
    assert outcome.daemon_exit == 0, "never restarted, stopped cleanly at the end"


def test_a_one_shot_run_during_an_outage_is_exit_1_store_unavailable_nothing_lost(
    tmp_path: Path, restartable_postgres: PostgresServer
) -> None:
    url = restartable_postgres.create_database(f"restarts{next(_databases)}")
    daemon = Daemon(tmp_path / "once", "daemons.drain", stateUrl=url,
                    reconciliationEnabled=True)
    asyncio.run(seed_concepts(daemon.settings, CONCEPTS))
    restartable_postgres.halt()
    try:
        for module in ("daemons.drain", "daemons.reconcile"):
            done = run_module(module, "--tick", "--json", "--config", str(daemon.config),
                              home=tmp_path / "home")
            assert done.returncode == 1, done.stderr
            error = json.loads(done.stdout)["error"]
            assert "store unavailable, nothing lost" in error and "leads" not in error
    finally:
        restartable_postgres.resume()


def test_a_daemon_goes_on_after_its_chroma_server_restarts_between_ticks(
    tmp_path: Path, chroma: ChromaServer
) -> None:
    daemon = Daemon(tmp_path / "drain", "daemons.drain", chromaUrl=chroma.url,
                    remIntervalMs=1_000)

    async def seed_summaries() -> None:
        vectors = await VectorStore.open(daemon.settings.chroma)
        try:  # a summary to live-ingest: every tick reads the server
            await seed(vectors, daemon.settings.chroma.summary_collection,
                       [("sum1", {"sessionId": "s1", "createdAt": 1_000, "title": "t"})])
        finally:
            await vectors.close()

    asyncio.run(seed_summaries())
    daemon.start()
    try:
        wait_until(lambda: bool(daemon.events("tick.completed")), 120, "the first tick")
        chroma.stop()
        wait_until(lambda: bool(daemon.events("tick.failed")), 60, "a tick without its server")
        chroma.start()
        failed = len(daemon.events("tick.failed"))
        completed = len(daemon.events("tick.completed"))
        wait_until(lambda: len(daemon.events("tick.completed")) > completed, 60,
                   "a tick after the server is back")
        assert len(daemon.events("tick.failed")) - failed <= 1, "the first try after it works"
    finally:
        assert daemon.stop() == 0
