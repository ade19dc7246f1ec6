"""Live ingestion of summarized sessions into the graph, on a real Chroma store."""

from __future__ import annotations

import pytest

from core.base.chroma import VectorStore
from core.base.config.config import Settings
from core.base.rules.camel_json import to_json
from core.base.rules.timestamps import epoch_ms_from_created_at
from core.base.state.graph import existing_ids
from core.base.state.graph_db import GraphDB
from core.drain.lazy_backfill import ingest_single_row
from core.drain.live_ingest import live_ingest_since, sync_session_to_graph
from tests.support import count_commits, count_rows, read_edge, read_node, seed

DAY_MS = 86_400_000


async def seed_session(
    vectors: VectorStore, settings: Settings, sid: str, created: object, memories: int = 2,
    *, summary_id: str | None = None,
) -> None:
    await seed(vectors, settings.chroma.summary_collection,
               [(summary_id or f"sum-{sid}",
                 {"sessionId": sid, "title": f"T {sid}", "createdAt": created, "userId": "u"})])
    if memories:
        await seed(vectors, settings.chroma.memory_collection,
                   [(f"{sid}-m{i}", {"sessionId": sid, "createdAt": created, "userId": "u"})
                    for i in range(memories)])


async def test_sync_writes_session_memories_and_edges_with_the_live_marker(
    graph: GraphDB, vectors: VectorStore, settings: Settings
) -> None:
    await seed_session(vectors, settings, "s1", "2026-01-01T00:00:00Z", memories=3)
    stats = to_json(await sync_session_to_graph(graph, vectors, settings, "s1"))
    assert stats == {"memoriesProcessed": 3, "memoriesUpserted": 3, "memoriesSkipped": 0,
                     "sessionUpserted": True, "errors": []}
    session = await read_node(graph, "session:s1")
    assert session is not None and session.properties["liveIngested"] is True
    assert session.properties["chromaId"] == "sum-s1"
    for i in range(3):
        memory = await read_node(graph, f"memory:s1-m{i}")
        assert memory is not None and memory.properties["liveIngested"] is True
        assert await read_edge(graph, f"memory:s1-m{i}", "session:s1", "ORIGINATES_IN")


