"""`core.suite.migrate` on a real SQLite file and the session's real PostgreSQL (a fresh
database per test): what is copied, how invalid JSON is carried, and that any failure (a row
PostgreSQL refuses, a checksum that differs) leaves the target empty so that a rerun works."""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from core.base.config.config import Settings
from core.base.rules.errors import ConfigError, LockHeld
from core.base.state.graph_db import GraphDB
from core.base.state.postgres.bulk_load import PostgresLoad
from core.base.state.schema import STATE_TABLES
from core.base.state.state import open_graph
from core.drain.queue_drain import drainer_lock
from core.drain.stores.drainer_identity import read_drainer_id
from core.suite.migrate import migrate_state
from tests.postgres_server import PostgresServer
from tests.support import make_settings


@pytest.fixture
def source(tmp_path: Path) -> Settings:
    return make_settings(tmp_path)


@pytest.fixture
def target(postgres_server: PostgresServer) -> str:
    return postgres_server.create_database(f"migrate_{uuid.uuid4().hex[:12]}")


async def sqlite_rows(settings: Settings, statements: Sequence[tuple[str, Sequence[Any]]],
                      ) -> None:
    """Write rows into the SQLite state through its own store (schema applied)."""
    graph = await open_graph(settings.state)
    try:
        async with graph.write() as tx:
            for sql, params in statements:
                await tx.execute(sql, params)
    finally:
        await graph.close()


async def on_target(url: str, sql: str, params: Sequence[Any] = ()) -> list[Any]:
    graph = await open_graph_at(url)
    try:
        return await graph.query(sql, params)
    finally:
        await graph.close()


async def open_graph_at(url: str) -> GraphDB:
    return await open_graph(make_settings(Path("/nonexistent"), stateUrl=url).state)


async def target_counts(url: str) -> dict[str, int]:
    graph = await open_graph_at(url)
    try:
        return {t: int((await graph.query(f"SELECT count(*) FROM {t}"))[0][0])
                for t in STATE_TABLES}
    finally:
        await graph.close()


NODE = "INSERT INTO nodes(id, label, properties) VALUES (?, ?, ?)"
EDGE = ("INSERT INTO edges(source, target, relationship, weight, properties) "
        "VALUES (?, ?, ?, ?, ?)")


def graph_rows(n: int) -> list[tuple[str, Sequence[Any]]]:
    rows: list[tuple[str, Sequence[Any]]] = [
        (NODE, (f"concept:{i}", "CONCEPT", f'{{"i": {i}}}')) for i in range(n)]
    rows += [(EDGE, (f"concept:{i}", f"concept:{i + 1}", "NEXT", 1.0 + i / 4, "{}"))
             for i in range(n - 1)]
    return rows


