"""Lazy back-fill: materialize missing `memory:` / `session:` nodes from their Chroma rows.

One planner serves every entry point: `ingest_single_row` (one id), `link_with_backfill` (an
edge's two endpoints) and the queue drainer (thousands of ids at once). Planning reads, the
decisions are `core.drain.rules.backfill_plan`'s, and the caller writes a plan in one transaction,
so a memory, its session and their ORIGINATES_IN edge land together or not at all.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from typing import TYPE_CHECKING, Any

import structlog

from core.base.chroma import CollectionMissing, VectorStoreError
from core.base.rules.ids import normalize_graph_node_id, parse_row_node_id, session_node_id
from core.base.rules.rows import ChromaRow
from core.base.state.graph import (
    existing_ids,
    identity_conflicts,
    insert_edges_if_absent,
    insert_nodes_if_absent,
    link_nodes,
)
from core.drain.rules.backfill_plan import (
    BackfillPlan,
    BackfillResult,
    Reason,
    memories_fetched,
    memories_unreadable,
    missing_keys,
    parents_of,
    plan_memories,
    plan_sessions,
    sessions_needed,
    sort_request,
    unrecognized,
)

if TYPE_CHECKING:
    from core.base.chroma import VectorStore
    from core.base.config.config import Settings
    from core.base.state.graph_db import GraphDB

log = structlog.get_logger(__name__)


async def plan_backfill(
    graph: GraphDB,
    vectors: VectorStore,
    settings: Settings,
    node_ids: Iterable[str],
    *,
    existing: Collection[str] | None = None,
) -> BackfillPlan:
    """Resolve many node ids at once (reads only): the graph once for which exist, Chroma once
    (chunked) for the missing memories and once for their sessions. `existing`, when given,
    is the caller's fresh answer to which exist.

    Raises nothing for Chroma trouble: it becomes the reason of every id it affects, so the
    caller can decide (retry the line, fail the tick).
    """
    request = sort_request(node_ids)
    plan = request.plan
    if not request.row_ids:
        return plan
    present = set(existing) if existing is not None else await existing_ids(
        graph, list(request.row_ids))
    conflicts = await identity_conflicts(
        graph, [n for n, (kind, _) in request.row_ids.items()
                if kind == "memory" and n not in present])
    memory_keys, session_keys = missing_keys(request, present, conflicts)
    memory_rows = await _fetch_memories(vectors, settings, memory_keys, plan)
    parents = parents_of(memory_rows, present)
    present_parents = await existing_ids(graph, [session_node_id(s) for s in parents])
    needed = sessions_needed(session_keys, parents, present_parents)
    session_failure = await _fetch_and_plan_sessions(vectors, settings, needed, plan)
    plan_memories(plan, memory_rows, session_keys=session_keys, needed=needed,
                  session_failure=session_failure)
    return plan


async def _fetch_memories(
    vectors: VectorStore, settings: Settings, keys: list[str], plan: BackfillPlan
) -> list[ChromaRow]:
    """Fetch memory rows by id; the plan records why each one not read is missing."""
    if not keys:
        return []
    try:
        rows = await vectors.get_by_ids(settings.chroma.memory_collection, keys)
    except CollectionMissing as exc:
        memories_unreadable(plan, keys, reason=Reason.NO_COLLECTION, error=str(exc))
        return []
    except VectorStoreError as exc:
        plan.fetch_errors.append(exc)
        memories_unreadable(plan, keys, reason=Reason.CHROMA_FETCH_FAILED, error=str(exc))
        return []
    memories_fetched(plan, keys, rows)
    return rows


async def _fetch_and_plan_sessions(
    vectors: VectorStore, settings: Settings, session_keys: list[str], plan: BackfillPlan
) -> BackfillResult | None:
    """Read the summary rows of the sessions and plan their nodes; returns the failure that
    stopped every session from resolving, or None on success."""
    if not session_keys:
        return None
    try:
        rows = await vectors.get_where_in(settings.chroma.summary_collection, "sessionId",
                                          session_keys)
    except CollectionMissing as exc:
        return BackfillResult.of(Reason.NO_COLLECTION, None, str(exc))
    except VectorStoreError as exc:
        plan.fetch_errors.append(exc)
        return BackfillResult.of(Reason.CHROMA_FETCH_FAILED, None, str(exc))
    plan_sessions(plan, session_keys, rows)
    return None


async def write_plan(graph: GraphDB, plan: BackfillPlan) -> None:
    """Write a plan in one transaction. Nodes that appeared meanwhile win (insert-if-absent):
    a concurrent live ingestion is never overwritten by a back-fill."""
    if not plan.nodes:
        return
    async with graph.write() as tx:
        await insert_nodes_if_absent(tx, plan.nodes)
        await insert_edges_if_absent(tx, plan.edges)


async def ingest_single_row(
    graph: GraphDB, vectors: VectorStore, settings: Settings, node_id: Any
) -> BackfillResult:
    """Make one `memory:` / `session:` node exist (with its parent session), never raising.

    An id that names no row is `unrecognized-prefix` and never reaches Chroma; every result
    echoes the requested id, normalized, as `graphNodeId`, as the original does.
    """
    parsed = parse_row_node_id(node_id)
    if parsed is None:
        return unrecognized(node_id)
    try:
        plan = await plan_backfill(graph, vectors, settings, [parsed.node_id])
        await write_plan(graph, plan)
        return plan.results[parsed.node_id]
    except Exception as exc:
        log.error("backfill.failed", node_id=parsed.node_id, exc_info=True)
        return BackfillResult.of(Reason.ERROR, parsed.node_id, str(exc))


async def link_with_backfill(
    graph: GraphDB,
    vectors: VectorStore,
    settings: Settings,
    source: str,
    target: str,
    relationship: str,
    weight: float = 1.0,
    properties: Mapping[str, Any] | None = None,
) -> bool:
    """Link two nodes, first back-filling missing endpoints (the platform's `linkNodesAsync`);
    False, the edge culled, when an endpoint cannot be resolved."""
    source = normalize_graph_node_id(source)
    target = normalize_graph_node_id(target)
    present = await existing_ids(graph, [source, target])
    missing = [n for n in dict.fromkeys([source, target]) if n not in present]
    if missing:
        plan = await plan_backfill(graph, vectors, settings, missing, existing=present)
        await write_plan(graph, plan)
        unresolved = [n for n in missing if not plan.resolved(n)]
        if unresolved:
            log.info("graph.endpoint_unresolved", source=source, target=target,
                     relationship=relationship,
                     reasons={n: str(plan.results[n].reason) for n in unresolved
                              if n in plan.results})
            return False
    return await link_nodes(graph, source, target, relationship, weight, properties)
