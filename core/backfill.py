"""Back-fill: materialize missing `memory:` / `session:` nodes from their Chroma rows.

One planner serves every entry point: `ingest_single_row` (one id), `link_with_backfill` (an
edge's two endpoints) and the queue drainer (thousands of ids at once). Planning reads; it never
writes. It asks SQLite once which ids exist, Chroma once (chunked) for the missing memories and
once for the sessions they and the request need, and returns the nodes and edges to write plus
a result per requested id in the original's contract `{success, reason, graphNodeId, error}`.
The caller writes a plan in one transaction, so a memory, its session and their ORIGINATES_IN
edge land together or not at all: when the parent session cannot be resolved because Chroma
failed, the memory is not written either (`chroma-fetch-failed`) and is retried later.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any

import structlog

from core.rules.ids import (
    memory_node_id,
    normalize_graph_node_id,
    parse_row_node_id,
    session_node_id,
)
from core.rules.nodes import (
    EdgeRow,
    NodeRow,
    memory_node,
    minimal_session_node,
    originates_in,
    pick_summary_row,
    session_id_of,
    session_node,
)
from core.rules.rows import ChromaRow
from core.stores.chroma import CollectionMissing, VectorStoreError
from core.stores.graph import (
    existing_ids,
    insert_edges_if_absent,
    insert_nodes_if_absent,
    link_nodes,
)

if TYPE_CHECKING:
    from core.rules.config import Settings
    from core.stores.chroma import VectorStore
    from core.stores.sqlite import GraphDB, Transaction

log = structlog.get_logger(__name__)


class Reason(StrEnum):
    """Why a back-fill succeeded or failed (the original's eight reasons)."""

    UNRECOGNIZED_PREFIX = "unrecognized-prefix"
    ALREADY_EXISTS = "already-exists"
    BACKFILLED = "backfilled"
    BACKFILLED_MINIMAL = "backfilled-minimal"
    NO_COLLECTION = "no-collection"
    CHROMA_FETCH_FAILED = "chroma-fetch-failed"
    CHROMA_ROW_NOT_FOUND = "chroma-row-not-found"
    ERROR = "error"


_SUCCESS = {Reason.ALREADY_EXISTS, Reason.BACKFILLED, Reason.BACKFILLED_MINIMAL}


@dataclass(frozen=True, slots=True)
class BackfillResult:
    """The outcome for one requested node id."""

    success: bool
    reason: Reason
    graph_node_id: str | None = None
    error: str | None = None

    @classmethod
    def of(cls, reason: Reason, node_id: str | None, error: str | None = None) -> BackfillResult:
        """A result whose success follows from its reason."""
        return cls(reason in _SUCCESS, reason, node_id, error)

    def as_dict(self) -> dict[str, Any]:
        """The original's result shape (camelCase keys)."""
        return {
            "success": self.success,
            "reason": str(self.reason),
            "graphNodeId": self.graph_node_id,
            "error": self.error,
        }


@dataclass(slots=True)
class BackfillPlan:
    """What to write so the requested nodes exist, and the outcome per requested id."""

    results: dict[str, BackfillResult] = field(default_factory=dict)
    nodes: list[NodeRow] = field(default_factory=list)
    edges: list[EdgeRow] = field(default_factory=list)
    #: The Chroma failures behind `chroma-fetch-failed` results, as raised (a caller that must
    #: tell an outage from a request refused for its data looks at their causes).
    fetch_errors: list[VectorStoreError] = field(default_factory=list)

    def resolved(self, node_id: str) -> bool:
        """Whether `node_id` exists, or will once the plan is written."""
        result = self.results.get(node_id)
        return result is not None and result.success

    async def apply(self, tx: Transaction) -> None:
        """Write the plan inside the caller's transaction. Nodes that appeared meanwhile win
        (insert-if-absent): a concurrent live ingestion is never overwritten by a back-fill."""
        await insert_nodes_if_absent(tx, self.nodes)
        await insert_edges_if_absent(tx, self.edges)


async def plan_backfill(
    graph: GraphDB,
    vectors: VectorStore,
    settings: Settings,
    node_ids: Iterable[str],
    *,
    existing: Collection[str] | None = None,
) -> BackfillPlan:
    """Resolve many node ids at once (reads only). `existing`, when given, is the caller's
    fresh answer to "which of these exist" and saves the first SQLite query.

    Raises nothing for Chroma trouble: a missing collection or a failed fetch becomes the
    reason of every id it affects, so the caller can decide (retry the line, fail the tick).
    """
    plan = BackfillPlan()
    row_ids: dict[str, tuple[str, str]] = {}  # canonical id -> (kind, key)
    for raw in node_ids:
        parsed = parse_row_node_id(raw)
        canonical = normalize_graph_node_id(raw)
        if parsed is None:
            plan.results[str(canonical)] = BackfillResult.of(Reason.UNRECOGNIZED_PREFIX, None)
        else:
            row_ids[parsed.node_id] = (parsed.kind, parsed.key)
    if not row_ids:
        return plan

    present = set(existing) if existing is not None else await existing_ids(graph, list(row_ids))
    memory_keys: list[str] = []
    session_keys: list[str] = []
    for node_id, (kind, key) in row_ids.items():
        if node_id in present:
            plan.results[node_id] = BackfillResult.of(Reason.ALREADY_EXISTS, node_id)
        elif kind == "memory":
            memory_keys.append(key)
        else:
            session_keys.append(key)

    memory_rows = await _fetch_memories(vectors, settings, memory_keys, plan)

    # Parents of the memories found: those not in the graph must come with them.
    parents = {sid for row in memory_rows if (sid := session_id_of(row.metadata))}
    unknown_parents = [s for s in parents if session_node_id(s) not in present]
    present_parents = await existing_ids(graph, [session_node_id(s) for s in unknown_parents])
    sessions_needed = list(dict.fromkeys(
        session_keys + [s for s in unknown_parents if session_node_id(s) not in present_parents]
    ))
    session_failure = await _plan_sessions(vectors, settings, sessions_needed, plan)

    for sid in session_keys:
        node_id = session_node_id(sid)
        if node_id not in plan.results and session_failure is not None:
            plan.results[node_id] = session_failure
    for row in memory_rows:
        node_id = memory_node_id(row.id)
        sid = session_id_of(row.metadata)
        if sid is not None and sid in sessions_needed and session_failure is not None:
            # Never a memory without its session edge: retry both later.
            plan.results[node_id] = BackfillResult.of(
                session_failure.reason, node_id,
                f"parent session {sid!r} unresolved: {session_failure.error or ''}".rstrip(": "),
            )
            continue
        plan.nodes.append(memory_node(row.id, row.metadata, "backfilled"))
        if sid is not None:
            plan.edges.append(originates_in(row.id, sid))
        plan.results[node_id] = BackfillResult.of(Reason.BACKFILLED, node_id)
    return plan


async def _fetch_memories(
    vectors: VectorStore, settings: Settings, keys: list[str], plan: BackfillPlan
) -> list[ChromaRow]:
    """Fetch memory rows by id; record a failure reason for every id not found."""
    if not keys:
        return []
    try:
        rows = await vectors.get_by_ids(settings.memory_collection, keys)
    except (CollectionMissing, VectorStoreError) as exc:
        reason = (Reason.NO_COLLECTION if isinstance(exc, CollectionMissing)
                  else Reason.CHROMA_FETCH_FAILED)
        if isinstance(exc, VectorStoreError):
            plan.fetch_errors.append(exc)
        for key in keys:
            plan.results[memory_node_id(key)] = BackfillResult.of(
                reason, memory_node_id(key), str(exc))
        return []
    found = {row.id for row in rows}
    for key in keys:
        if key not in found:
            plan.results[memory_node_id(key)] = BackfillResult.of(
                Reason.CHROMA_ROW_NOT_FOUND, memory_node_id(key))
    return rows


async def _plan_sessions(
    vectors: VectorStore, settings: Settings, session_keys: list[str], plan: BackfillPlan
) -> BackfillResult | None:
    """Plan session nodes from their summary rows (earliest row wins; none: minimal node).

    Returns the failure that stopped every session from resolving, or None on success.
    """
    if not session_keys:
        return None
    try:
        rows = await vectors.get_where_in(settings.summary_collection, "sessionId", session_keys)
    except CollectionMissing as exc:
        return BackfillResult.of(Reason.NO_COLLECTION, None, str(exc))
    except VectorStoreError as exc:
        plan.fetch_errors.append(exc)
        return BackfillResult.of(Reason.CHROMA_FETCH_FAILED, None, str(exc))
    by_session: dict[str, list[tuple[str, Mapping[str, Any]]]] = defaultdict(list)
    for row in rows:
        sid = session_id_of(row.metadata)
        if sid is not None:
            by_session[sid].append((row.id, row.metadata))
    for sid in session_keys:
        node_id = session_node_id(sid)
        chosen = pick_summary_row(by_session.get(sid, ()))
        if chosen is None:
            plan.nodes.append(minimal_session_node(sid))
            plan.results[node_id] = BackfillResult.of(Reason.BACKFILLED_MINIMAL, node_id)
        else:
            plan.nodes.append(session_node(sid, chosen[0], chosen[1], "backfilled"))
            plan.results[node_id] = BackfillResult.of(Reason.BACKFILLED, node_id)
    return None


async def ingest_single_row(
    graph: GraphDB, vectors: VectorStore, settings: Settings, node_id: Any
) -> BackfillResult:
    """Make one `memory:` / `session:` node exist (with its parent session), never raising.

    Uppercase prefixes are accepted and normalized; an id that names no row (another prefix,
    an empty body, not a string) is `unrecognized-prefix` and never reaches Chroma.
    """
    parsed = parse_row_node_id(node_id)
    if parsed is None:
        return BackfillResult.of(Reason.UNRECOGNIZED_PREFIX, None)
    try:
        plan = await plan_backfill(graph, vectors, settings, [parsed.node_id])
        if plan.nodes:
            async with graph.write() as tx:
                await plan.apply(tx)
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
    """Link two nodes, first back-filling missing `memory:` / `session:` endpoints (the
    original's `linkNodesAsync`). False when an endpoint cannot be resolved; the edge is
    then culled exactly as `GraphDB.link_nodes` would."""
    source = normalize_graph_node_id(source)
    target = normalize_graph_node_id(target)
    present = await existing_ids(graph, [source, target])
    missing = [n for n in dict.fromkeys([source, target]) if n not in present]
    if missing:
        plan = await plan_backfill(graph, vectors, settings, missing, existing=present)
        if plan.nodes:
            async with graph.write() as tx:
                await plan.apply(tx)
        unresolved = [n for n in missing if not plan.resolved(n)]
        if unresolved:
            log.info("graph.endpoint_unresolved", source=source, target=target,
                     relationship=relationship,
                     reasons={n: str(plan.results[n].reason) for n in unresolved
                              if n in plan.results})
            return False
    return await link_nodes(graph, source, target, relationship, weight, properties)
