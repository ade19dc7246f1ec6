"""A daemon's state kept open across outages (`ReopeningGraph`): a real PostgreSQL of the
module's own, restarted and halted under it, and real SQLite files replaced and removed.

What must hold: the call that meets a lost connection fails as store unavailable, nothing lost;
the next call (or the next tick's `reconnect`) works on a new connection and sees every row
committed before; reconnecting during an outage is tried at most once per backoff, said once
when the outage begins and once when it ends."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from core.base.chroma import VectorStore
from core.base.rules.errors import ConnectionLost, StoreUnavailable
from core.base.rules.nodes import NodeRow
from core.base.runtime.context import TickContext
from core.base.state.graph import upsert_node, upsert_nodes
from core.base.state.graph_db import GraphDB
from core.base.state.reopening_graph import RETRY_FIRST_S, ReopeningGraph, retry_delay_s
from core.base.state.state import open_graph
from core.base.state.telemetry_spool import MetricSpool
from core.reconcile.rules.reconcile_outcome import ReconcileFigures
from core.reconcile.run_pass import reconcile_tick
from tests.postgres_server import PostgresServer
from tests.support import count_rows, make_settings, read_node, seed_acme_drift

_databases = iter(range(1, 1_000_000))


class CountedOpener:
    """`open_graph` for the settings, counting how often a connection was asked for."""

    def __init__(self, settings: Any) -> None:
        self.settings = settings
        self.calls = 0

    async def __call__(self) -> GraphDB:
        self.calls += 1
        return await open_graph(self.settings.state)


def events(err: str, name: str) -> list[dict[str, Any]]:
    found = []
    for line in err.splitlines():
        if line.startswith("{") and json.loads(line).get("event") == name:
            found.append(json.loads(line))
    return found


@pytest.fixture
async def on_postgres(tmp_path: Path, restartable_postgres: PostgresServer
                      ) -> AsyncIterator[tuple[ReopeningGraph, CountedOpener]]:
    url = restartable_postgres.create_database(f"reopen{next(_databases)}")
    opener = CountedOpener(make_settings(tmp_path, stateUrl=url))
    graph = ReopeningGraph(await opener(), opener, retry_max_s=0.4)
    yield graph, opener
    await graph.close()


def test_the_wait_between_reopens_doubles_up_to_its_bound_and_is_jittered_down_to_half() -> None:
    assert retry_delay_s(1, max_s=60, draw=0.999999) == pytest.approx(RETRY_FIRST_S, rel=1e-5)
    assert retry_delay_s(2, max_s=60, draw=0.0) == RETRY_FIRST_S  # 2 * first, halved
    assert retry_delay_s(3, max_s=60, draw=0.5) == 4 * RETRY_FIRST_S * 0.75
    assert retry_delay_s(40, max_s=60, draw=0.0) == 30.0, "bounded, then jittered"
    assert retry_delay_s(40, max_s=60, draw=0.999999) <= 60.0


async def test_a_connection_lost_between_calls_is_replaced_by_the_next_call_with_every_row_kept(
    on_postgres: tuple[ReopeningGraph, CountedOpener], restartable_postgres: PostgresServer,
    capsys: pytest.CaptureFixture[str],
) -> None:
    graph, opener = on_postgres
    await upsert_node(graph, "CONCEPT:before", "CONCEPT")
    await asyncio.to_thread(restartable_postgres.restart)
    await asyncio.sleep(0.2)  # the client reads the server's goodbye

    assert await read_node(graph, "CONCEPT:before") is not None
    await upsert_node(graph, "CONCEPT:after", "CONCEPT")
    assert await read_node(graph, "CONCEPT:after") is not None
    assert opener.calls == 2, "one new connection"
    err = capsys.readouterr().err
    assert len(events(err, "store.lost")) == 1 and len(events(err, "store.reopened")) == 1


async def test_the_call_a_restart_cuts_short_fails_as_store_unavailable_and_the_next_works(
    on_postgres: tuple[ReopeningGraph, CountedOpener], restartable_postgres: PostgresServer,
) -> None:
    graph, _ = on_postgres
    waiting = asyncio.create_task(graph.query("SELECT pg_sleep(30)"))
    await asyncio.sleep(0.3)  # the statement is running on the server
    await asyncio.to_thread(restartable_postgres.restart)
    with pytest.raises(ConnectionLost, match="store unavailable, nothing lost"):
        await asyncio.wait_for(waiting, 10)
    await graph.reconnect()
    assert [tuple(r) for r in await graph.query("SELECT 41 + 1")] == [(42,)]


async def test_a_write_cut_short_by_a_restart_leaves_nothing_half_written(
    on_postgres: tuple[ReopeningGraph, CountedOpener], restartable_postgres: PostgresServer,
) -> None:
    graph, _ = on_postgres

    async def write_then_wait() -> None:
        async with graph.write() as tx:
            await upsert_nodes(tx, [NodeRow("CONCEPT:half", "CONCEPT", {})])
            await tx.query("SELECT pg_sleep(30)")

    writing = asyncio.create_task(write_then_wait())
    await asyncio.sleep(0.3)
    await asyncio.to_thread(restartable_postgres.restart)
    with pytest.raises(StoreUnavailable):
        await asyncio.wait_for(writing, 10)
    await graph.reconnect()
    assert await read_node(graph, "CONCEPT:half") is None


async def test_during_an_outage_a_reopen_is_tried_once_per_backoff_and_said_once(
    on_postgres: tuple[ReopeningGraph, CountedOpener], restartable_postgres: PostgresServer,
    capsys: pytest.CaptureFixture[str],
) -> None:
    graph, opener = on_postgres
    await upsert_node(graph, "CONCEPT:kept", "CONCEPT")
    await asyncio.to_thread(restartable_postgres.halt)
    try:
        await asyncio.sleep(0.2)
        with pytest.raises(ConnectionLost, match="store unavailable, nothing lost"):
            await graph.reconnect()  # a tick's try: whatever the backoff
        tried = opener.calls
        for _ in range(20):  # a pass over many tenants during the outage
            with pytest.raises(ConnectionLost, match="reconnecting in"):
                await read_node(graph, "CONCEPT:kept")
        assert opener.calls == tried, "no connection attempt inside the backoff"
        await asyncio.sleep(0.45)  # past the backoff (at most 0.4 s here)
        with pytest.raises(ConnectionLost):
            await read_node(graph, "CONCEPT:kept")
        assert opener.calls == tried + 1, "one attempt once the backoff passed"
    finally:
        await asyncio.to_thread(restartable_postgres.resume)
    await graph.reconnect()
    assert await read_node(graph, "CONCEPT:kept") is not None
    err = capsys.readouterr().err
    lost, back = events(err, "store.lost"), events(err, "store.reopened")
    assert len(lost) == 1 and lost[0]["level"] == "warning", "said once when it began"
    assert len(back) == 1 and back[0]["failures"] >= 3 and back[0]["downS"] > 0.4


async def test_a_replaced_sqlite_file_is_reopened_and_read_as_the_new_file(
    tmp_path: Path,
) -> None:
    settings = make_settings(tmp_path)
    opener = CountedOpener(settings)
    graph = ReopeningGraph(await opener(), opener)
    try:
        await upsert_node(graph, "CONCEPT:old", "CONCEPT")
        other = make_settings(tmp_path / "other")
        replacement = await open_graph(other.state)
        await upsert_node(replacement, "CONCEPT:new", "CONCEPT")
        await replacement.close()
        # As a restore from backup:
        os.replace(other.state.graph_db_path, settings.state.graph_db_path)

        await graph.reconnect()
        assert await read_node(graph, "CONCEPT:new") is not None
        assert await read_node(graph, "CONCEPT:old") is None
        await upsert_node(graph, "CONCEPT:written-after", "CONCEPT")
    finally:
        await graph.close()
    reread = await open_graph(settings.state, read_only=True)
    try:
        assert await read_node(reread, "CONCEPT:written-after") is not None
        assert await read_node(reread, "CONCEPT:new") is not None, "the old WAL left it alone"
    finally:
        await reread.close()


async def test_a_removed_sqlite_file_is_recreated_by_the_next_call(tmp_path: Path) -> None:
    settings = make_settings(tmp_path)
    opener = CountedOpener(settings)
    graph = ReopeningGraph(await opener(), opener)
    try:
        await upsert_node(graph, "CONCEPT:gone", "CONCEPT")
        moved = tmp_path / "moved-away"
        moved.mkdir()
        graph_path = settings.state.graph_db_path
        for path in graph_path.parent.glob(graph_path.name + "*"):
            shutil.move(str(path), moved / path.name)
        await upsert_node(graph, "CONCEPT:fresh", "CONCEPT")
        assert settings.state.graph_db_path.exists() and opener.calls == 2
        assert await read_node(graph, "CONCEPT:gone") is None
    finally:
        await graph.close()


async def test_a_read_inside_a_write_goes_on_in_its_transaction_while_the_file_is_replaced(
    tmp_path: Path,
) -> None:
    settings = make_settings(tmp_path)
    opener = CountedOpener(settings)
    graph = ReopeningGraph(await opener(), opener)
    other = make_settings(tmp_path / "other")
    replacement = await open_graph(other.state)
    await replacement.close()
    try:
        async with graph.write() as tx:
            await upsert_nodes(tx, [NodeRow("CONCEPT:inside", "CONCEPT", {})])
            os.replace(other.state.graph_db_path, settings.state.graph_db_path)
            # A reader of the same task, inside its own transaction: no deadlock, same file.
            assert await asyncio.wait_for(read_node(graph, "CONCEPT:inside"), 5) is not None
        assert await read_node(graph, "CONCEPT:inside") is None, "the new file, after it"
        assert opener.calls == 2
    finally:
        await graph.close()


async def test_a_pass_whose_database_goes_down_spools_its_telemetry_and_the_next_writes_it(
    tmp_path: Path, restartable_postgres: PostgresServer, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The telemetry spool through an outage: the database stops while a reconcile pass reads
    Chroma (the fault: the stop is injected at the pass's first Chroma call); the pass's rows
    go to the spool and it is not ok; after the server is back, the next pass on the same
    kept graph (reconnected before it, as the scheduler does) writes them first."""
    url = restartable_postgres.create_database(f"reopen{next(_databases)}")
    settings = make_settings(tmp_path, stateUrl=url, reconciliationEnabled=True)
    await seed_acme_drift(settings)
    opener = CountedOpener(settings)
    graph = ReopeningGraph(await opener(), opener, retry_max_s=0.2)
    vectors = await VectorStore.open(settings.chroma)
    real = vectors._call_on_collection
    halted: list[bool] = []

    def stop_the_database_first(name: str, method: str, kwargs: Mapping[str, Any]) -> Any:
        if not halted:
            halted.append(True)
            restartable_postgres.halt()
        return real(name, method, kwargs)

    monkeypatch.setattr(vectors, "_call_on_collection", stop_the_database_first)
    context = TickContext(settings, graph, vectors)
    try:
        try:
            first = await reconcile_tick(context, False)
        finally:
            await asyncio.to_thread(restartable_postgres.resume)
        assert halted and isinstance(first, ReconcileFigures) and first.unrecorded_rows == 1
        assert MetricSpool(settings.telemetry_spool_path).pending() == 1
        await graph.reconnect()
        second = await reconcile_tick(context, False)
        assert isinstance(second, ReconcileFigures)
        assert (second.spool_flushed, second.unrecorded_rows) == (1, 0)
        assert await count_rows(graph, "kb_ingestion_metrics") == 2
    finally:
        await vectors.close()
        await graph.close()
