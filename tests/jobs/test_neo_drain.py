"""The drain and live ingestion on a neo.mjs graph file, with a real embedded Chroma: a memory
endpoint resolves as the original of that era resolves it, nodes take the original's shapes,
every mention counts once, and nothing is written twice."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from core.base.chroma import VectorStore
from core.base.config.config import Settings
from core.base.rules.graph_schema import NeoEra
from core.base.runtime.context import TickContext
from core.base.state.state import open_graph
from core.drain.live_ingest import sync_sessions
from core.drain.queue_drain import drain_queue
from tests.neo_graphs import (
    SEED_NODES,
    Node,
    agent_memory,
    build_neo_graph,
    documents,
    edges_between,
    graph_log,
)
from tests.support import make_settings, seed

MEMORIES = [(f"m{i}", {"sessionId": "s1", "createdAt": 1_700_000_000_000 + i,
                       "userId": "@tobiu"}) for i in range(1, 6)]


def line(source: str, target: str, relationship: str = "MENTIONED_IN", **extra: Any) -> bytes:
    return json.dumps({"source": source, "target": target, "relationship": relationship,
                       **extra}).encode()


def enqueue(settings: Settings, *lines: bytes) -> None:
    path = settings.drain.lazy_edges_queue_path
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("ab") as queue:
        queue.write(b"".join(x + b"\n" for x in lines))


def queued(settings: Settings) -> list[dict[str, Any]]:
    path = settings.drain.lazy_edges_queue_path
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


def dead(settings: Settings) -> list[dict[str, Any]]:
    path = settings.drain.dead_letter_path
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


async def world(tmp_path: Path, era: NeoEra, *extra: Node,
                max_attempts: int = 10) -> AsyncIterator[TickContext]:
    """A graph of `era` (its boot seeds, concepts, `extra`) and Chroma with memories m1..m5 of
    session s1 (summarized)."""
    path = tmp_path / "neo.sqlite"
    build_neo_graph(path, era, nodes=[*SEED_NODES, *extra])
    settings = make_settings(tmp_path, graphDbPath=str(path), graphSchema="neo",
                             lazyEdgeMaxAttempts=max_attempts)
    vectors = await VectorStore.open(settings.chroma)
    await seed(vectors, settings.chroma.memory_collection, MEMORIES)
    await seed(vectors, settings.chroma.summary_collection,
               [("summary_s1", {"sessionId": "s1", "title": "First", "timestamp": 5,
                                "createdAt": "2026-08-01T00:00:00Z", "userId": "tobiu"})])
    graph = await open_graph(settings.state)
    try:
        yield TickContext(settings, graph, vectors)
    finally:
        await graph.close()
        await vectors.close()


@pytest.fixture
async def latest(tmp_path: Path) -> AsyncIterator[TickContext]:
    """E3 with m1 projected by MemoryService, `m2` held by a concept, `memory:m9` a semantic
    MEMORY node (no Chroma row behind it)."""
    async for context in world(tmp_path, NeoEra.E3, agent_memory("m1"),
                               Node("m2", "CONCEPT", {"name": "m2", "description": ""}),
                               Node("memory:m9", "MEMORY", {"name": "curated"}),
                               max_attempts=2):
        yield context


async def test_on_the_latest_original_each_memory_endpoint_resolves_as_it_would(
    latest: TickContext,
) -> None:
    s, path = latest.settings, latest.settings.state.graph_db_path
    enqueue(s, line("CONCEPT:a", "memory:m1"),          # X is AGENT_MEMORY: link to X
            line("CONCEPT:a", "MEMORY:m2"),             # X is a CONCEPT: conflict
            line("CONCEPT:a", "memory:m9"),             # only memory:X, no chromaId: itself
            line("CONCEPT:a", "memory:m3"),             # nothing: AGENT_MEMORY X from Chroma
            line("CONCEPT:a", "memory:ghost"))          # no Chroma row: later
    stats = await drain_queue(latest)
    assert (stats.succeeded, stats.requeued) == (3, 2)
    nodes = documents(path)
    assert "memory:m1" not in nodes and "memory:m3" not in nodes and "memory:m2" not in nodes
    assert edges_between(path, "CONCEPT:a", "m1", "MENTIONED_IN")
    assert edges_between(path, "CONCEPT:a", "memory:m9", "MENTIONED_IN")
    assert edges_between(path, "CONCEPT:a", "m3", "MENTIONED_IN")
    assert nodes["m3"]["label"] == "AGENT_MEMORY" and nodes["m3"]["properties"]["backfilled"]
    assert edges_between(path, "m3", "session:s1", "ORIGINATES_IN")
    assert nodes["m2"] == {"id": "m2", "label": "CONCEPT",
                           "properties": {"name": "m2", "description": ""}}, "untouched"
    assert not edges_between(path, "CONCEPT:a", "m2", "MENTIONED_IN")
    reasons = {q["target"]: q["_drain"]["lastReason"] for q in queued(s)}
    assert reasons == {"MEMORY:m2": "canonical-label-conflict",
                       "memory:ghost": "chroma-row-not-found"}


async def test_a_conflicting_memory_line_is_dead_lettered_after_its_attempts_with_the_reason(
    latest: TickContext,
) -> None:
    s = latest.settings
    enqueue(s, line("CONCEPT:a", "memory:m2"))
    await drain_queue(latest)
    await drain_queue(latest)
    [record] = dead(s)
    assert record["reason"] == "canonical-label-conflict" and record["attempts"] == 2
    assert not queued(s)


async def test_the_project_never_makes_a_second_node_for_a_memory_the_graph_holds(
    latest: TickContext,
) -> None:
    s, path = latest.settings, latest.settings.state.graph_db_path
    enqueue(s, line("CONCEPT:a", "memory:m1"), line("CONCEPT:b", "Memory:m1"))
    await sync_sessions(latest.graph, latest.vectors, s, ["s1"])
    await drain_queue(latest)
    nodes = documents(path)
    assert [n for n in nodes if n.endswith("m1")] == ["m1"]
    m1 = nodes["m1"]["properties"]
    assert m1["name"] == "Memory: m1" and m1["timestamp"], "MemoryService's keys kept"
    assert (m1["liveIngested"], m1["userId"], m1["semanticVectorId"]) == (True, "tobiu", "m1")


async def test_on_e1_a_memory_is_memory_x_as_that_original_keeps_it(tmp_path: Path) -> None:
    async for context in world(tmp_path, NeoEra.E1):
        enqueue(context.settings, line("CONCEPT:a", "memory:m3"))
        stats = await drain_queue(context)
        path = context.settings.state.graph_db_path
        nodes = documents(path)
        assert stats.succeeded == 1 and "m3" not in nodes
        assert nodes["memory:m3"]["label"] == "MEMORY"
        assert edges_between(path, "memory:m3", "session:s1", "ORIGINATES_IN")


async def test_every_mention_counts_once_a_twin_line_included_and_each_is_logged(
    latest: TickContext,
) -> None:
    s, path = latest.settings, latest.settings.state.graph_db_path
    twin = line("CONCEPT:a", "CONCEPT:b", "R", justification="same bytes")
    enqueue(s, twin, twin)
    await drain_queue(latest)
    enqueue(s, twin)
    await drain_queue(latest)
    [edge] = edges_between(path, "CONCEPT:a", "CONCEPT:b", "R")
    assert edge["properties"] == {"weight": 1.2000000000000002, "justification": "same bytes"}
    assert [row[1:] for row in graph_log(path) if row[1] == edge["id"]] == [
        (edge["id"], "edges")] * 2, "one insert and one update: each write logged once"


async def test_live_ingestion_writes_the_originals_shapes_and_a_rerun_writes_nothing(
    latest: TickContext,
) -> None:
    s, path = latest.settings, latest.settings.state.graph_db_path
    first = await sync_sessions(latest.graph, latest.vectors, s, ["s1"])
    log = graph_log(path)
    again = await sync_sessions(latest.graph, latest.vectors, s, ["s1"])
    nodes = documents(path)
    session = nodes["session:s1"]["properties"]
    assert (session["name"], session["liveIngested"], session["chromaId"]) == (
        "First", True, "summary_s1")
    assert "title" not in session
    assert first.errors == ["[memory:m2] canonical raw-memory id 'm2' is occupied by CONCEPT"]
    assert (first.memories_upserted, again.memories_upserted, again.memories_skipped) == (
        4, 0, 4)
    assert graph_log(path) == log, "a re-run changed nothing, so nothing was written"
    assert nodes["m2"]["label"] == "CONCEPT"
    for memory in ("m1", "m3", "m4", "m5"):
        assert nodes[memory]["label"] == "AGENT_MEMORY"
        assert edges_between(path, memory, "session:s1", "ORIGINATES_IN")
