"""The graph on a neo.mjs graph file, read and written as the original's GraphService does
(`core.base.rules.neo_graph` holds the rules; this module their statements).

Every write runs in the caller's transaction (`BEGIN IMMEDIATE`: no other writer, the
original's processes included, can change a row between the read here and the write after
it), through the original's own tables, so its triggers log each row changed in `GraphLog`.
Nodes and edges of one call are read in one query, merged in code, and written with one
statement per kind of write (insert, update); a row the merge leaves as it was is not written
(its trigger would log a change that is none). Nothing here runs DDL.
"""

from __future__ import annotations

import uuid
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any

import orjson

from core.base.rules.graph_schema import NeoLayout
from core.base.rules.neo_graph import (
    AGENT_MEMORY_LABEL,
    NeoNodeWrite,
    Resolution,
    StoredNode,
    document_json,
    ids_to_read,
    js_truthy_user_id,
    memory_key,
    new_edge_document,
    new_node_document,
    project_node,
    projection_conflict,
    reinforced_edge_document,
    resolve_endpoint,
    updated_node_document,
)
from core.base.rules.nodes import MIN_WEIGHT, WEIGHT_LIMIT, EdgeLike, NodeRow
from core.base.state.graph_db import GraphDataError, Reader, Transaction
from core.base.state.neo.statements import (
    EDGES_BY_KEY,
    NODE_DOCUMENTS,
    STORED_NODES,
    UPDATE_EDGE,
    insert_edge,
    insert_node,
    update_node,
)

EdgeKey = tuple[str, str, str]


def _json_ids(ids: Iterable[str]) -> str:
    return orjson.dumps(list(ids)).decode()


def _document(data: Any) -> dict[str, Any] | None:
    """A stored document, or None when its `data` is not a JSON object (written by hand)."""
    try:
        value = orjson.loads(data)
    except (orjson.JSONDecodeError, TypeError):
        return None
    return value if isinstance(value, dict) else None


def _encoded(document: Mapping[str, Any]) -> str:
    """The document's JSON; GraphDataError for what JSON cannot hold (the line that carries
    it is isolated and dead-lettered by the drain, never retried for ever)."""
    try:
        return document_json(document)
    except (TypeError, ValueError) as exc:
        raise GraphDataError(f"cannot write {document.get('id')!r} as JSON: {exc}") from exc