async def test_a_second_sync_skips_everything_and_commits_nothing(
    graph: GraphDB, vectors: VectorStore, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    await seed_session(vectors, settings, "s1", "2026-01-01T00:00:00Z")
    await sync_session_to_graph(graph, vectors, settings, "s1")
    commits = count_commits(monkeypatch, graph)
    stats = to_json(await sync_session_to_graph(graph, vectors, settings, "s1"))
    assert stats["memoriesSkipped"] == 2 and stats["memoriesUpserted"] == 0
    assert stats["sessionUpserted"] is False
    assert commits() == 0


async def test_a_changed_created_at_re_upserts_that_memory(
    graph: GraphDB, vectors: VectorStore, settings: Settings
) -> None:
    await seed_session(vectors, settings, "s1", "2026-01-01T00:00:00Z")
    await sync_session_to_graph(graph, vectors, settings, "s1")
    await seed(vectors, settings.chroma.memory_collection,
               [("s1-m0", {"sessionId": "s1", "createdAt": "2026-02-02T00:00:00Z",
                           "userId": "u"})])
    stats = to_json(await sync_session_to_graph(graph, vectors, settings, "s1"))
    assert (stats["memoriesUpserted"], stats["memoriesSkipped"]) == (1, 1)
    memory = await read_node(graph, "memory:s1-m0")
    assert memory is not None and memory.properties["createdAt"] == "2026-02-02T00:00:00Z"


async def test_a_session_without_memories_still_gets_its_node(
    graph: GraphDB, vectors: VectorStore, settings: Settings
) -> None:
    await seed_session(vectors, settings, "s1", "2026-01-01T00:00:00Z", memories=0)
    await vectors.ensure_collection(settings.chroma.memory_collection)
    stats = to_json(await sync_session_to_graph(graph, vectors, settings, "s1"))
    assert stats["sessionUpserted"] is True and stats["memoriesProcessed"] == 0
    assert await count_rows(graph, "nodes") == 1


async def test_a_missing_session_id_is_an_input_error_not_an_exception(
    graph: GraphDB, vectors: VectorStore, settings: Settings
) -> None:
    for bad in (None, "", 5):
        stats = to_json(await sync_session_to_graph(graph, vectors, settings, bad))
        assert stats["errors"] == ["[input] sessionId is required"]
    assert await count_rows(graph, "nodes") == 0


async def test_a_session_without_summary_row_is_reported(
    graph: GraphDB, vectors: VectorStore, settings: Settings
) -> None:
    await seed_session(vectors, settings, "other", "2026-01-01T00:00:00Z")
    stats = to_json(await sync_session_to_graph(graph, vectors, settings, "ghost"))
    assert stats["errors"] == ["[ghost] no summary row for this session"]


async def test_a_store_failure_is_reported_and_never_raised(
    graph: GraphDB, vectors: VectorStore, settings: Settings
) -> None:
    stats = to_json(await sync_session_to_graph(graph, vectors, settings, "s1"))  # no collections
    assert len(stats["errors"]) == 1 and stats["errors"][0].startswith("[fatal]")


async def test_live_ingestion_upgrades_backfilled_and_minimal_nodes(
    graph: GraphDB, vectors: VectorStore, settings: Settings
) -> None:
    await seed(vectors, settings.chroma.memory_collection,
               [("s1-m0", {"sessionId": "s1", "createdAt": 1, "userId": "u"})])
    await vectors.ensure_collection(settings.chroma.summary_collection)
    await ingest_single_row(graph, vectors, settings, "memory:s1-m0")
    minimal = await read_node(graph, "session:s1")
    assert minimal is not None and minimal.properties["minimal"] is True

    await seed(vectors, settings.chroma.summary_collection,
               [("sum-s1", {"sessionId": "s1", "title": "Now summarized", "createdAt": 2})])
    stats = to_json(await sync_session_to_graph(graph, vectors, settings, "s1"))
    assert stats["sessionUpserted"] is True and stats["memoriesUpserted"] == 1
    session = await read_node(graph, "session:s1")
    memory = await read_node(graph, "memory:s1-m0")
    assert session is not None and memory is not None
    assert session.properties["liveIngested"] is True
    assert "minimal" not in session.properties and "backfilled" not in session.properties
    assert session.properties["chromaId"] == "sum-s1"
    assert memory.properties["liveIngested"] is True and "backfilled" not in memory.properties


async def test_only_sessions_summarized_after_the_cutoff_are_ingested(
    graph: GraphDB, vectors: VectorStore, settings: Settings
) -> None:
    now = epoch_ms_from_created_at("2026-06-10T00:00:00Z")
    assert now is not None
    await seed_session(vectors, settings, "recent-iso", "2026-06-09T12:00:00Z")
    await seed_session(vectors, settings, "recent-epoch", now - DAY_MS // 4)
    await seed_session(vectors, settings, "old", "2026-05-01T00:00:00Z")
    await seed_session(vectors, settings, "garbled", "last tuesday")
    report = await live_ingest_since(graph, vectors, settings, now - DAY_MS)
    assert sorted(report.window.session_ids) == ["recent-epoch", "recent-iso"]
    assert report.window.unparseable == 1
    assert report.window.unparseable_named[0]["sessionId"] == "garbled"
    assert await existing_ids(graph, ["session:old", "session:garbled"]) == set()
    assert report.figures().memories_upserted == 4


async def test_a_dry_run_counts_but_writes_nothing(
    graph: GraphDB, vectors: VectorStore, settings: Settings
) -> None:
    await seed_session(vectors, settings, "s1", "2026-06-09T12:00:00Z")
    report = await live_ingest_since(graph, vectors, settings, 0, dry_run=True)
    assert report.stats.sessions_upserted == 1 and report.stats.memories_upserted == 2
    assert await count_rows(graph, "nodes") == 0
