"""The neo backend on real graph files of each of the original's schema versions: the graph
written through the original's tables as its GraphService writes it, its schema never touched,
its triggers logging every write, its boot run again afterwards dropping and breaking nothing."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import AsyncIterator
from contextlib import closing
from pathlib import Path

import pytest

from core.alerting.rules.alert_evaluation import Alert, Delivery
from core.alerting.stores.alert_records import recent_alerts, record_deliveries
from core.base.config.config import Settings
from core.base.rules.errors import ConfigError
from core.base.rules.graph_schema import NeoEra
from core.base.rules.nodes import EdgeRow, NodeRow, memory_node, minimal_session_node
from core.base.state.daemon_state import TickRecord, get_value, last_ticks, record_tick, set_value
from core.base.state.graph import (
    edge_pages,
    existing_ids,
    identity_conflicts,
    insert_edges_if_absent,
    insert_nodes_if_absent,
    link_edges,
    node_pages,
    nodes_by_id,
    upsert_node,
    upsert_nodes,
)
from core.base.state.graph_db import GraphDB
from core.base.state.neo.tables import original_tables
from core.base.state.state import open_graph
from core.base.state.telemetry import record_ingestion_metric
from core.base.state.tenants import list_tenants, set_tenant_policy, tenant_config
from core.reconcile.rules.tenant_policy import policy_patch, resolve_tenant_policy
from core.reconcile.stores.tenant_manifests import all_manifests, tenant_manifests
from tests.neo_graphs import (
    BARE_ERAS,
    ERAS,
    Edge,
    Node,
    agent_memory,
    assert_original_schema_unchanged,
    boot,
    build_neo_graph,
    concept,
    documents,
    edges_between,
    file_bytes,
    graph_log,
    insert_edges,
    node_rows,
    schema_entries,
)
from tests.neo_graphs import (
    tenant_config as original_tenant_config,
)
from tests.neo_graphs import (
    tenant_manifest as original_tenant_manifest,
)
from tests.support import make_settings

LOGGED = [e for e in ERAS if e is not NeoEra.V0]


def neo_settings(tmp_path: Path, **overrides: str) -> Settings:
    return make_settings(tmp_path, graphDbPath=str(tmp_path / "neo.sqlite"), **overrides)


@pytest.fixture(params=ERAS, ids=str)
def era(request: pytest.FixtureRequest) -> NeoEra:
    return NeoEra(request.param)


@pytest.fixture
def built(tmp_path: Path, era: NeoEra) -> Path:
    path = tmp_path / "neo.sqlite"
    build_neo_graph(path, era)
    return path


@pytest.fixture
async def neo(tmp_path: Path, built: Path) -> AsyncIterator[GraphDB]:
    graph = await open_graph(neo_settings(tmp_path).state)
    yield graph
    await graph.close()


async def test_a_graph_of_each_era_opens_as_the_originals_and_its_schema_stays_byte_for_byte(
    tmp_path: Path, built: Path, era: NeoEra,
) -> None:
    before = schema_entries(built)
    graph = await open_graph(neo_settings(tmp_path, graphSchema="neo").state)
    try:
        async with graph.write() as tx:
            await upsert_nodes(tx, [NodeRow("CONCEPT:d", "CONCEPT", {"k": 1})])
            await link_edges(tx, [EdgeRow("CONCEPT:a", "CONCEPT:d", "RELATES")])
        tables = await original_tables(graph)
    finally:
        await graph.close()
    assert_original_schema_unchanged(before, built)
    assert tables is not None and tables.era == str(era)
    assert (tables.nodes, tables.edges) == (5, 1)
    assert tables.graph_log == (None if era is NeoEra.V0 else 4 + 1 + 1)
    ours = {e[1] for e in schema_entries(built) if e[0] == "table" and e[1].startswith("kb_")}
    assert ours == {"kb_ingestion_metrics", *(f"kb_daemons_{t}" for t in (
        "drain_generations", "drain_requeued", "daemon_ticks", "daemon_state",
        "drainer_ticks", "alert_cooldowns", "alerts_fired", "restore_holds"))}


async def test_the_originals_telemetry_table_is_created_as_it_would_and_never_altered(
    tmp_path: Path,
) -> None:
    path = tmp_path / "neo.sqlite"
    build_neo_graph(path, NeoEra.E3)
    with closing(sqlite3.connect(path)) as conn:
        conn.execute("CREATE TABLE kb_ingestion_metrics (id TEXT PRIMARY KEY, timestamp "
                     "INTEGER NOT NULL, tenant_id TEXT NOT NULL, repo_slug TEXT NOT NULL, "
                     "origin_agent TEXT, event_type TEXT NOT NULL, chunks_total INTEGER "
                     "DEFAULT 0, chunks_embedded INTEGER DEFAULT 0, chunks_deleted INTEGER "
                     "DEFAULT 0, duration_ms INTEGER, error_code TEXT, detail TEXT)")
        conn.commit()
    before = schema_entries(path)
    await (await open_graph(neo_settings(tmp_path).state)).close()
    assert [e for e in schema_entries(path) if e[2] == "kb_ingestion_metrics"] == [
        e for e in before if e[2] == "kb_ingestion_metrics"], "no index of ours added to it"


async def test_the_originals_triggers_log_every_node_and_edge_the_daemons_write(
    tmp_path: Path, built: Path, era: NeoEra, neo: GraphDB,
) -> None:
    if era is NeoEra.V0:
        pytest.skip("the 2026-04-04 schema has no GraphLog")
    before = len(graph_log(built))
    async with neo.write() as tx:
        await upsert_nodes(tx, [NodeRow("CONCEPT:d", "CONCEPT", {}),
                                NodeRow("CONCEPT:a", "CONCEPT", {"seen": True})])
        await link_edges(tx, [EdgeRow("CONCEPT:d", "CONCEPT:a", "R")])
    async with neo.write() as tx:
        await link_edges(tx, [EdgeRow("CONCEPT:d", "CONCEPT:a", "R")])
    edge_id = edges_between(built, "CONCEPT:d", "CONCEPT:a", "R")[0]["id"]
    assert graph_log(built)[before:] == [
        (before + 1, "CONCEPT:d", "nodes"), (before + 2, "CONCEPT:a", "nodes"),
        (before + 3, edge_id, "edges"), (before + 4, edge_id, "edges")]


async def test_a_write_that_would_change_nothing_is_not_made(
    built: Path, era: NeoEra, neo: GraphDB,
) -> None:
    node = NodeRow("CONCEPT:a", "CONCEPT", {"name": "a", "description": ""})
    edge = EdgeRow("CONCEPT:a", "CONCEPT:b", "R", 1.0)
    async with neo.write() as tx:
        await upsert_nodes(tx, [NodeRow("CONCEPT:a", "CONCEPT", {"seen": 1})])
        await insert_edges_if_absent(tx, [edge])
    log, data = graph_log(built) if era is not NeoEra.V0 else [], documents(built)
    async with neo.write() as tx:
        await upsert_nodes(tx, [NodeRow("CONCEPT:a", "CONCEPT", {"seen": 1}), node])
        await insert_nodes_if_absent(tx, [NodeRow("CONCEPT:b", "CONCEPT", {})])
        await insert_edges_if_absent(tx, [edge])
    assert documents(built) == data
    if era is not NeoEra.V0:
        assert graph_log(built) == log, "no trigger fired: nothing was written"


async def test_repeat_mentions_reinforce_as_the_original_and_merge_the_properties(
    built: Path, neo: GraphDB,
) -> None:
    weights = []
    for n in range(3):
        async with neo.write() as tx:
            await link_edges(tx, [EdgeRow("CONCEPT:a", "CONCEPT:b", "R", 1.0, {f"k{n}": n})])
        [edge] = edges_between(built, "CONCEPT:a", "CONCEPT:b", "R")
        weights.append(edge["properties"]["weight"])
    assert weights == [1, 1.1, 1.2000000000000002]
    assert edge["properties"] == {"weight": 1.2000000000000002, "k0": 0, "k1": 1, "k2": 2}
    assert set(edge) == {"id", "source", "target", "type", "properties"}
    async with neo.write() as tx:  # two mentions in one batch reinforce twice
        await link_edges(tx, [EdgeRow("CONCEPT:a", "CONCEPT:c", "R")] * 2)
    assert [e["properties"]["weight"] for e in
            edges_between(built, "CONCEPT:a", "CONCEPT:c", "R")] == [1.1]


async def test_duplicate_rows_of_one_key_are_tolerated_and_the_first_one_is_reinforced(
    built: Path, era: NeoEra, neo: GraphDB,
) -> None:
    with closing(sqlite3.connect(built, isolation_level=None)) as conn:
        insert_edges(conn, era, [Edge("e-first", "CONCEPT:a", "CONCEPT:b", "R", 2.0),
                                 Edge("e-second", "CONCEPT:a", "CONCEPT:b", "R", 3.0)])
    async with neo.write() as tx:
        await link_edges(tx, [EdgeRow("CONCEPT:a", "CONCEPT:b", "R")])
    rows = edges_between(built, "CONCEPT:a", "CONCEPT:b", "R")
    assert [(r["id"], r["properties"]["weight"]) for r in rows] == [
        ("e-first", 2.1), ("e-second", 3.0)]


async def test_user_id_is_filled_where_the_table_has_the_column(
    built: Path, era: NeoEra, neo: GraphDB,
) -> None:
    async with neo.write() as tx:
        await upsert_nodes(tx, [NodeRow("CONCEPT:u", "CONCEPT", {"userId": "tobiu"})])
        await link_edges(tx, [EdgeRow("CONCEPT:u", "CONCEPT:a", "R", 1.0, {"userId": "x"})])
    with closing(sqlite3.connect(built)) as conn:
        columns = {r[1] for r in conn.execute("PRAGMA table_info(Edges)")}
        edge_user = (conn.execute("SELECT user_id FROM Edges").fetchone()[0]
                     if "user_id" in columns else None)
    assert node_rows(built)["CONCEPT:u"][0] == ("tobiu" if era in BARE_ERAS else None)
    assert edge_user == ("x" if era in BARE_ERAS else None)


async def test_an_upsert_keeps_every_key_the_original_wrote_and_deletes_none(
    built: Path, neo: GraphDB,
) -> None:
    async with neo.write() as tx:
        await upsert_nodes(tx, [NodeRow("frontier", "SYSTEM_ANCHOR", {"lastSeen": 5})],
                           drop_keys=("description",))
    assert documents(built)["frontier"]["properties"] == {
        "name": "Active Context Frontier", "description": "The shifting focal point.",
        "lastSeen": 5}


async def test_a_back_filled_memory_is_the_originals_node_of_its_era(
    built: Path, era: NeoEra, neo: GraphDB,
) -> None:
    async with neo.write() as tx:
        await insert_nodes_if_absent(tx, [
            memory_node("m-123456789012345", {"sessionId": "s1", "userId": "u"}, "backfilled"),
            minimal_session_node("s1")])
        await insert_edges_if_absent(tx, [EdgeRow("memory:m-123456789012345", "session:s1",
                                                  "ORIGINATES_IN")])
    nodes = documents(built)
    bare = era in BARE_ERAS
    memory_id = "m-123456789012345" if bare else "memory:m-123456789012345"
    assert "memory:m-123456789012345" not in nodes or not bare, "never memory:X in E2/E3"
    memory = nodes[memory_id]
    assert memory["label"] == ("AGENT_MEMORY" if bare else "MEMORY")
    assert memory["properties"]["name"] == "m-1234567890"
    assert ("semanticVectorId" in memory["properties"]) is bare
    assert nodes["session:s1"]["properties"] == {"name": "s1", "description": "",
                                                 "backfilled": True, "minimal": True,
                                                 "sessionId": "s1"}
    [edge] = edges_between(built, memory_id, "session:s1", "ORIGINATES_IN")
    assert edge["properties"] == {"weight": 1}
    assert await existing_ids(neo, ["memory:m-123456789012345"]) == {"memory:m-123456789012345"}
    found = await nodes_by_id(neo, ["memory:m-123456789012345"])
    assert found["memory:m-123456789012345"].id == memory_id


async def test_on_the_latest_eras_a_memory_resolves_to_its_bare_node_or_a_conflict(
    tmp_path: Path,
) -> None:
    for era in BARE_ERAS:
        path = tmp_path / f"{era}.sqlite"
        build_neo_graph(path, era, nodes=[agent_memory("m1"), concept("x"),
                                          Node("m2", "CONCEPT", {})])
        graph = await open_graph(make_settings(tmp_path / str(era), graphDbPath=str(path)).state)
        try:
            assert await existing_ids(graph, ["memory:m1", "memory:m2", "memory:m3"]) == {
                "memory:m1"}
            assert await identity_conflicts(graph, ["memory:m2", "memory:m3"]) == {
                "memory:m2": "canonical raw-memory id 'm2' is occupied by CONCEPT"}
        finally:
            await graph.close()


async def test_tenant_configs_in_the_originals_shape_are_read_from_data_properties(
    tmp_path: Path,
) -> None:
    path = tmp_path / "neo.sqlite"
    build_neo_graph(path, NeoEra.E3, nodes=[original_tenant_config("acme", version=4)])
    graph = await open_graph(neo_settings(tmp_path).state)
    try:
        [listed] = await list_tenants(graph)
        config = await tenant_config(graph, "acme")
    finally:
        await graph.close()
    assert (listed.tenant_id, listed.version) == ("acme", 4)
    assert config is not None and config.tenant_repos[0]["repoSlug"] == "github.com/acme/repo"


async def test_a_policy_set_back_to_inherit_reads_as_inherit_on_a_graph_that_keeps_keys(
    tmp_path: Path,
) -> None:
    path = tmp_path / "neo.sqlite"
    build_neo_graph(path, NeoEra.E3, nodes=[original_tenant_config("acme")])
    graph = await open_graph(neo_settings(tmp_path).state)
    try:
        await set_tenant_policy(graph, "acme", policy_patch(gap=None, grace_ms=None,
                                                            auto_tombstone="on"))
        config = await set_tenant_policy(graph, "acme", policy_patch(
            gap=None, grace_ms=None, auto_tombstone="inherit"))
    finally:
        await graph.close()
    assert documents(path)["kb-config:acme"]["properties"]["reconciliationPolicy"] == {
        "autoTombstone": None}, "the key stays: the original's merge deletes none"
    policy = resolve_tenant_policy(config.stored_policy, global_gap=2, global_grace_ms=0,
                                   global_auto_tombstone=True)
    assert policy.invalid_keys == () and policy.auto_tombstone_setting == "inherit"
    assert policy.auto_tombstone.value is True, "inherited from the global switch"


async def test_tenant_manifests_in_the_originals_shape_are_read_one_and_all(
    tmp_path: Path,
) -> None:
    path = tmp_path / "neo.sqlite"
    build_neo_graph(path, NeoEra.E2, nodes=[
        original_tenant_manifest("acme", "github.com/acme/repo", ["b.md", "a.md"], 1_000)])
    graph = await open_graph(neo_settings(tmp_path).state)
    try:
        one = await tenant_manifests(graph, "acme")
        every = await all_manifests(graph)
    finally:
        await graph.close()
    assert one["github.com/acme/repo"].paths_after_push == ("a.md", "b.md")
    assert one["github.com/acme/repo"].updated_at == 1_000
    assert every == {"acme": one}


async def test_a_dry_run_open_changes_no_byte_of_the_file_and_creates_no_table(
    tmp_path: Path, built: Path,
) -> None:
    # Never opened writable by the daemons: none of their tables exists. (Whether SQLite
    # leaves -wal/-shm files beside a WAL file read-only is the dry runs' side-file question,
    # the same for either schema; the bytes of the graph are the point here.)
    before = file_bytes(built), schema_entries(built)
    graph = await open_graph(neo_settings(tmp_path).state, read_only=True)
    try:
        assert await last_ticks(graph) == {}
        assert "daemon_ticks" not in await graph.table_names()
    finally:
        await graph.close()
    assert (file_bytes(built), schema_entries(built)) == before


async def test_a_dry_run_reads_the_daemons_own_tables_the_file_has_and_stands_in_for_the_rest(
    tmp_path: Path, built: Path,
) -> None:
    graph = await open_graph(neo_settings(tmp_path).state)
    await set_value(graph, "kept", "1", now_ms=1)
    await graph.close()
    with closing(sqlite3.connect(built)) as conn:
        conn.execute("DROP TABLE kb_daemons_daemon_ticks")  # its neighbour daemon_state stays
        conn.commit()
    before = file_bytes(built)
    dry = await open_graph(neo_settings(tmp_path).state, read_only=True)
    try:
        assert await last_ticks(dry) == {}
        assert await get_value(dry, "kept") == "1", "a stand-in never hides a real table"
    finally:
        await dry.close()
    assert file_bytes(built) == before


@pytest.mark.parametrize("era", LOGGED, ids=str)
async def test_the_originals_boot_afterwards_drops_and_breaks_nothing_and_writes_go_on(
    tmp_path: Path, era: NeoEra,
) -> None:
    path = tmp_path / "neo.sqlite"
    build_neo_graph(path, era)
    settings = neo_settings(tmp_path)
    graph = await open_graph(settings.state)
    try:
        async with graph.write() as tx:
            await upsert_nodes(tx, [NodeRow("CONCEPT:d", "CONCEPT", {})])
            await link_edges(tx, [EdgeRow("CONCEPT:d", "CONCEPT:a", "R")])
        later = [e for e in ERAS if ERAS.index(e) >= ERAS.index(era)]
        for version in later:  # the same version's boot again, then each later one's
            boot(path, version)
        async with graph.write() as tx:  # the open store follows the new schema
            await link_edges(tx, [EdgeRow("CONCEPT:d", "CONCEPT:a", "R"),
                                  EdgeRow("CONCEPT:d", "CONCEPT:b", "R", 1.0,
                                          {"userId": "u"})])
    finally:
        await graph.close()
    nodes = documents(path)
    assert {"CONCEPT:d", "CONCEPT:a", "frontier"} <= set(nodes)
    assert [e["properties"]["weight"] for e in
            edges_between(path, "CONCEPT:d", "CONCEPT:a", "R")] == [1.1]
    with closing(sqlite3.connect(path)) as conn:
        assert conn.execute("SELECT user_id FROM Edges WHERE target = 'CONCEPT:b'"
                            ).fetchone()[0] == "u", "the column an E2 boot added is filled"
        assert conn.execute("SELECT COUNT(*) FROM kb_daemons_daemon_state").fetchone()[0] >= 0
    reopened = await open_graph(settings.state)
    await reopened.close()


async def test_a_file_of_the_other_schema_or_of_none_is_refused_untouched(
    tmp_path: Path,
) -> None:
    kb_settings = make_settings(tmp_path / "kb")
    kb = await open_graph(kb_settings.state)
    await upsert_node(kb, "CONCEPT:a", "CONCEPT")
    await kb.close()
    neo_path = tmp_path / "neo.sqlite"
    build_neo_graph(neo_path, NeoEra.E2)
    foreign = tmp_path / "foreign.sqlite"
    with closing(sqlite3.connect(foreign)) as conn:
        conn.execute("CREATE TABLE users (id TEXT)")
        conn.commit()
    cases = [(make_settings(tmp_path / "a", graphDbPath=str(kb_settings.state.graph_db_path),
                            graphSchema="neo"), kb_settings.state.graph_db_path,
              'graphSchema = "neo" but the file holds'),
             (make_settings(tmp_path / "b", graphDbPath=str(neo_path), graphSchema="kb"),
              neo_path, 'graphSchema = "kb" but the file holds neo.mjs graph (E2'),
             (make_settings(tmp_path / "c", graphDbPath=str(foreign)), foreign,
              "found tables users")]
    for settings, path, words in cases:
        before = schema_entries(path), path.read_bytes()
        for read_only in (False, True):
            with pytest.raises(ConfigError) as raised:
                await open_graph(settings.state, read_only=read_only)
            assert words in str(raised.value)
        assert (schema_entries(path), path.read_bytes()) == before


async def test_a_node_document_the_original_cannot_parse_is_replaced_not_merged(
    built: Path, neo: GraphDB,
) -> None:
    with closing(sqlite3.connect(built, isolation_level=None)) as conn:
        conn.execute("UPDATE Nodes SET data = 'not json' WHERE id = 'CONCEPT:c'")
    async with neo.write() as tx:
        await upsert_nodes(tx, [NodeRow("CONCEPT:c", "CONCEPT", {"k": 1})])
    assert json.loads(json.dumps(documents(built)["CONCEPT:c"])) == {
        "id": "CONCEPT:c", "label": "CONCEPT",
        "properties": {"name": "CONCEPT:c", "description": "", "k": 1}}


async def test_the_daemons_own_state_lives_in_their_prefixed_tables_of_the_same_file(
    built: Path, neo: GraphDB,
) -> None:
    await record_tick(neo, TickRecord("drain", 1, 2, 1, True, {"n": 1}))
    await set_value(neo, "drain.watermark", "42", now_ms=3)
    alert = Alert("acme", "r", "chunksDeleted", 5.0, 1.0, "warn", "log", "wake", "tenant", 9)
    await record_deliveries(neo, [Delivery(alert, "subject", True)])
    await record_ingestion_metric(neo, tenant_id="acme", repo_slug="r", event_type="reconcile")
    assert (await last_ticks(neo))["drain"].figures == {"n": 1}
    assert await get_value(neo, "drain.watermark") == "42"
    assert [d.alert.metric for d in await recent_alerts(neo)] == ["chunksDeleted"]
    with closing(sqlite3.connect(built)) as conn:
        assert conn.execute("SELECT daemon FROM kb_daemons_daemon_ticks").fetchall() == [
            ("drain",)]
        assert conn.execute("SELECT COUNT(*) FROM kb_daemons_alerts_fired").fetchone()[0] == 1
        assert conn.execute("SELECT event_type FROM kb_ingestion_metrics").fetchall() == [
            ("reconcile",)]


async def test_pages_read_every_document_of_the_originals_tables_once(
        neo: GraphDB, built: Path) -> None:
    async with neo.write() as tx:
        await upsert_nodes(tx, [NodeRow(f"CONCEPT:{n}", "CONCEPT", {"n": n}) for n in range(5)])
        await link_edges(tx, [EdgeRow("CONCEPT:0", f"CONCEPT:{n}", "R") for n in range(5)])
    with closing(sqlite3.connect(built)) as conn:
        stored_nodes = sorted(conn.execute("SELECT id, data FROM Nodes"))
        stored_edges = sorted(conn.execute("SELECT source, target, id, type, data FROM Edges"))
    nodes = [row async for page in node_pages(neo, page_rows=2) for row in page]
    assert [(row[0], row[3]) for row in nodes] == stored_nodes
    assert json.loads(nodes[-1][2]) == json.loads(stored_nodes[-1][1])["properties"]
    edges = [row async for page in edge_pages(neo, page_rows=2) for row in page]
    assert edges == stored_edges
