"""The back-fill's plan (pure): given which ids exist and the rows Chroma returned, which
nodes and edges to write and what each requested id's outcome is.

One plan serves every entry point (`core.drain.lazy_backfill`): the job hands each answer of
the stores to the step here that uses it. The outcome per requested id has the shape
`{success, reason, graphNodeId, error}`.

Never a memory without its session: when the parent session cannot be resolved because
Chroma failed, the memory is not planned either (`chroma-fetch-failed`) and is retried later.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any

from core.base.rules.ids import (
    MEMORY_PREFIX,
    memory_node_id,
    normalize_graph_node_id,
    parse_row_node_id,
    session_node_id,
)
from core.base.rules.nodes import (
    EdgeRow,
    NodeRow,
    memory_node,
    minimal_session_node,
    originates_in,
    pick_summary_row,
    session_id_of,
    session_node,
    summaries_by_session,
)
from core.base.rules.rows import ChromaRow


class Reason(StrEnum):
    """Why a back-fill succeeded or failed (the reasons dead letters and results name)."""

    UNRECOGNIZED_PREFIX = "unrecognized-prefix"
    ALREADY_EXISTS = "already-exists"
    BACKFILLED = "backfilled"
    BACKFILLED_MINIMAL = "backfilled-minimal"
    NO_COLLECTION = "no-collection"
    CHROMA_FETCH_FAILED = "chroma-fetch-failed"
    CHROMA_ROW_NOT_FOUND = "chroma-row-not-found"
    #: A neo.mjs graph (E2/E3) whose canonical raw-memory id `X` holds a node of another
    #: label: the original writes nothing for `memory:X` then, and neither do the daemons.
    CANONICAL_LABEL_CONFLICT = "canonical-label-conflict"
    ERROR = "error"


_SUCCESS = {Reason.ALREADY_EXISTS, Reason.BACKFILLED, Reason.BACKFILLED_MINIMAL}


@dataclass(frozen=True, slots=True)
class BackfillResult:
    """The outcome for one requested node id (JSON: `{success, reason, graphNodeId, error}`)."""

    success: bool
    reason: Reason
    graph_node_id: str | None = None
    error: str | None = None

    @classmethod
    def of(cls, reason: Reason, node_id: str | None, error: str | None = None) -> BackfillResult:
        """A result whose success follows from its reason."""
        return cls(reason in _SUCCESS, reason, node_id, error)


@dataclass(slots=True)
class BackfillPlan:
    """What to write so the requested nodes exist, and the outcome per requested id."""

    results: dict[str, BackfillResult] = field(default_factory=dict)
    nodes: list[NodeRow] = field(default_factory=list)
    edges: list[EdgeRow] = field(default_factory=list)
    #: The store failures behind `chroma-fetch-failed` results, as raised (a caller that must
    #: tell an outage from a request refused for its data looks at their causes).
    fetch_errors: list[Exception] = field(default_factory=list)

    def resolved(self, node_id: str) -> bool:
        """Whether `node_id` exists, or will once the plan is written."""
        result = self.results.get(node_id)
        return result is not None and result.success


@dataclass(slots=True)
class Request:
    """The ids a back-fill was asked about, sorted out before any store is read."""

    plan: BackfillPlan
    #: Row-backed ids to resolve: canonical id -> (kind, key).
    row_ids: dict[str, tuple[str, str]]


def unrecognized(raw: Any) -> BackfillResult:
    """The result for an id that names no Chroma row: `unrecognized-prefix`, echoing the id
    (normalized) as the original does, or None when it is not a string."""
    shown = normalize_graph_node_id(raw) if isinstance(raw, str) else None
    return BackfillResult.of(Reason.UNRECOGNIZED_PREFIX, shown)


#: A queue line's reason when an endpoint is not in the graph and no back-fill can create it
#: (a `CONCEPT:`, `AGENT:` or unprefixed id: only `memory:` and `session:` ids name Chroma
#: rows). The line waits for a producer to create that node.
NOT_IN_GRAPH = "not-in-graph"


def line_reason(result: BackfillResult) -> str:
    """The reason a drained line records for an endpoint that did not resolve: the result's,
    except that `unrecognized-prefix` (what `ingest_single_row` answers, as the original
    does) says what is wrong with the line instead: `not-in-graph`."""
    if result.reason is Reason.UNRECOGNIZED_PREFIX:
        return NOT_IN_GRAPH
    return str(result.reason)


def sort_request(node_ids: Iterable[Any]) -> Request:
    """Canonicalize the requested ids; an id that names no row (another prefix, an empty
    body, not a string) is `unrecognized-prefix` at once and never reaches a store."""
    plan = BackfillPlan()
    row_ids: dict[str, tuple[str, str]] = {}
    memory_prefix = len(MEMORY_PREFIX)
    for raw in node_ids:
        # A canonical `memory:<key>` id (nearly every id a drain asks about) is split here,
        # without `parse_row_node_id`'s object: it costs as much as the rest of the request.
        if type(raw) is str and raw.startswith(MEMORY_PREFIX) and len(raw) > memory_prefix:
            row_ids[raw] = ("memory", raw[memory_prefix:])
            continue
        parsed = parse_row_node_id(raw)
        if parsed is None:
            plan.results[str(normalize_graph_node_id(raw))] = unrecognized(raw)
        else:
            row_ids[parsed.node_id] = (parsed.kind, parsed.key)
    return Request(plan, row_ids)


def missing_keys(request: Request, present: Collection[str],
                 conflicts: Mapping[str, str] | None = None) -> tuple[list[str], list[str]]:
    """The memory and session keys to look up: those not in the graph, except the ids whose
    node id another node holds (`conflicts`: `canonical-label-conflict`, nothing written)."""
    memory_keys: list[str] = []
    session_keys: list[str] = []
    for node_id, (kind, key) in request.row_ids.items():
        if node_id in present:
            request.plan.results[node_id] = BackfillResult.of(Reason.ALREADY_EXISTS, node_id)
        elif conflicts and node_id in conflicts:
            request.plan.results[node_id] = BackfillResult.of(
                Reason.CANONICAL_LABEL_CONFLICT, node_id, conflicts[node_id])
        elif kind == "memory":
            memory_keys.append(key)
        else:
            session_keys.append(key)
    return memory_keys, session_keys


def memories_fetched(plan: BackfillPlan, keys: Sequence[str], rows: Sequence[ChromaRow]) -> None:
    """Record `chroma-row-not-found` for each requested memory the store does not have."""
    found = {row.id for row in rows}
    for key in keys:
        if key not in found:
            plan.results[memory_node_id(key)] = BackfillResult.of(
                Reason.CHROMA_ROW_NOT_FOUND, memory_node_id(key))


def memories_unreadable(plan: BackfillPlan, keys: Sequence[str], *, reason: Reason,
                        error: str) -> None:
    """Record the failure that stopped every requested memory from being read."""
    for key in keys:
        plan.results[memory_node_id(key)] = BackfillResult.of(reason, memory_node_id(key), error)


def parents_of(memory_rows: Iterable[ChromaRow], present: Collection[str]) -> list[str]:
    """The parent sessions of the memories found that are not known to be in the graph."""
    parents = {sid for row in memory_rows if (sid := session_id_of(row.metadata))}
    return [s for s in parents if session_node_id(s) not in present]


def sessions_needed(session_keys: Sequence[str], parents: Sequence[str],
                    present_parents: Collection[str]) -> list[str]:
    """The sessions to resolve: those requested, then the parents the graph lacks, once each."""
    return list(dict.fromkeys(
        list(session_keys) + [s for s in parents if session_node_id(s) not in present_parents]))


def plan_sessions(plan: BackfillPlan, session_keys: Sequence[str],
                  summary_rows: Iterable[ChromaRow]) -> None:
    """Plan session nodes from their summary rows: the earliest row represents the session;
    a session without one becomes a minimal node."""
    by_session = summaries_by_session(summary_rows)
    for sid in session_keys:
        node_id = session_node_id(sid)
        chosen = pick_summary_row(by_session.get(sid, ()))
        if chosen is None:
            plan.nodes.append(minimal_session_node(sid))
            plan.results[node_id] = BackfillResult.of(Reason.BACKFILLED_MINIMAL, node_id)
        else:
            plan.nodes.append(session_node(sid, chosen[0], chosen[1], "backfilled"))
            plan.results[node_id] = BackfillResult.of(Reason.BACKFILLED, node_id)


def plan_memories(plan: BackfillPlan, memory_rows: Iterable[ChromaRow], *,
                  session_keys: Sequence[str], needed: Collection[str],
                  session_failure: BackfillResult | None) -> None:
    """Plan the memories found with their ORIGINATES_IN edges; when the sessions could not be
    read, every memory whose parent was among them fails too (see the module docstring)."""
    for key in session_keys:
        node_id = session_node_id(key)
        if node_id not in plan.results and session_failure is not None:
            plan.results[node_id] = replace(session_failure, graph_node_id=node_id)
    # Only a failure makes `needed` matter (asked per row, it cost as much as the planning).
    unresolved_parents = frozenset(needed) if session_failure is not None else frozenset()
    for row in memory_rows:
        node_id = memory_node_id(row.id)
        sid = session_id_of(row.metadata)
        if session_failure is not None and sid is not None and sid in unresolved_parents:
            plan.results[node_id] = BackfillResult.of(
                session_failure.reason, node_id,
                f"parent session {sid!r} unresolved: {session_failure.error or ''}".rstrip(": "),
            )
            continue
        plan.nodes.append(memory_node(row.id, row.metadata, "backfilled"))
        if sid is not None:
            plan.edges.append(originates_in(row.id, sid))
        plan.results[node_id] = BackfillResult.of(Reason.BACKFILLED, node_id)