class NeoGraphModel:
    """The original's graph (`core.base.state.graph_db.GraphModel`) on one open file, whose
    layout (`NeoLayout`: era, `user_id` columns) the connection keeps current."""

    keeps_every_key = True
    original_tenants = True

    def __init__(self, layout: NeoLayout) -> None:
        self.layout = layout

    # -------------------------------------------------------------------------------- reads

    async def _stored(self, reader: Reader, ids: Collection[str]) -> dict[str, StoredNode]:
        """The label and Chroma provenance of every node that says what `ids` resolve to."""
        wanted = {i for node_id in ids for i in ids_to_read(node_id, self.layout.era)}
        rows = await reader.query(STORED_NODES, (_json_ids(wanted),))
        return {str(r[0]): StoredNode(r[1], bool(r[2])) for r in rows}

    def _memory_ids(self, ids: Iterable[str]) -> list[str]:
        """The `memory:X` ids among `ids` whose node the era keeps elsewhere (E2/E3: under the
        bare id); every other id is its own node id."""
        if not self.layout.era.bare_memory_ids:
            return []
        return [i for i in ids if memory_key(i) is not None]

    async def resolve(self, reader: Reader, ids: Collection[str]) -> dict[str, Resolution]:
        """Where each of `ids` goes (`core.base.rules.neo_graph.resolve_endpoint`)."""
        stored = await self._stored(reader, ids)
        era = self.layout.era
        return {node_id: resolve_endpoint(node_id, era, stored) for node_id in ids}

    async def existing_ids(self, reader: Reader, ids: Collection[str]) -> set[str]:
        """Which of `ids` resolve to a node (a `memory:X` to its `AGENT_MEMORY X` in E2/E3)."""
        memory = self._memory_ids(ids)
        plain = set(ids).difference(memory)
        found = {str(r[0]) for r in await reader.query(reader.sql.existing_ids,
                                                        (_json_ids(plain),))} if plain else set()
        if memory:
            found.update(i for i, r in (await self.resolve(reader, memory)).items()
                         if r.node_id is not None)
        return found

    async def identity_conflicts(self, reader: Reader, ids: Collection[str]) -> dict[str, str]:
        """`memory:X` ids whose bare id `X` holds another kind of node (E2/E3)."""
        memory = self._memory_ids(ids)
        if not memory:
            return {}
        return {i: r.conflict for i, r in (await self.resolve(reader, memory)).items()
                if r.conflict is not None}

    async def nodes_by_id(self, reader: Reader, ids: Collection[str]) -> dict[str, NodeRow]:
        """The node each id's write lands on (a raw memory's bare-id node in E2/E3), by the
        id asked: its label and properties as stored."""
        era = self.layout.era
        slots = {node_id: ids_to_read(node_id, era)[-1] for node_id in ids}
        rows = await reader.query(NODE_DOCUMENTS, (_json_ids(set(slots.values())),))
        documents = {str(r[0]): _document(r[1]) for r in rows}
        found: dict[str, NodeRow] = {}
        for node_id, slot in slots.items():
            if slot not in documents:
                continue
            document = documents[slot] or {}
            label, properties = document.get("label"), document.get("properties")
            found[node_id] = NodeRow(slot, label if isinstance(label, str) else "",
                                     properties if isinstance(properties, dict) else {})
        return found

    def write_conflicts(self, nodes: Sequence[NodeRow],
                        existing: Mapping[str, NodeRow]) -> dict[str, str]:
        """Memory nodes whose canonical id (E2/E3: the bare id) holds a node of another
        label: the original refuses to write them (`canonical-label-conflict`)."""
        conflicts: dict[str, str] = {}
        for node in nodes:
            stored = existing.get(node.id)
            reason = projection_conflict(node, self.layout.era,
                                         stored.label if stored is not None else None)
            if reason is not None:
                conflicts[node.id] = reason
        return conflicts

    # ------------------------------------------------------------------------------- nodes

    def _node_params(self, write_id: str, document: Mapping[str, Any], *,
                     update: bool) -> tuple[Any, ...]:
        data = _encoded(document)
        if not self.layout.nodes_user_id:
            return (data, write_id) if update else (write_id, data)
        user = js_truthy_user_id(document.get("properties"))
        return (user, data, write_id) if update else (write_id, user, data)

    async def insert_nodes_if_absent(self, tx: Transaction, nodes: Iterable[NodeRow]) -> None:
        """Create each node its projection names unless a node has that id (the first of a
        batch wins, as one after another would)."""
        era, has_user_id = self.layout.era, self.layout.nodes_user_id
        rows = [self._node_params(w.id, new_node_document(w), update=False)
                for w in (project_node(n, era) for n in nodes)]
        if rows:
            await tx.executemany(insert_node(user_id=has_user_id), rows)

    async def upsert_nodes(self, tx: Transaction, nodes: Iterable[NodeRow]) -> None:
        """`upsertNode` for each node in order: created, or merged into what is stored (no key
        deleted); a memory projection whose id holds another kind of node is left alone."""
        writes = [project_node(n, self.layout.era) for n in nodes]
        if not writes:
            return
        rows = await tx.query(NODE_DOCUMENTS, (_json_ids({w.id for w in writes}),))
        stored = {str(r[0]): _document(r[1]) for r in rows}
        current: dict[str, dict[str, Any]] = {}
        for write in writes:
            document = current.get(write.id, stored.get(write.id))
            if write.id in stored and self._occupied(write, document):
                continue
            current[write.id] = (new_node_document(write) if document is None
                                 else updated_node_document(document, write))
        inserts = [self._node_params(i, d, update=False)
                   for i, d in current.items() if i not in stored]
        updates = [self._node_params(i, d, update=True)
                   for i, d in current.items() if i in stored and d != stored[i]]
        has_user_id = self.layout.nodes_user_id
        if inserts:
            await tx.executemany(insert_node(user_id=has_user_id), inserts)
        if updates:
            await tx.executemany(update_node(user_id=has_user_id), updates)

    async def rewrite_node_keys(self, tx: Transaction, node: NodeRow) -> None:
        """The node's document with each top-level key of `node.properties` set to exactly
        its value (what no `upsertNode` can do: its merge keeps every key, so a removal
        writes the whole object that held the key), its label and other keys as stored;
        written only when it changes (its trigger logs it), never created."""
        rows = await tx.query(NODE_DOCUMENTS, (_json_ids([node.id]),))
        document = _document(rows[0][1]) if rows else None
        if document is None:
            return
        old = document.get("properties")
        properties = {**(old if isinstance(old, Mapping) else {}), **node.properties}
        rewritten = {**document, "properties": properties}
        if rewritten != document:
            await tx.executemany(update_node(user_id=self.layout.nodes_user_id),
                                 [self._node_params(node.id, rewritten, update=True)])

    @staticmethod
    def _occupied(write: NeoNodeWrite, document: Mapping[str, Any] | None) -> bool:
        return (write.label == AGENT_MEMORY_LABEL and document is not None
                and document.get("label") != AGENT_MEMORY_LABEL)

    # ------------------------------------------------------------------------------- edges

    async def _endpoints(self, tx: Transaction, edges: Sequence[EdgeLike]) -> dict[str, str]:
        """Each endpoint's node id: its own, or for a raw memory of E2/E3 the node it resolves
        to now; GraphDataError for one that does not resolve (a node removed since the batch
        was planned: the batch is tried again and re-planned). Another endpoint that is gone
        fails the insert on the table's foreign key, with the same effect."""
        ids = {e.source for e in edges} | {e.target for e in edges}
        endpoints = {i: i for i in ids}
        memory = self._memory_ids(ids)
        if memory:
            resolved = await self.resolve(tx, memory)
            missing = sorted(i for i, r in resolved.items() if r.node_id is None)
            if missing:
                raise GraphDataError(f"edge endpoints not in the graph: {missing[:5]}")
            endpoints.update((i, str(r.node_id)) for i, r in resolved.items())
        return endpoints

    async def _edges(self, tx: Transaction, keys: Collection[EdgeKey]
                     ) -> dict[EdgeKey, tuple[str, dict[str, Any]]]:
        """The first row (lowest rowid) of each key: its id and document."""
        rows = await tx.query(EDGES_BY_KEY, (orjson.dumps([list(k) for k in keys]).decode(),))
        found: dict[EdgeKey, tuple[str, dict[str, Any]]] = {}
        for _rowid, edge_id, source, target, kind, data in rows:
            key = (str(source), str(target), str(kind))
            if key in found:
                continue
            document = _document(data)
            if document is None:
                raise GraphDataError(f"edge {edge_id!r}: its data is not a JSON object")
            found[key] = (str(edge_id), document)
        return found

    async def link_edges(self, tx: Transaction, edges: Iterable[EdgeLike]) -> None:
        """`linkNodes` for each edge in order: reinforced when its key has a row (two links of
        one edge in a batch reinforce twice), else created with a fresh id."""
        await self._write_edges(tx, list(edges), reinforce=True)

    async def insert_edges_if_absent(self, tx: Transaction, edges: Iterable[EdgeLike]) -> None:
        """Create each edge whose key has no row; an existing one is left as it is."""
        await self._write_edges(tx, list(edges), reinforce=False)

    async def _write_edges(self, tx: Transaction, edges: Sequence[EdgeLike], *,
                           reinforce: bool) -> None:
        if not edges:
            return
        ids = await self._endpoints(tx, edges)
        keys = {(ids[e.source], ids[e.target], e.relationship) for e in edges}
        stored = await self._edges(tx, keys)
        current = {key: document for key, (_, document) in stored.items()}
        created: dict[EdgeKey, str] = {}
        for edge in edges:
            key = (ids[edge.source], ids[edge.target], edge.relationship)
            weight = max(min(edge.weight, WEIGHT_LIMIT), MIN_WEIGHT)
            if key not in current:
                created[key] = str(uuid.uuid4())
                current[key] = new_edge_document(created[key], *key, weight, edge.properties)
            elif reinforce:
                current[key] = reinforced_edge_document(current[key], weight, edge.properties)
        await self._store_edges(tx, current, stored, created)

    async def _store_edges(self, tx: Transaction, current: Mapping[EdgeKey, dict[str, Any]],
                           stored: Mapping[EdgeKey, tuple[str, dict[str, Any]]],
                           created: Mapping[EdgeKey, str]) -> None:
        """One INSERT per new edge, one UPDATE per changed one; an unchanged one is left."""
        has_user_id = self.layout.edges_user_id
        inserts = []
        for key, edge_id in created.items():
            document = current[key]
            data = _encoded(document)
            user = (js_truthy_user_id(document.get("properties")),) if has_user_id else ()
            inserts.append((edge_id, *user, *key, data))
        updates = [(_encoded(current[key]), edge_id) for key, (edge_id, document)
                   in stored.items() if current[key] != document]
        if inserts:
            await tx.executemany(insert_edge(user_id=has_user_id), inserts)
        if updates:
            await tx.executemany(UPDATE_EDGE, updates)

