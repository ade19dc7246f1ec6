"""One active reconciler, a standby: two real `python -m daemons.reconcile` processes (two data
folders as two hosts) on one PostgreSQL (the session's) and one `chroma run` server.

Only the leader runs passes; kill -9 of the leader, the standby's pass runs within an interval;
a leader paused with SIGSTOP mid-pass and resumed after the standby took the lead deletes
nothing and logs why (`leadership.fenced`); a leader stopped inside a statement on its lock
session (a renewal waiting for a row lock the test holds: the session is active, never idle,
so `idle_session_timeout` cannot end it) is ended by one of two racing standbys within one
lease and one heartbeat, the standby that leads deletes only as leader, and the old leader,
resumed, deletes nothing."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from core.base.chroma import VectorStore
from core.base.rules.tenants import TENANT_CONFIG_LABEL
from core.base.runtime.config_file import load_config
from core.base.state.graph import upsert_node
from core.base.state.state import open_graph
from tests.chroma_server import ChromaServer
from tests.postgres_server import PostgresServer
from tests.support import REPO, child_env, log_events, read_archived_chunks, seed, wait_until

INTERVAL_MS = 3_000
_databases = iter(range(1, 1_000_000))


class Host:
    """One reconcile daemon in a data folder of its own; its JSON log lines in a file."""

    def __init__(self, root: Path, name: str, *, state_url: str, chroma_url: str,
                 interval_ms: int = INTERVAL_MS, **keys: Any) -> None:
        self.root = root / name
        self.root.mkdir(parents=True)
        lines = ["[knowledgeBase]", 'dataDir = "data"', f"stateUrl = {json.dumps(state_url)}",
                 f"chromaUrl = {json.dumps(chroma_url)}", "reconciliationEnabled = true",
                 f"reconciliationIntervalMs = {interval_ms}"]
        lines += [f"{k} = {json.dumps(v)}" for k, v in keys.items()]
        self.config = self.root / "kb.toml"
        self.config.write_text("\n".join(lines) + "\n", encoding="utf-8")
        self.log = self.root / "daemon.log"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with self.log.open("wb") as sink:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "daemons.reconcile", "--config", str(self.config)],
                cwd=REPO, env=child_env(self.root / "home"), stdout=subprocess.DEVNULL,
                stderr=sink)

    def events(self, name: str, **fields: Any) -> list[dict[str, Any]]:
        return log_events(self.log, name, **fields)

    def signal(self, signum: int) -> None:
        assert self.process is not None
        os.kill(self.process.pid, signum)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGCONT)
            self.process.kill()
            self.process.wait(timeout=30)


@pytest.fixture
def hosts(tmp_path: Path) -> Iterator[Callable[..., Host]]:
    made: list[Host] = []

    def make(name: str, **kwargs: Any) -> Host:
        host = Host(tmp_path, name, **kwargs)
        made.append(host)
        return host

    yield make
    for host in made:
        host.stop()


async def _seed(config: Path, tenants: int) -> None:
    """`tenants` tenants, each at its own version (so each is tombstoned on its own bands),
    each with two chunks stamped version 1: actionable."""
    settings = load_config(str(config)).settings
    graph = await open_graph(settings.state)
    try:
        for i in range(tenants):
            await upsert_node(graph, f"kb-config:t{i:03d}", TENANT_CONFIG_LABEL,
                              {"version": 3 + i, "repoSlug": f"r{i}"})
    finally:
        await graph.close()
    vectors = await VectorStore.open(settings.chroma)
    try:
        await seed(vectors, settings.chroma.knowledge_base_collection, [
            (f"t{i:03d}-{k}", {"tenantId": f"t{i:03d}", "tenantConfigVersion": 1,
                               "ingestedAt": 1_000 + k})
            for i in range(tenants) for k in range(2)])
    finally:
        await vectors.close()


async def _chunks(config: Path) -> int:
    settings = load_config(str(config)).settings
    vectors = await VectorStore.open(settings.chroma)
    try:
        return await vectors.count(settings.chroma.knowledge_base_collection)
    finally:
        await vectors.close()


async def _settled_chunks(config: Path) -> int:
    """The chunks left once a delete request already on the wire when the leader was paused
    has been applied: the count, once five looks half a second apart agree (a server on a
    loaded machine has taken over a second to apply a request)."""
    left, same = await _chunks(config), 0
    for _ in range(40):
        await asyncio.sleep(0.5)
        again = await _chunks(config)
        same = same + 1 if again == left else 0
        if same == 4:
            return left
        left = again
    raise AssertionError("the chunk count did not settle")


def test_only_the_leader_runs_passes_and_the_standby_takes_over_within_an_interval_of_kill_9(
    postgres_server: PostgresServer, chroma: ChromaServer, hosts: Callable[..., Host]
) -> None:
    url = postgres_server.create_database(f"lead{next(_databases)}")
    a = hosts("a", state_url=url, chroma_url=chroma.url)
    b = hosts("b", state_url=url, chroma_url=chroma.url)
    a.start()
    wait_until(lambda: bool(a.events("leadership.acquired")), 60, "a to lead")
    b.start()
    wait_until(lambda: len(b.events("tick.skipped", daemon="reconcile")) >= 2, 60,
               "b to skip two passes as a standby")
    assert b.events("tick.completed", daemon="reconcile") == []
    assert len(a.events("tick.completed", daemon="reconcile")) >= 2

    a.signal(signal.SIGKILL)
    killed = time.monotonic()
    took_over = wait_until(lambda: bool(b.events("tick.completed", daemon="reconcile")), 60,
                           "b's first pass")
    assert b.events("leadership.acquired")
    # Within one interval (plus the jitter, a heartbeat and a process's start-up slack).
    assert took_over - killed < INTERVAL_MS / 1000 + 1.5


def test_a_leader_paused_mid_pass_and_resumed_after_the_standby_leads_deletes_nothing(
    postgres_server: PostgresServer, chroma: ChromaServer, hosts: Callable[..., Host]
) -> None:
    url = postgres_server.create_database(f"lead{next(_databases)}")
    tombstoning = {"reconciliationAutoTombstone": True, "reconciliationMaxStaleFraction": 1.0}
    a = hosts("a", state_url=url, chroma_url=chroma.url, **tombstoning)
    # The standby only reports: whatever goes after the pause, the old leader deleted it.
    b = hosts("b", state_url=url, chroma_url=chroma.url)
    asyncio.run(_seed(a.config, tenants=200))
    a.start()
    wait_until(lambda: bool(a.events("reconcile.tombstoned_band")), 120, "a's first delete")
    a.signal(signal.SIGSTOP)
    left_at_pause = asyncio.run(_settled_chunks(a.config))
    assert 0 < left_at_pause < 400, "the pause did not come mid-pass"

    b.start()
    wait_until(lambda: bool(b.events("leadership.acquired")), 60, "b to take the lead")
    a.signal(signal.SIGCONT)
    wait_until(lambda: bool(a.events("leadership.fenced")), 30, "a to be fenced")
    time.sleep(1.0)
    assert asyncio.run(_chunks(a.config)) == left_at_pause
    fenced = a.events("leadership.fenced")[0]
    assert "no longer leads" in fenced["message"] and fenced["reason"]


#: A longer interval for the test of a leader held inside a statement: its lease is 2 s, and
#: a renewal the test holds waits 1 s on the client before it gives up, time enough to stop it.
HELD_INTERVAL_MS = 6_000
#: Tenants of two actionable chunks each: a pass of a band per tenant, long enough to be
#: stopped in, short enough for the suite.
HELD_TENANTS = 80


def _archived_ids(host: Host) -> set[str]:
    folder = host.root / "data" / "tombstones"
    return {chunk.row.id for path in folder.glob("*.jsonl")
            for _, chunk in read_archived_chunks(path)} if folder.exists() else set()


async def _hold_the_lease_while(url: str, holder: str, pause: Callable[[], None],
                                config: Path) -> tuple[float, int]:
    """Lock the lease row, so that `holder`'s next renewal waits inside its statement; once it
    does, `pause()` it (SIGSTOP): its session stays active, never idle. Count the chunks left
    while no standby can take the lead (its first statement needs the row too), wait until a
    standby ends the paused session, then let go of the row. (seconds from the pause until
    the session ended, chunks left at the pause)."""
    conn = await asyncpg.connect(url)
    # pg_stat_activity is read once per transaction: the looking is done outside the lock's.
    look = await asyncpg.connect(url)
    try:
        async with conn.transaction():
            await conn.execute("SELECT * FROM leader_leases FOR UPDATE")
            session = None
            deadline = time.monotonic() + 30
            while session is None:
                assert time.monotonic() < deadline, "the leader's renewal never waited"
                session = await look.fetchval(
                    "SELECT pid FROM pg_stat_activity WHERE application_name = $1"
                    " AND state = 'active' AND wait_event_type = 'Lock'", holder[:63])
            pause()
            paused = time.monotonic()
            left = await _settled_chunks(config)
            while await look.fetchval("SELECT count(*) FROM pg_stat_activity WHERE pid = $1",
                                      session):
                assert time.monotonic() - paused < 60, "nobody ended the silent leader"
                await asyncio.sleep(0.02)
            return time.monotonic() - paused, left
    finally:
        await conn.close()
        await look.close()


def test_a_leader_stopped_inside_a_statement_is_ended_within_a_lease_and_a_heartbeat(
    postgres_server: PostgresServer, chroma: ChromaServer, hosts: Callable[..., Host]
) -> None:
    url = postgres_server.create_database(f"lead{next(_databases)}")
    keys = {"reconciliationAutoTombstone": True, "reconciliationMaxStaleFraction": 1.0,
            "interval_ms": HELD_INTERVAL_MS}
    a, b, c = (hosts(name, state_url=url, chroma_url=chroma.url, **keys) for name in "abc")
    a.start()
    wait_until(lambda: bool(a.events("leadership.acquired")), 120, "a to lead")
    holder = a.events("leadership.acquired")[0]["holder"]
    lease_ms = a.events("leadership.acquired")[0]["leaseMs"]
    b.start()
    c.start()
    wait_until(lambda: bool(b.events("tick.skipped")) and bool(c.events("tick.skipped")), 120,
               "two standbys")
    # The drift arrives once every host runs, so a's pass over it is under way when it is
    # stopped, however long the standbys took to start.
    asyncio.run(_seed(a.config, tenants=HELD_TENANTS))
    wait_until(lambda: bool(a.events("reconcile.tombstoned_band")), 120, "a's first delete")

    ended_after, left = asyncio.run(_hold_the_lease_while(
        url, holder, lambda: a.signal(signal.SIGSTOP), a.config))
    assert 0 < left < 2 * HELD_TENANTS, "the pause did not come mid-pass"
    # The bound: one lease after its last renewal, at a standby's next heartbeat (a third of
    # a lease); the rest is this loaded machine's slack.
    assert ended_after < lease_ms / 1000 * (1 + 1 / 3) + 2.0, ended_after
    wait_until(lambda: bool(b.events("leadership.acquired") or c.events("leadership.acquired")),
               30, "a standby to take the lead")
    leader, other = (b, c) if b.events("leadership.acquired") else (c, b)
    ended = leader.events("leadership.holder_ended") + other.events("leadership.holder_ended")
    assert ended and ended[0]["holder"] == holder and ended[0]["silentMs"] >= lease_ms

    a.signal(signal.SIGCONT)
    wait_until(lambda: bool(a.events("leadership.fenced") or a.events("leadership.lost")), 30,
               "a to hear it no longer leads")
    wait_until(lambda: asyncio.run(_chunks(a.config)) == 0, 120, "the new leader's deletes")
    assert other.events("leadership.acquired") == [], "one of two racing standbys leads"
    assert other.events("reconcile.tombstoned_band") == [], "a standby deletes nothing"
    # Every chunk that only a's archives hold was deleted by a: none since its pause.
    only_a = _archived_ids(a) - _archived_ids(leader)
    assert len(only_a) == 2 * HELD_TENANTS - left
    assert not a.events("leadership.acquired")[1:], "a never led again"
