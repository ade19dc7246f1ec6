"""Back-fill of memory and session nodes from real Chroma rows (ingest_single_row and friends)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from core.base.chroma import VectorStore
from core.base.config.config import Settings
from core.base.rules.camel_json import to_json
from core.base.rules.ids import normalize_graph_node_id
from core.base.rules.nodes import memory_payload_hash
from core.base.state.graph import existing_ids, upsert_node
from core.base.state.graph_db import GraphDB
from core.drain.lazy_backfill import ingest_single_row, link_with_backfill, plan_backfill
from core.drain.rules.backfill_plan import Reason
from tests.support import count_chroma_calls, count_rows, read_edge, read_node, seed

MEMORIES: list[tuple[str, dict[str, Any]]] = [
    ("m1", {"sessionId": "s1", "createdAt": "2026-01-01T10:00:00Z", "userId": "u1"}),
    ("m2", {"sessionId": "s2", "createdAt": 1767261600000, "userId": "u2"}),
    ("m-orphan", {"createdAt": "2026-01-01T00:00:00Z"}),  # no session
]
SUMMARIES: list[tuple[str, dict[str, Any]]] = [
    ("sum-1b", {"sessionId": "s1", "title": "Later", "createdAt": "2026-01-02T00:00:00Z"}),
    ("sum-1a", {"sessionId": "s1", "title": "First", "createdAt": "2026-01-01T00:00:00Z",
                "userId": "u1"}),
]


@pytest.fixture
async def stores(vectors: VectorStore, settings: Settings) -> VectorStore:
    await seed(vectors, settings.chroma.memory_collection, MEMORIES)
    await seed(vectors, settings.chroma.summary_collection, SUMMARIES)
    return vectors


async def test_memory_backfill_brings_its_session_and_the_edge(
    graph: GraphDB, stores: VectorStore, settings: Settings
) -> None:
    result = await ingest_single_row(graph, stores, settings, "memory:m1")
    assert to_json(result) == {"success": True, "reason": "backfilled",
                                "graphNodeId": "memory:m1", "error": None}
    memory = await read_node(graph, "memory:m1")
    session = await read_node(graph, "session:s1")
    assert memory is not None and session is not None
    assert memory.label == "MEMORY" and session.label == "SESSION"
    assert memory.properties == {
        "chromaId": "m1", "sessionId": "s1", "createdAt": "2026-01-01T10:00:00Z",
        "userId": "u1", "payloadHash": memory_payload_hash(MEMORIES[0][1]), "backfilled": True,
    }
    assert session.properties["backfilled"] is True
    assert await read_edge(graph, "memory:m1", "session:s1", "ORIGINATES_IN") is not None


async def test_the_earliest_of_several_summaries_represents_the_session(
    graph: GraphDB, stores: VectorStore, settings: Settings
) -> None:
    result = await ingest_single_row(graph, stores, settings, "session:s1")
    assert result.reason is Reason.BACKFILLED
    session = await read_node(graph, "session:s1")
    assert session is not None
    assert session.properties["chromaId"] == "sum-1a"
    assert session.properties["title"] == "First"


async def test_a_session_without_summary_gets_a_minimal_node(
    graph: GraphDB, stores: VectorStore, settings: Settings
) -> None:
    result = await ingest_single_row(graph, stores, settings, "session:s2")
    assert result.reason is Reason.BACKFILLED_MINIMAL and result.success
    node = await read_node(graph, "session:s2")
    assert node is not None and node.properties["minimal"] is True
    assert "chromaId" not in node.properties


async def test_memory_whose_session_has_no_summary_links_to_a_minimal_session(
    graph: GraphDB, stores: VectorStore, settings: Settings
) -> None:
    assert (await ingest_single_row(graph, stores, settings, "memory:m2")).success
    session = await read_node(graph, "session:s2")
    assert session is not None and session.properties["minimal"] is True
    assert await read_edge(graph, "memory:m2", "session:s2", "ORIGINATES_IN") is not None


async def test_memory_without_a_session_is_written_without_an_edge(
    graph: GraphDB, stores: VectorStore, settings: Settings
) -> None:
    assert (await ingest_single_row(graph, stores, settings, "memory:m-orphan")).success
    assert await count_rows(graph, "nodes") == 1
    assert await count_rows(graph, "edges") == 0


async def test_uppercase_input_is_normalized_before_lookup_and_storage(
    graph: GraphDB, stores: VectorStore, settings: Settings
) -> None:
    result = await ingest_single_row(graph, stores, settings, "MEMORY:m1")
    assert result.graph_node_id == "memory:m1"
    assert await existing_ids(graph, ["memory:m1", "session:s1"]) == {"memory:m1", "session:s1"}


async def test_an_existing_node_is_already_exists(
    graph: GraphDB, stores: VectorStore, settings: Settings
) -> None:
    await ingest_single_row(graph, stores, settings, "memory:m1")
    result = await ingest_single_row(graph, stores, settings, "Memory:m1")
    assert (result.success, result.reason) == (True, Reason.ALREADY_EXISTS)


@pytest.mark.parametrize("node_id", ["CONCEPT:foo", "frontier", "memory:", "SESSION:", "", None, 7])
async def test_ids_that_name_no_row_are_unrecognized_and_never_reach_chroma(
    graph: GraphDB, stores: VectorStore, settings: Settings, node_id: object,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls = count_chroma_calls(monkeypatch, stores)
    result = await ingest_single_row(graph, stores, settings, node_id)
    assert (result.success, result.reason) == (False, Reason.UNRECOGNIZED_PREFIX)
    assert calls() == 0
    # The requested id is echoed, as the original does (a non-string has nothing to echo).
    assert result.graph_node_id == (normalize_graph_node_id(node_id)
                                    if isinstance(node_id, str) else None)


async def test_a_memory_chroma_does_not_have_is_row_not_found(
    graph: GraphDB, stores: VectorStore, settings: Settings
) -> None:
    result = await ingest_single_row(graph, stores, settings, "memory:hallucinated")
    assert (result.success, result.reason) == (False, Reason.CHROMA_ROW_NOT_FOUND)
    assert await count_rows(graph, "nodes") == 0


@pytest.mark.parametrize("node_id", ["memory:m1", "session:s1"])
async def test_a_missing_collection_is_no_collection_and_echoes_the_id(
    graph: GraphDB, vectors: VectorStore, settings: Settings, node_id: str
) -> None:
    result = await ingest_single_row(graph, vectors, settings, node_id)
    assert (result.success, result.reason) == (False, Reason.NO_COLLECTION)
    assert result.graph_node_id == node_id


async def test_a_failing_fetch_is_chroma_fetch_failed(
    graph: GraphDB, stores: VectorStore, settings: Settings,
    chroma_fault: Callable[..., None],
) -> None:
    chroma_fault(settings.chroma.memory_collection, "get")
    result = await ingest_single_row(graph, stores, settings, "memory:m1")
    assert (result.success, result.reason) == (False, Reason.CHROMA_FETCH_FAILED)
    assert result.error is not None and "injected" in result.error


async def test_an_unresolvable_session_fails_the_memory_too_and_writes_nothing(
    graph: GraphDB, stores: VectorStore, settings: Settings,
    chroma_fault: Callable[..., None],
) -> None:
    chroma_fault(settings.chroma.summary_collection, "get")
    result = await ingest_single_row(graph, stores, settings, "memory:m1")
    assert (result.success, result.reason) == (False, Reason.CHROMA_FETCH_FAILED)
    assert await count_rows(graph, "nodes") == 0, \
        "a memory must never land without its session edge"


async def test_an_unexpected_failure_is_error_and_does_not_raise(
    graph: GraphDB, stores: VectorStore, settings: Settings
) -> None:
    await graph.close()
    result = await ingest_single_row(graph, stores, settings, "memory:m1")
    assert (result.success, result.reason) == (False, Reason.ERROR)
    assert result.error


async def test_a_batch_plan_uses_one_query_and_one_fetch_per_collection(
    graph: GraphDB, stores: VectorStore, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = count_chroma_calls(monkeypatch, stores)
    plan = await plan_backfill(
        graph, stores, settings, ["memory:m1", "memory:m2", "memory:nope", "session:s1"]
    )
    assert calls() == 2
    assert {k: str(v.reason) for k, v in plan.results.items()} == {
        "memory:m1": "backfilled", "memory:m2": "backfilled",
        "memory:nope": "chroma-row-not-found", "session:s1": "backfilled",
        "session:s2": "backfilled-minimal",  # m2's parent comes along
    }
    assert await count_rows(graph, "nodes") == 0, "planning never writes"


async def test_link_with_backfill_materializes_endpoints_then_links(
    graph: GraphDB, stores: VectorStore, settings: Settings
) -> None:
    await upsert_node(graph, "CONCEPT:x", "CONCEPT")
    assert await link_with_backfill(graph, stores, settings, "CONCEPT:x", "MEMORY:m1",
                                    "MENTIONED_IN", 1.0, {"justification": "j"})
    edge = await read_edge(graph, "CONCEPT:x", "memory:m1", "MENTIONED_IN")
    assert edge is not None and edge.properties == {"justification": "j"}


async def test_link_with_backfill_culls_an_edge_to_a_hallucinated_memory(
    graph: GraphDB, stores: VectorStore, settings: Settings
) -> None:
    await upsert_node(graph, "CONCEPT:x", "CONCEPT")
    assert not await link_with_backfill(graph, stores, settings, "CONCEPT:x",
                                        "memory:nope", "MENTIONED_IN")
    assert await count_rows(graph, "edges") == 0
