"""Memory and summary rows as the original platform writes them (`timestamp` in epoch ms, no
`createdAt`), on a real embedded Chroma store: live ingestion and `backfill --days` date them
by `timestamp`, and the nodes they make are the original's (no `createdAt` key, the hash with
`createdAt` as "": research/neo-deployment.md §4.2, §5.3)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from core.base.chroma import VectorStore
from core.base.config.config import Settings
from core.base.io.clock import now_ms
from core.base.reports.progress import LogProgress
from core.base.rules.camel_json import to_json
from core.base.runtime.context import TickContext
from core.base.state.graph_db import GraphDB
from core.base.state.state import open_graph
from core.drain.eager_backfill import DAY_MS, eager_backfill
from core.drain.lazy_backfill import ingest_single_row
from core.drain.live_ingest import live_ingest_since
from tests.support import make_settings, read_node, run_module, seed

#: §4.2's check value: memory `{sessionId: 'sess-1', timestamp: …, userId: 'tobiu'}`.
SESS_1_TOBIU_HASH = "330cbb543d8c5f0da9fe0ff825bb14dd40c54a5e57ad456def7e5c50e1421677"


def original_memory(session_id: str, timestamp: int, **extra: Any) -> dict[str, Any]:
    """A memory row's metadata as the original's MemoryService writes it (§5.3)."""
    return {"prompt": "What is a REM tick?", "response": "A drain pass.", "thought": "…",
            "sessionId": session_id, "timestamp": timestamp, "type": "agent-interaction",
            "userId": "tobiu", "agentIdentity": "@neo-gemini", "model": "gemini",
            "amountToolCalls": 2, "toolsUsed": "read_file,search", **extra}


def original_summary(session_id: str, timestamp: int) -> tuple[str, dict[str, Any]]:
    """A summary row (id `summary_<sessionId>`) as the original's SessionService writes it."""
    return f"summary_{session_id}", {
        "sessionId": session_id, "timestamp": timestamp, "memoryCount": 1,
        "title": f"Session {session_id}", "category": "feature", "quality": 80,
        "productivity": 70, "impact": 60, "complexity": 50, "totalToolCalls": 2,
        "userId": "tobiu", "technologies": "python,sqlite", "participatingAgents": "@neo",
        "models": "gemini", "toolsUsed": "read_file,search"}


async def seed_original_sessions(vectors: VectorStore, settings: Settings,
                                 ages_days: dict[str, float], *, now: int) -> None:
    """One summary and one memory per session, each `age` days old, as the original writes."""
    await seed(vectors, settings.chroma.summary_collection,
               [original_summary(sid, now - int(age * DAY_MS)) for sid, age in ages_days.items()])
    await seed(vectors, settings.chroma.memory_collection,
               [(f"{sid}-m0", original_memory(sid, now - int(age * DAY_MS)))
                for sid, age in ages_days.items()])


async def test_live_ingestion_dates_the_originals_summaries_by_their_timestamp(
    graph: GraphDB, vectors: VectorStore, settings: Settings
) -> None:
    now = now_ms()
    await seed_original_sessions(vectors, settings, {"recent": 0.5, "old": 3}, now=now)
    report = await live_ingest_since(graph, vectors, settings, now - DAY_MS)
    figures = to_json(report.figures())
    assert figures["unparseableCreatedAt"] == 0
    assert (figures["sessionsFound"], figures["sessionsUpserted"],
            figures["memoriesUpserted"]) == (1, 1, 1)
    assert await read_node(graph, "session:recent") is not None
    assert await read_node(graph, "session:old") is None


async def test_the_nodes_of_the_originals_rows_are_the_originals(
    graph: GraphDB, vectors: VectorStore, settings: Settings
) -> None:
    now = now_ms()
    await seed_original_sessions(vectors, settings, {"sess-1": 0.1}, now=now)
    await live_ingest_since(graph, vectors, settings, now - DAY_MS)
    memory = await read_node(graph, "memory:sess-1-m0")
    session = await read_node(graph, "session:sess-1")
    assert memory is not None and session is not None
    # No `createdAt` (the row has none) and never the row's `timestamp` in its place.
    assert dict(memory.properties) == {
        "chromaId": "sess-1-m0", "sessionId": "sess-1", "userId": "tobiu",
        "payloadHash": SESS_1_TOBIU_HASH, "liveIngested": True}
    assert dict(session.properties) == {
        "chromaId": "summary_sess-1", "sessionId": "sess-1", "title": "Session sess-1",
        "userId": "tobiu", "liveIngested": True,
        # computed by the original's stableStringify under node: createdAt hashed as ""
        "payloadHash": "4c4f52b5034233e28c623790ceb77959406adb6b81131854bbce0fdb5fefb7b5"}


