"""The graph as `status` shows it: whether the store exists, its schema, its nodes and edges,
MEMORY / SESSION nodes by provenance marker and, on a neo.mjs graph, the original's own tables
(reads only)."""

from __future__ import annotations

from dataclasses import dataclass, field

from core.base.rules.camel_json import omitted_when_none
from core.base.rules.graph_schema import SCHEMA_KB, SCHEMA_NEO
from core.base.rules.neo_graph import AGENT_MEMORY_LABEL
from core.base.rules.nodes import MEMORY_LABEL, SESSION_LABEL
from core.base.state.graph import count_nodes_and_edges, provenance_counts
from core.base.state.graph_db import GraphDB
from core.base.state.neo.tables import OriginalTables, original_tables


@dataclass(frozen=True, slots=True)
class Provenance:
    """MEMORY or SESSION nodes by provenance marker."""

    total: int = 0
    backfilled: int = 0
    live_ingested: int = 0
    minimal: int = 0


@dataclass(frozen=True, slots=True)
class GraphStatus:
    """The state store: whether it exists, its schema (`kb`, or `neo`: the original's, its
    tables counted in `neo`, `memories` counting MEMORY and AGENT_MEMORY nodes), its size in
    nodes and edges, and provenance. `path` is where the state is: the SQLite file, or the
    `stateUrl` (it holds no password)."""

    path: str
    present: bool
    nodes: int = 0
    edges: int = 0
    memories: Provenance = Provenance()
    sessions: Provenance = Provenance()
    schema: str = SCHEMA_KB
    neo: OriginalTables | None = field(default=None, metadata=omitted_when_none())



async def graph_status(graph: GraphDB, tables: set[str], *, path: str) -> GraphStatus:
    """Nodes, edges, MEMORY / SESSION nodes by provenance marker, a neo.mjs graph's tables."""
    nodes, edges = await count_nodes_and_edges(graph, tables)
    by_label = await provenance_counts(graph) if "nodes" in tables else {}
    neo = await original_tables(graph)
    memories = [sum(c) for c in zip(*(by_label.get(k, (0, 0, 0, 0))
                                      for k in (MEMORY_LABEL, AGENT_MEMORY_LABEL)), strict=True)]
    return GraphStatus(path, True, nodes, edges, Provenance(*memories),
                       Provenance(*by_label.get(SESSION_LABEL, (0, 0, 0, 0))),
                       SCHEMA_NEO if neo is not None else SCHEMA_KB, neo)
