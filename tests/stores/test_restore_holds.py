"""The restore holds in the state (`core.reconcile.stores.restore_holds`) on both backends and
on a neo.mjs graph file: written in batches, read by tenant and by chunk, counted, released
(all or one archive's), and lapsed ones dropped exactly as read."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

from core.base.rules.graph_schema import NeoEra
from core.base.rules.tenants import TENANT_CONFIG_LABEL
from core.base.state.graph import upsert_node
from core.base.state.graph_db import GraphDB
from core.base.state.state import open_graph
from core.reconcile.rules.restore_holds import HoldEvidence, tenant_evidence
from core.reconcile.stores import restore_holds
from core.reconcile.stores.restore_holds import (
    RestoreHoldWriter,
    current_evidence,
    drop_lapsed_holds,
    hold_chunks,
    hold_counts,
    holds_of_chunks,
    release_holds,
    tenant_holds,
)
from tests.neo_graphs import build_neo_graph
from tests.support import make_settings

pytestmark = pytest.mark.both_backends

EVIDENCE = HoldEvidence(3, "f" * 64, 0)


async def test_a_restore_of_many_chunks_is_held_in_batches_and_read_back(
    graph: GraphDB, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(restore_holds, "HOLD_BATCH_ROWS", 7)
    ids = [f"c{i:03d}" for i in range(50)]
    await hold_chunks(graph, tenant_id="acme", archive="a.jsonl", restored_at_ms=10,
                      evidence=EVIDENCE, ids=ids)
    await hold_chunks(graph, tenant_id="beta", archive="b.jsonl", restored_at_ms=11,
                      evidence=EVIDENCE, ids=["c000"])

    held = await tenant_holds(graph, "acme")
    assert [h.chunk_id for h in held] == ids
    assert {(h.archive, h.restored_at_ms, h.evidence) for h in held} == {
        ("a.jsonl", 10, EVIDENCE)}
    found = await holds_of_chunks(graph, "acme", ["c001", "c049", "nope"])
    assert sorted(h.chunk_id for h in found) == ["c001", "c049"]
    assert [h.tenant_id for h in await holds_of_chunks(graph, "beta", ids)] == ["beta"]
    counts = await hold_counts(graph)
    assert {t: (c.chunks, c.archives) for t, c in counts.items()} == {
        "acme": (50, 1), "beta": (1, 1)}


async def test_holding_a_chunk_again_replaces_its_hold(graph: GraphDB) -> None:
    await hold_chunks(graph, tenant_id="acme", archive="a.jsonl", restored_at_ms=10,
                      evidence=EVIDENCE, ids=["c1"])
    later = HoldEvidence(5, "e" * 64, 9)
    await hold_chunks(graph, tenant_id="acme", archive="b.jsonl", restored_at_ms=20,
                      evidence=later, ids=["c1"])
    [hold] = await tenant_holds(graph, "acme")
    assert (hold.archive, hold.restored_at_ms, hold.evidence) == ("b.jsonl", 20, later)


async def test_release_lifts_a_tenants_holds_or_only_one_archives(graph: GraphDB) -> None:
    for archive, ids in (("a.jsonl", ["c1", "c2"]), ("b.jsonl", ["c3"])):
        await hold_chunks(graph, tenant_id="acme", archive=archive, restored_at_ms=10,
                          evidence=EVIDENCE, ids=ids)
    await hold_chunks(graph, tenant_id="beta", archive="a.jsonl", restored_at_ms=10,
                      evidence=EVIDENCE, ids=["c9"])

    assert await release_holds(graph, "acme", archive="b.jsonl") == 1
    assert [h.chunk_id for h in await tenant_holds(graph, "acme")] == ["c1", "c2"]
    assert await release_holds(graph, "acme") == 2
    assert await release_holds(graph, "acme") == 0
    assert [h.chunk_id for h in await tenant_holds(graph, "beta")] == ["c9"]


async def test_dropping_lapsed_holds_keeps_a_chunk_held_again_since(graph: GraphDB) -> None:
    await hold_chunks(graph, tenant_id="acme", archive="a.jsonl", restored_at_ms=10,
                      evidence=EVIDENCE, ids=["c1", "c2"])
    lapsed = await tenant_holds(graph, "acme")
    await hold_chunks(graph, tenant_id="acme", archive="b.jsonl", restored_at_ms=20,
                      evidence=EVIDENCE, ids=["c2"])  # restored again after the read
    await drop_lapsed_holds(graph, "acme", lapsed)
    assert [(h.chunk_id, h.archive) for h in await tenant_holds(graph, "acme")] == [
        ("c2", "b.jsonl")]


async def test_a_restores_writer_records_the_tenants_evidence_at_its_first_batch(
    graph: GraphDB,
) -> None:
    await upsert_node(graph, "kb-config:acme", TENANT_CONFIG_LABEL,
                      {"version": 4, "repoSlug": "acme/repo"})
    writer = RestoreHoldWriter(graph, "a.jsonl")
    await writer.hold("acme", ["c1", "c2"])
    await writer.hold("acme", ["c3"])
    held = await tenant_holds(graph, "acme")
    assert writer.held == 3 and len(held) == 3
    assert {h.evidence for h in held} == {tenant_evidence(4, {})}
    assert len({h.restored_at_ms for h in held}) == 1
    assert await current_evidence(graph, "acme") == tenant_evidence(4, {})
    await writer.unhold("acme", ["c2"])  # refused by the store: not restored, not held
    assert [h.chunk_id for h in await tenant_holds(graph, "acme")] == ["c1", "c3"]
    assert writer.held == 2


@pytest.mark.sqlite_only("a neo.mjs graph is a SQLite file")
async def test_holds_live_in_an_own_table_of_a_neo_graph_file(tmp_path: Path) -> None:
    path = tmp_path / "neo.sqlite"
    build_neo_graph(path, NeoEra.E3)
    settings = make_settings(tmp_path, graphDbPath=str(path))
    graph = await open_graph(settings.state)
    try:
        await hold_chunks(graph, tenant_id="acme", archive="a.jsonl", restored_at_ms=10,
                          evidence=EVIDENCE, ids=["c1"])
        assert [h.chunk_id for h in await tenant_holds(graph, "acme")] == ["c1"]
        assert "restore_holds" in await graph.table_names()
    finally:
        await graph.close()
    with closing(sqlite3.connect(path)) as conn:
        names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
    assert "kb_daemons_restore_holds" in names and "restore_holds" not in names


@pytest.mark.sqlite_only("an older SQLite file opened read-only")
async def test_a_read_only_state_without_the_table_reads_no_hold(tmp_path: Path) -> None:
    settings = make_settings(tmp_path)
    graph = await open_graph(settings.state)
    await graph.close()
    with closing(sqlite3.connect(settings.state.graph_db_path)) as conn:
        conn.execute("DROP TABLE restore_holds")
        conn.commit()
    reader = await open_graph(settings.state, read_only=True)
    try:
        assert await tenant_holds(reader, "acme") == []
        assert await holds_of_chunks(reader, "acme", ["c1"]) == []
        assert await hold_counts(reader) == {}
    finally:
        await reader.close()