async def test_re_ingesting_the_originals_rows_inside_the_overlap_changes_nothing(
    graph: GraphDB, vectors: VectorStore, settings: Settings
) -> None:
    now = now_ms()
    await seed_original_sessions(vectors, settings, {"s1": 0.1, "s2": 0.2}, now=now)
    await live_ingest_since(graph, vectors, settings, now - DAY_MS)
    again = to_json((await live_ingest_since(graph, vectors, settings, now - DAY_MS)).figures())
    assert (again["sessionsFound"], again["sessionsSkipped"], again["memoriesSkipped"]) == (
        2, 2, 2)
    assert again["sessionsUpserted"] == again["memoriesUpserted"] == 0


async def test_a_present_but_unreadable_created_at_is_not_replaced_by_the_timestamp(
    graph: GraphDB, vectors: VectorStore, settings: Settings
) -> None:
    now = now_ms()
    sid, meta = original_summary("s1", now)
    await seed(vectors, settings.chroma.summary_collection, [(sid, {**meta, "createdAt": "soon"})])
    report = await live_ingest_since(graph, vectors, settings, now - DAY_MS)
    assert report.window.unparseable == 1 and report.window.session_ids == []
    assert report.window.unparseable_named == [
        {"rowId": "summary_s1", "sessionId": "s1", "createdAt": "soon"}]


async def test_a_row_with_neither_time_is_counted_and_named_by_its_timestamp(
    graph: GraphDB, vectors: VectorStore, settings: Settings
) -> None:
    sid, meta = original_summary("s1", 0)
    del meta["timestamp"]
    await seed(vectors, settings.chroma.summary_collection, [(sid, meta)])
    report = await live_ingest_since(graph, vectors, settings, 0)
    assert report.window.unparseable == 1
    assert report.window.unparseable_named == [
        {"rowId": "summary_s1", "sessionId": "s1", "timestamp": None}]


async def test_eager_backfill_takes_the_originals_sessions_of_its_window(
    graph: GraphDB, vectors: VectorStore, settings: Settings
) -> None:
    now = now_ms()
    await seed_original_sessions(vectors, settings, {"a": 1, "b": 6, "c": 9}, now=now)
    report = await eager_backfill(TickContext(settings, graph, vectors), days=7, dry_run=False,
                                  skip_drain=True, progress=LogProgress())
    live = to_json(report.figures())["liveIngest"]
    assert live["unparseableCreatedAt"] == 0 and live["sessionsFound"] == 2
    assert sorted(report.window.session_ids) == ["a", "b"]


async def test_lazy_backfill_of_an_originals_memory_makes_the_originals_node(
    graph: GraphDB, vectors: VectorStore, settings: Settings
) -> None:
    await seed(vectors, settings.chroma.memory_collection,
               [("m-1", original_memory("sess-1", 1_767_225_600_000))])
    await seed(vectors, settings.chroma.summary_collection, [original_summary("sess-1", 1)])
    result = await ingest_single_row(graph, vectors, settings, "memory:m-1")
    assert result.success
    memory = await read_node(graph, "memory:m-1")
    assert memory is not None and dict(memory.properties) == {
        "chromaId": "m-1", "sessionId": "sess-1", "userId": "tobiu",
        "payloadHash": SESS_1_TOBIU_HASH, "backfilled": True}


def test_the_backfill_command_ingests_the_originals_sessions(tmp_path: Path) -> None:
    import asyncio

    settings = make_settings(tmp_path)

    async def prepare() -> None:
        vectors = await VectorStore.open(settings.chroma)
        try:
            await seed_original_sessions(vectors, settings, {"x": 2, "y": 40}, now=now_ms())
        finally:
            await vectors.close()

    asyncio.run(prepare())
    config = tmp_path / "kb.toml"
    config.write_text(f'[knowledgeBase]\ndataDir = "{settings.data_dir}"\n')
    done = run_module("daemons.backfill", "--config", str(config), "--days", "7",
                      "--skip-drain", "--json", home=tmp_path / "home")
    assert done.returncode == 0, done.stderr
    live = json.loads(done.stdout)["liveIngest"]
    assert (live["sessionsFound"], live["unparseableCreatedAt"]) == (1, 0)

    async def nodes() -> list[str | None]:
        graph = await open_graph(settings.state, read_only=True)
        try:
            return [None if (n := await read_node(graph, f"session:{s}")) is None else n.id
                    for s in ("x", "y")]
        finally:
            await graph.close()

    assert asyncio.run(nodes()) == ["session:x", None]
