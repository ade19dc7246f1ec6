"""What a neo.mjs graph file holds, counted for `status`: its era, its `SchemaVersion`, the rows
of the original's `Nodes`, `Edges` and `GraphLog`, and its nodes by label (reads only)."""

from __future__ import annotations

from dataclasses import dataclass, field

from core.base.state.graph_db import GraphDB
from core.base.state.neo.connection import NeoGraph
from core.base.state.neo.statements import LABEL

#: How many labels `status` names (the most frequent; the rest are in `Nodes`' total).
LABELS_SHOWN = 12
_BY_LABEL = (f"SELECT {LABEL} AS label, COUNT(*) AS n FROM Nodes GROUP BY label "
             "ORDER BY n DESC, label LIMIT ?")


@dataclass(frozen=True, slots=True)
class OriginalTables:
    """A neo.mjs graph file as `status` shows it."""

    era: str
    schema_version: int | None
    nodes: int
    edges: int
    #: None when the file has no `GraphLog` (the 2026-04-04 schema).
    graph_log: int | None
    #: The most frequent labels, with their node counts (a row without one: "").
    nodes_by_label: dict[str, int] = field(default_factory=dict)


async def original_tables(graph: GraphDB) -> OriginalTables | None:
    """The counts of a neo.mjs graph; None for any other state store."""
    if not isinstance(graph, NeoGraph):
        return None
    layout = graph.layout
    nodes = int((await graph.query("SELECT COUNT(*) FROM Nodes"))[0][0])
    edges = int((await graph.query("SELECT COUNT(*) FROM Edges"))[0][0])
    log = (int((await graph.query("SELECT COUNT(*) FROM GraphLog"))[0][0])
           if layout.graph_log else None)
    labels = {str(label) if label is not None else "": int(n)
              for label, n in await graph.query(_BY_LABEL, (LABELS_SHOWN,))}
    return OriginalTables(str(layout.era), layout.schema_version, nodes, edges, log, labels)
