"""The SQLite graph store: schema, pragmas, merging upserts, culling and reinforcing links."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from core.base.rules.errors import StoreUnavailable
from core.base.rules.nodes import EdgeRow, NodeRow
from core.base.state.graph import (
    MAX_WEIGHT,
    edge_pages,
    existing_ids,
    link_edges,
    link_nodes,
    node_pages,
    upsert_node,
    upsert_nodes,
)
from core.base.state.graph_db import GraphDB
from core.base.state.sqlite import SqliteGraph
from tests.support import count_rows, read_edge, read_node

pytestmark = pytest.mark.both_backends


@pytest.mark.sqlite_only(reason="reads SQLite itself (raw SQL, rowid, pragmas or the file)")
async def test_schema_and_pragmas(graph: GraphDB) -> None:
    rows = await graph.query("PRAGMA journal_mode")
    assert rows[0][0] == "wal"
    assert (await graph.query("PRAGMA foreign_keys"))[0][0] == 1
    columns = {r[1] for r in await graph.query("PRAGMA table_info(edges)")}
    assert {"source", "target", "relationship", "weight", "properties"} <= columns
    tables = {r[0] for r in await graph.query("SELECT name FROM sqlite_master")}
    assert {"nodes", "edges", "kb_ingestion_metrics", "drain_generations",
            "drain_requeued"} <= tables
    assert "applied_lines" not in tables, "the 30-day identity table is gone"


async def test_upsert_merges_properties(graph: GraphDB) -> None:
    await upsert_node(graph, "CONCEPT:x", "CONCEPT", {"a": 1, "b": 2})
    await upsert_node(graph, "CONCEPT:x", "CONCEPT", {"b": 3, "c": 4})
    node = await read_node(graph, "CONCEPT:x")
    assert node is not None and node.properties == {"a": 1, "b": 3, "c": 4}


async def test_upsert_stores_row_ids_in_canonical_form(graph: GraphDB) -> None:
    await upsert_node(graph, "MEMORY:Abc", "MEMORY", {})
    assert await existing_ids(graph, ["memory:Abc", "MEMORY:Abc"]) == {"memory:Abc"}


async def test_link_culls_an_edge_with_a_missing_endpoint(graph: GraphDB) -> None:
    await upsert_node(graph, "CONCEPT:a", "CONCEPT")
    assert await link_nodes(graph, "CONCEPT:a", "CONCEPT:missing", "RELATES") is False
    assert await count_rows(graph, "edges") == 0


async def test_relinking_reinforces_by_a_tenth_of_the_weight_up_to_the_cap(graph: GraphDB) -> None:
    await upsert_node(graph, "CONCEPT:a", "CONCEPT")
    await upsert_node(graph, "SESSION:s", "SESSION")
    assert await link_nodes(graph, "CONCEPT:a", "SESSION:s", "MENTIONED_IN", 2.0, {"j": "x"})
    edge = await read_edge(graph, "CONCEPT:a", "session:s", "MENTIONED_IN")
    assert edge is not None and edge.weight == 2.0 and edge.target == "session:s"
    assert await link_nodes(graph, "CONCEPT:a", "session:s", "MENTIONED_IN", 3.0, {"k": "y"})
    edge = await read_edge(graph, "CONCEPT:a", "session:s", "MENTIONED_IN")
    assert edge is not None
    assert edge.weight == pytest.approx(2.3)
    assert edge.properties == {"j": "x", "k": "y"}
    for _ in range(40):
        await link_nodes(graph, "CONCEPT:a", "session:s", "MENTIONED_IN", 1.0)
    edge = await read_edge(graph, "CONCEPT:a", "session:s", "MENTIONED_IN")
    assert edge is not None and edge.weight == MAX_WEIGHT


@pytest.mark.sqlite_only(reason="reads SQLite itself (raw SQL, rowid, pragmas or the file)")
async def test_a_batch_of_links_gives_the_graph_of_its_links_one_by_one(
    graph: GraphDB, tmp_path: Path
) -> None:
    # link_edges writes a batch grouped by source; the links of one edge must still apply
    # in their order (weights compound, later properties win), whatever comes between them.
    rows = [EdgeRow("CONCEPT:b", "session:s", "MENTIONED_IN", 2.0, {"k": 1, "first": True}),
            EdgeRow("CONCEPT:a", "session:s", "MENTIONED_IN", 1.0, {"k": 9}),
            EdgeRow("CONCEPT:b", "session:s", "MENTIONED_IN", 0.5, {"k": 2}),
            EdgeRow("CONCEPT:a", "session:t", "MENTIONED_IN", 1.5),
            EdgeRow("CONCEPT:b", "session:s", "MENTIONED_IN", 3.0, {"k": 3})]
    one_by_one = await SqliteGraph.open(tmp_path / "one-by-one.db")
    try:
        for db in (graph, one_by_one):
            for node_id in ("CONCEPT:a", "CONCEPT:b", "session:s", "session:t"):
                await upsert_node(db, node_id, node_id.split(":")[0].upper())
        async with graph.write() as tx:
            await link_edges(tx, rows)
        for row in rows:
            async with one_by_one.write() as tx:
                await link_edges(tx, [row])
        edges = "SELECT source, target, relationship, weight, properties FROM edges ORDER BY 1, 2"
        assert await graph.query(edges) == await one_by_one.query(edges)
        edge = await read_edge(graph, "CONCEPT:b", "session:s", "MENTIONED_IN")
        assert edge is not None and edge.weight == pytest.approx(2.0 + 0.05 + 0.3)
        assert edge.properties == {"k": 3, "first": True}
    finally:
        await one_by_one.close()


async def test_a_batch_naming_edges_several_times_applies_each_mention_in_order(
    graph: GraphDB,
) -> None:
    # On PostgreSQL a batch goes as set-based statements, one per round of distinct keys; the
    # graph must be the one its links give one by one (here: into a twin set of nodes).
    def links(prefix: str) -> list[EdgeRow]:
        return [EdgeRow(f"CONCEPT:{prefix}b", "session:s", "MENTIONED_IN", 2.0, {"k": 1}),
                EdgeRow(f"CONCEPT:{prefix}a", "session:s", "MENTIONED_IN", 1.0, {"k": 9}),
                EdgeRow(f"CONCEPT:{prefix}b", "session:s", "MENTIONED_IN", 0.5, {"k": 2}),
                EdgeRow(f"CONCEPT:{prefix}a", "session:t", "MENTIONED_IN", 1.5),
                EdgeRow(f"CONCEPT:{prefix}b", "session:s", "MENTIONED_IN", 3.0,
                        {"k": 3, "last": True})]

    for node_id in ("CONCEPT:a", "CONCEPT:b", "CONCEPT:1a", "CONCEPT:1b", "session:s",
                    "session:t"):
        await upsert_node(graph, node_id, node_id.split(":")[0].upper())
    async with graph.write() as tx:
        await link_edges(tx, links(""))
    for row in links("1"):
        async with graph.write() as tx:
            await link_edges(tx, [row])
    for source, target in (("b", "s"), ("a", "s"), ("a", "t")):
        batched = await read_edge(graph, f"CONCEPT:{source}", f"session:{target}",
                                  "MENTIONED_IN")
        single = await read_edge(graph, f"CONCEPT:1{source}", f"session:{target}",
                                 "MENTIONED_IN")
        assert batched is not None and single is not None
        assert (batched.weight, batched.properties) == (single.weight, single.properties)
    edge = await read_edge(graph, "CONCEPT:b", "session:s", "MENTIONED_IN")
    assert edge is not None and edge.weight == pytest.approx(2.0 + 0.05 + 0.3)
    assert edge.properties == {"k": 3, "last": True}


@pytest.mark.sqlite_only(reason="reads SQLite itself (raw SQL, rowid, pragmas or the file)")
async def test_existence_is_read_from_sqlite_not_a_cache(graph: GraphDB) -> None:
    # Another writer (a separate connection) adds a node: this store sees it at once.
    other = sqlite3.connect(graph.location)
    other.execute("INSERT INTO nodes VALUES ('CONCEPT:late', 'CONCEPT', '{}')")
    other.commit()
    other.close()
    await upsert_node(graph, "CONCEPT:a", "CONCEPT")
    assert await link_nodes(graph, "CONCEPT:a", "CONCEPT:late", "RELATES") is True


async def test_a_writer_held_past_busy_timeout_fails_cleanly_and_the_next_write_succeeds(
    tmp_path: Path,
) -> None:
    db = await SqliteGraph.open(tmp_path / "g.sqlite", busy_timeout_ms=100)
    blocker = sqlite3.connect(tmp_path / "g.sqlite", isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")
    try:
        with pytest.raises(StoreUnavailable, match="begin write failed"):
            await upsert_node(db, "CONCEPT:a", "CONCEPT")
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()
    await upsert_node(db, "CONCEPT:a", "CONCEPT")
    assert await count_rows(db, "nodes") == 1
    await db.close()


async def test_a_failed_transaction_leaves_nothing_behind(graph: GraphDB) -> None:
    with pytest.raises(RuntimeError):
        async with graph.write() as tx:
            await tx.execute("INSERT INTO nodes VALUES ('CONCEPT:x', 'C', '{}')")
            raise RuntimeError("boom")
    assert await count_rows(graph, "nodes") == 0


async def test_read_only_open_never_changes_the_file(tmp_path: Path) -> None:
    path = tmp_path / "g.sqlite"
    db = await SqliteGraph.open(path)
    await upsert_node(db, "CONCEPT:a", "CONCEPT")
    await db.close()
    before = path.read_bytes()
    ro = await SqliteGraph.open(path, read_only=True)
    assert await existing_ids(ro, ["CONCEPT:a"]) == {"CONCEPT:a"}
    with pytest.raises(RuntimeError, match="read-only"):
        async with ro.write():
            pass
    await ro.close()
    assert path.read_bytes() == before


async def test_read_only_open_of_a_missing_file_creates_nothing(tmp_path: Path) -> None:
    ro = await SqliteGraph.open(tmp_path / "absent.sqlite", read_only=True)
    assert await count_rows(ro, "nodes") == 0
    await ro.close()
    assert not (tmp_path / "absent.sqlite").exists()


async def test_jobs_sharing_one_connection_take_it_in_turn(graph: GraphDB) -> None:
    """One process's jobs share one state connection: reads and write transactions of
    concurrent tasks (a pass, the alerting job, the drain) never collide on it, and a task's
    read inside its own open write transaction sees that transaction."""
    import asyncio

    await upsert_node(graph, "CONCEPT:a", "CONCEPT")

    async def writer(n: int) -> None:
        async with graph.write() as tx:
            await upsert_nodes(tx, [NodeRow(f"CONCEPT:w{n}", "CONCEPT", {"n": n})])
            await asyncio.sleep(0)  # let the others try the connection mid-transaction
            assert await existing_ids(graph, [f"CONCEPT:w{n}"]) == {f"CONCEPT:w{n}"}

    async def reader() -> None:
        for _ in range(5):
            assert "CONCEPT:a" in await existing_ids(graph, ["CONCEPT:a"])
            await asyncio.sleep(0)

    await asyncio.gather(*(writer(n) for n in range(5)), *(reader() for _ in range(5)))
    assert await existing_ids(graph, [f"CONCEPT:w{n}" for n in range(5)]) == {
        f"CONCEPT:w{n}" for n in range(5)}


async def test_pages_read_every_node_and_edge_once_in_byte_order(graph: GraphDB) -> None:
    # Ids that collate differently by locale, and edges that share a source and a target.
    ids = ["CONCEPT:b", "CONCEPT:a", "concept:a", "CONCEPT:\u00e9", "", "CONCEPT:a b"]
    async with graph.write() as tx:
        await upsert_nodes(tx, [NodeRow(i, "CONCEPT", {"n": n}) for n, i in enumerate(ids)])
        await link_edges(tx, [EdgeRow(s, t, r) for s in ids[:3] for t in ids[:3]
                              for r in ("R", "Q")])
    nodes = [row async for page in node_pages(graph, page_rows=2) for row in page]
    assert [row[0] for row in nodes] == sorted(ids, key=lambda i: i.encode())
    assert nodes[0][1:3] == ("CONCEPT", '{"n":4}')
    edges = [row async for page in edge_pages(graph, page_rows=4) for row in page]
    keys = [tuple(row[:3]) for row in edges]
    assert keys == sorted({(s, t, r) for s in ids[:3] for t in ids[:3] for r in ("R", "Q")},
                          key=lambda k: [part.encode() for part in k])
    assert [row async for page in node_pages(graph, page_rows=len(ids)) for row in page] == nodes