async def test_every_page_of_every_table_is_copied_and_verified(
    source: Settings, target: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    await sqlite_rows(source, graph_rows(7))
    pages: list[int] = []
    real = PostgresLoad.copy_page

    async def counted(self: PostgresLoad, table: str, columns: Sequence[str],
                      rows: Sequence[Sequence[Any]]) -> None:
        pages.append(len(rows))
        await real(self, table, columns, rows)

    monkeypatch.setattr(PostgresLoad, "copy_page", counted)
    figures = await migrate_state(source, target_url=target, page_rows=3)
    assert figures.ok, figures.error
    assert {t.table: t.rows for t in figures.tables if t.rows} == {"nodes": 7, "edges": 6}
    assert all(t.matches for t in figures.tables)
    assert pages == [3, 3, 1, 3, 3] and max(pages) <= 3  # never a whole table at once
    assert (await target_counts(target))["edges"] == 6
    rows = await on_target(target, "SELECT weight FROM edges WHERE source = 'concept:5'")
    assert rows[0][0] == 2.25


async def test_invalid_json_text_is_copied_as_it_is_and_counted(
    source: Settings, target: str
) -> None:
    await sqlite_rows(source, [(NODE, ("concept:a", "CONCEPT", '{"w": Infinity}')),
                               (NODE, ("concept:b", "CONCEPT", "not json")),
                               (NODE, ("concept:c", "CONCEPT", '{"ok": true}'))])
    figures = await migrate_state(source, target_url=target)
    assert figures.ok, figures.error
    [nodes] = [t for t in figures.tables if t.table == "nodes"]
    assert (nodes.rows, nodes.invalid_json) == (3, 1 + 1)
    rows = await on_target(target, "SELECT id, properties FROM nodes ORDER BY id")
    assert [tuple(r) for r in rows] == [("concept:a", '{"w": Infinity}'),
                                        ("concept:b", "not json"),
                                        ("concept:c", '{"ok": true}')]
    # The backend reads such text as unreadable and replaces it on the row's next write.
    graph = await open_graph_at(target)
    try:
        async with graph.write() as tx:
            await tx.execute(graph.sql.upsert_node, ("concept:a", "CONCEPT", '{"n": 1}', "{}"))
        assert (await graph.query(graph.sql.node_properties, ("concept:a",)))[0][0] == '{"n": 1}'
    finally:
        await graph.close()


async def test_a_row_postgresql_refuses_leaves_the_target_empty_and_a_rerun_works(
    source: Settings, target: str
) -> None:
    await sqlite_rows(source, graph_rows(3))
    # An edge whose source node does not exist: SQLite took it with foreign keys off (as an
    # earlier version could); PostgreSQL's reference refuses it, after nodes were copied.
    with sqlite3.connect(source.state.graph_db_path) as conn:
        conn.execute(EDGE, ("concept:gone", "concept:0", "NEXT", 1.0, "{}"))
    figures = await migrate_state(source, target_url=target)
    assert not figures.ok
    assert figures.error is not None and figures.error.startswith("table edges: PostgreSQL "
                                                                  "refused a row")
    assert set((await target_counts(target)).values()) == {0}

    with sqlite3.connect(source.state.graph_db_path) as conn:
        conn.execute("DELETE FROM edges WHERE source = 'concept:gone'")
    again = await migrate_state(source, target_url=target)
    assert again.ok, again.error
    assert (await target_counts(target))["nodes"] == 3


async def test_a_checksum_mismatch_is_named_and_leaves_the_target_empty(
    source: Settings, target: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    await sqlite_rows(source, graph_rows(4))
    real = PostgresLoad.copy_page

    async def tampering(self: PostgresLoad, table: str, columns: Sequence[str],
                        rows: Sequence[Sequence[Any]]) -> None:
        await real(self, table, columns, rows)
        if table == "edges":  # a fault the real copy cannot produce: a value changed after it
            await self._conn.execute("UPDATE edges SET weight = weight + 1 "
                                     "WHERE source = 'concept:1'")

    monkeypatch.setattr(PostgresLoad, "copy_page", tampering)
    figures = await migrate_state(source, target_url=target)
    assert not figures.ok
    assert figures.error == ("table edges: checksums differ (3 rows each); "
                             "the target is left empty")
    assert [t.table for t in figures.tables if not t.matches] == ["edges"]
    assert set((await target_counts(target)).values()) == {0}


async def test_alert_ids_continue_after_the_copied_ones_and_metrics_keep_their_order(
    source: Settings, target: str
) -> None:
    fired = ("INSERT INTO alerts_fired(id, fired_at, tenant_id, repo_slug, metric, value, "
             "threshold, severity, channel, subject, delivered, error) "
             "VALUES (?, 1, 't', 'r', 'm', 1.0, 0.5, 'warn', 'log', 's', 1, NULL)")
    metric = ("INSERT INTO kb_ingestion_metrics(id, timestamp, tenant_id, repo_slug, "
              "event_type, detail) VALUES (?, 5, 't', 'r', 'reconcile', '{}')")
    await sqlite_rows(source, [(fired, (3,)), (fired, (9,)),
                               (metric, ("zzz-first",)), (metric, ("aaa-second",))])
    figures = await migrate_state(source, target_url=target)
    assert figures.ok, figures.error
    graph = await open_graph_at(target)
    try:
        async with graph.write() as tx:
            await tx.execute(graph.sql.insert_fired,
                             (2, "t", "r", "m", 1.0, 0.5, "warn", "log", "s", 1, None))
        ids = [r[0] for r in await graph.query("SELECT id FROM alerts_fired ORDER BY id")]
        order = [r[0] for r in await graph.query(
            "SELECT id FROM kb_ingestion_metrics ORDER BY seq")]
    finally:
        await graph.close()
    assert ids == [3, 9, 10]
    assert order == ["zzz-first", "aaa-second"]  # SQLite's insertion order, not the ids'


async def test_offsets_are_tagged_with_this_hosts_drainer(source: Settings, target: str) -> None:
    source.drain.lazy_edges_queue_path.parent.mkdir(parents=True)
    await sqlite_rows(source, [(
        "INSERT INTO drain_generations(generation, committed_offset, dead_letters_size, "
        "updated_at) VALUES ('g1', 120, 0, 1)", ())])
    figures = await migrate_state(source, target_url=target)
    assert figures.ok, figures.error
    drainer = read_drainer_id(source.drain.lazy_edges_queue_path)
    assert drainer is not None and figures.drainer == drainer
    rows = await on_target(target, "SELECT generation, committed_offset, drainer "
                                   "FROM drain_generations")
    assert [tuple(r) for r in rows] == [("g1", 120, drainer)]


async def test_a_running_drainer_refuses_the_run_and_nothing_is_written(
    source: Settings, target: str
) -> None:
    await sqlite_rows(source, graph_rows(2))
    source.drain.lazy_edges_queue_path.parent.mkdir(parents=True, exist_ok=True)
    held = drainer_lock(source.drain.lazy_edges_queue_path).acquire()
    try:
        with pytest.raises(LockHeld, match="the drainer of"):
            await migrate_state(source, target_url=target)
    finally:
        held.release()
    assert set((await target_counts(target)).values()) == {0}


async def test_a_source_table_this_version_does_not_know_refuses_the_run(
    source: Settings, target: str
) -> None:
    await sqlite_rows(source, graph_rows(2))
    with sqlite3.connect(source.state.graph_db_path) as conn:
        conn.execute("CREATE TABLE from_the_future (x)")
    with pytest.raises(ConfigError, match="table from_the_future is not state"):
        await migrate_state(source, target_url=target)


async def test_a_write_committed_during_the_copy_is_not_in_it_the_copy_is_one_snapshot(
    source: Settings, target: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    await sqlite_rows(source, graph_rows(4))
    real = PostgresLoad.copy_page
    written: list[str] = []

    async def writer_commits_meanwhile(self: PostgresLoad, table: str, columns: Sequence[str],
                                       rows: Sequence[Sequence[Any]]) -> None:
        await real(self, table, columns, rows)
        if table == "nodes" and not written:  # a writer that ignores the locks, after page 1
            written.append(table)
            with sqlite3.connect(source.state.graph_db_path) as conn:
                conn.execute(NODE, ("concept:late", "CONCEPT", "{}"))
                conn.execute(EDGE, ("concept:late", "concept:0", "NEXT", 1.0, "{}"))

    monkeypatch.setattr(PostgresLoad, "copy_page", writer_commits_meanwhile)
    figures = await migrate_state(source, target_url=target, page_rows=2)
    assert figures.ok, figures.error
    assert {t.table: t.rows for t in figures.tables if t.rows} == {"nodes": 4, "edges": 3}
    assert (await target_counts(target))["nodes"] == 4
    with sqlite3.connect(source.state.graph_db_path) as conn:  # the write itself did commit
        assert conn.execute("SELECT count(*) FROM nodes").fetchone()[0] == 5
