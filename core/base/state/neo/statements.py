"""Every SQL statement of the state on a neo.mjs graph file (see `core.base.state.statements`).

The daemons' own state, the telemetry and the alerts are this project's SQLite statements with
the own tables renamed (`core.base.state.neo.schema.own_names`): one text of each, in
`core.base.state.sqlite.statements`. The graph's reads go through the original's `Nodes` documents
(`data` = `{id, label, properties}`); its writes are `core.base.state.neo.model`'s, whose texts
are below (the row statements of `Statements` are never run on this backend: the model does
the original's merges in code).
"""

from __future__ import annotations

import dataclasses

from core.base.rules.neo_graph import AGENT_MEMORY_LABEL
from core.base.rules.nodes import MEMORY_LABEL, SESSION_LABEL
from core.base.state.neo.schema import OWN_PREFIX, own_names
from core.base.state.sqlite.statements import SQLITE
from core.base.state.statements import Statements

#: A document's label and properties, read defensively: a row whose `data` is not JSON (written
#: by hand) reads as no label and null properties instead of failing the whole query.
LABEL = "CASE WHEN json_valid(data) THEN json_extract(data, '$.label') END"
PROPERTIES = "CASE WHEN json_valid(data) THEN json_quote(json_extract(data, '$.properties')) END"
_CHROMA_ID = ("CASE WHEN json_valid(data) THEN json_extract(data, '$.properties.chromaId') "
              "IS NOT NULL END")
_IDS = "SELECT value FROM json_each(?)"
#: Written instead of the row-write statements: running one is a bug, and fails at once.
_MODEL_WRITES = "-- neo.mjs graph writes go through core.base.state.neo.model\nFAIL"

# --------------------------------------------------------------------------- the model's SQL

#: (ids as JSON array) -> id, label, has a chromaId
STORED_NODES = f"SELECT id, {LABEL}, {_CHROMA_ID} FROM Nodes WHERE id IN ({_IDS})"
#: (ids as JSON array) -> id, data, user_id
NODE_DOCUMENTS = f"SELECT id, data FROM Nodes WHERE id IN ({_IDS})"
#: (keys as a JSON array of [source, target, type]) -> rowid, id, source, target, type, data;
#: the lowest rowid first (the row the original's `get()` would find). A row-value IN: one
#: scan of `Edges` on a file without `idx_edges_source` (E1), an index search per key on one
#: with it (E2+), never a scan per key.
EDGES_BY_KEY = (
    "SELECT rowid, id, source, target, type, data FROM Edges "
    "WHERE (source, target, type) IN (SELECT json_extract(value, '$[0]'), "
    "json_extract(value, '$[1]'), json_extract(value, '$[2]') FROM json_each(?)) "
    "ORDER BY rowid")


def insert_node(*, user_id: bool) -> str:
    """(id, [user_id,] data): create a node unless one has its id (no UPDATE, so no trigger
    fires for a node that is already there)."""
    if user_id:
        return ("INSERT INTO Nodes (id, user_id, data) VALUES (?, ?, ?) "
                "ON CONFLICT(id) DO NOTHING")
    return "INSERT INTO Nodes (id, data) VALUES (?, ?) ON CONFLICT(id) DO NOTHING"


def update_node(*, user_id: bool) -> str:
    """([user_id,] data, id): the node's new document (and its `user_id`, as the original's
    `addNodes` sets it from the document on every write)."""
    if user_id:
        return "UPDATE Nodes SET user_id = ?, data = ? WHERE id = ?"
    return "UPDATE Nodes SET data = ? WHERE id = ?"


def insert_edge(*, user_id: bool) -> str:
    """(id, [user_id,] source, target, type, data): a new edge row."""
    if user_id:
        return ("INSERT INTO Edges (id, user_id, source, target, type, data) "
                "VALUES (?, ?, ?, ?, ?, ?)")
    return "INSERT INTO Edges (id, source, target, type, data) VALUES (?, ?, ?, ?, ?)"


#: (data, id): a reinforced edge (its `user_id` left alone, as the original's `linkNodes`).
UPDATE_EDGE = "UPDATE Edges SET data = ? WHERE id = ?"

# ------------------------------------------------------------------------------- statements

_PROVENANCE = f"""
SELECT label, COUNT(*),
       SUM(json_extract(data, '$.properties.backfilled') = 1),
       SUM(json_extract(data, '$.properties.liveIngested') = 1),
       SUM(json_extract(data, '$.properties.minimal') = 1)
FROM (SELECT {LABEL} AS label, data FROM Nodes WHERE json_valid(data))
WHERE label IN ('{MEMORY_LABEL}', '{SESSION_LABEL}', '{AGENT_MEMORY_LABEL}') GROUP BY label
"""


def _renamed(statements: Statements) -> dict[str, str]:
    """Every statement of `statements` with the own tables renamed."""
    return {f.name: own_names(getattr(statements, f.name))
            for f in dataclasses.fields(statements)}


NEO = dataclasses.replace(dataclasses.replace(SQLITE, **_renamed(SQLITE)),
    insert_node_if_absent=_MODEL_WRITES,
    upsert_node=_MODEL_WRITES,
    insert_edge_if_absent=_MODEL_WRITES,
    link_edge=_MODEL_WRITES,
    existing_ids=f"SELECT id FROM Nodes WHERE id IN ({_IDS})",
    nodes_by_id=f"SELECT id, {LABEL}, {PROPERTIES} FROM Nodes WHERE id IN ({_IDS})",
    provenance_counts=_PROVENANCE,
    count_nodes="SELECT COUNT(*) FROM Nodes",
    count_edges="SELECT COUNT(*) FROM Edges",
    node_by_id_and_label=f"SELECT id, {PROPERTIES} FROM Nodes WHERE id = ? AND {LABEL} = ?",
    node_properties=f"SELECT {PROPERTIES} FROM Nodes WHERE id = ?",
    nodes_by_label_and_prefix=(f"SELECT id, {PROPERTIES} FROM Nodes "
                               f"WHERE substr(id, 1, ?2) = ?3 AND {LABEL} = ?1 ORDER BY id"),
    node_page=(f"SELECT id, {LABEL}, {PROPERTIES}, data FROM Nodes "
               "WHERE ?1 IS NULL OR id > ?1 ORDER BY id LIMIT ?2"),
    # The original's edges are unique by id only: (source, target, id) is a unique key.
    edge_page=("SELECT source, target, id, type, data FROM Edges "
               "WHERE ?1 IS NULL OR (source, target, id) > (?1, ?2, ?3) "
               "ORDER BY source, target, id LIMIT ?4"),
    table_exists=("SELECT 1 FROM sqlite_master WHERE type = 'table' "
                  f"AND name = '{OWN_PREFIX}' || ?"),
)
