"""The daemons' tick records (`core.base.state.daemon_state`) on both backends: one row per job,
and one per drainer beside it, so N drainers sharing a state show N rows."""

from __future__ import annotations

from pathlib import Path

import asyncpg
import pytest

from core.base.state.daemon_state import (
    DrainerQueue,
    TickRecord,
    forget_drainer,
    last_drainer_ticks,
    last_ticks,
    record_tick,
)
from core.base.state.graph_db import GraphDB
from core.base.state.postgres.schema import MIGRATIONS, VERSION_TABLE
from core.base.state.state import open_graph
from tests.postgres_server import PostgresServer
from tests.support import make_settings

pytestmark = pytest.mark.both_backends


def _tick(started: int, *, ok: bool = True, requeued: int = 0) -> TickRecord:
    return TickRecord("drain", started, started + 10, 10, ok,
                      {"drain": {"requeued": requeued}})


async def test_each_drainer_keeps_its_own_last_tick_and_queue_figures(graph: GraphDB) -> None:
    a = DrainerQueue("a" * 32, "host-a", queue_lines=2, draining=False, dead_letters=0)
    b = DrainerQueue("b" * 32, "host-b", queue_lines=0, draining=True, dead_letters=5)
    await record_tick(graph, _tick(1_000, requeued=2), drainer=a)
    await record_tick(graph, _tick(2_000, ok=False), drainer=b)
    await record_tick(graph, _tick(3_000, requeued=1),
                      drainer=DrainerQueue(a.drainer, "host-a2", 1, False, 0))
    await record_tick(graph, TickRecord("reconcile", 4_000, 4_100, 100, True, {}))

    drainers = {d.queue.drainer: d for d in await last_drainer_ticks(graph)}
    assert set(drainers) == {a.drainer, b.drainer}
    assert drainers[a.drainer].queue == DrainerQueue(a.drainer, "host-a2", 1, False, 0)
    assert drainers[a.drainer].tick == _tick(3_000, requeued=1)
    assert drainers[b.drainer].queue == b
    assert drainers[b.drainer].tick == _tick(2_000, ok=False)
    # One row per job as before: the drain row is the last tick of any drainer.
    ticks = await last_ticks(graph)
    assert set(ticks) == {"drain", "reconcile"}
    assert ticks["drain"] == _tick(3_000, requeued=1)


async def test_forgetting_a_drainer_removes_its_row_unless_it_ticked_since_it_was_read(
    graph: GraphDB,
) -> None:
    a = DrainerQueue("a" * 32, "host-a", 0, False, 0)
    b = DrainerQueue("b" * 32, "host-b", 0, False, 0)
    await record_tick(graph, _tick(1_000), drainer=a)
    await record_tick(graph, _tick(2_000), drainer=b)
    read = {d.queue.drainer: d for d in await last_drainer_ticks(graph)}
    await record_tick(graph, _tick(5_000), drainer=a)  # a ticks after the read

    assert await forget_drainer(graph, read[a.drainer]) is False
    assert await forget_drainer(graph, read[b.drainer]) is True
    left = await last_drainer_ticks(graph)
    assert [(d.queue.drainer, d.tick.started_at) for d in left] == [(a.drainer, 5_000)]
    assert await forget_drainer(graph, read[b.drainer]) is False  # already gone


async def test_a_postgresql_state_of_schema_version_2_gains_drainer_ticks_and_keeps_its_ticks(
    postgres_server: PostgresServer, tmp_path: Path,
) -> None:
    url = postgres_server.create_database("daemon_state_v2")
    conn = await asyncpg.connect(url)
    try:
        await conn.execute(VERSION_TABLE)
        for step in MIGRATIONS[:2]:
            await conn.execute(step)
        await conn.execute("INSERT INTO kb_schema_version(version) VALUES (2)")
        await conn.execute("INSERT INTO daemon_ticks VALUES ('drain', 1000, 1040, 40, 1, '{}')")
    finally:
        await conn.close()

    graph = await open_graph(make_settings(tmp_path, stateUrl=url).state)
    try:
        assert "drainer_ticks" in await graph.table_names()
        assert await last_drainer_ticks(graph) == ()
        assert (await last_ticks(graph))["drain"] == TickRecord("drain", 1000, 1040, 40, True, {})
    finally:
        await graph.close()
    conn = await asyncpg.connect(url)
    try:
        assert await conn.fetchval("SELECT max(version) FROM kb_schema_version") \
            == len(MIGRATIONS)
    finally:
        await conn.close()
