"""The graph's statements: nodes and edges (CONTRACT tables), written in batches.

On a backend with a graph model (the original's `Nodes`/`Edges` on a neo.mjs graph file:
`core.base.state.neo.model`) every read and write below goes to the model instead, with the same
ids in and out; the callers never know which graph they write.

Existence is always asked of the store: no in-process cache that another writer could make stale.
Writes take a `Transaction` (the caller's `GraphDB.write()`), so a job decides which writes land
together. Property objects are stored as JSON that is always valid: orjson refuses what JSON
cannot hold (a lone surrogate, an integer past 64 bits, a non-string key) with an error instead
of writing it.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Collection, Iterable, Mapping, Sequence
from operator import itemgetter
from typing import Any

import orjson
import structlog

from core.base.rules.ids import normalize_graph_node_id
from core.base.rules.nodes import MAX_WEIGHT as MAX_WEIGHT
from core.base.rules.nodes import MIN_WEIGHT as MIN_WEIGHT
from core.base.rules.nodes import REINFORCE_FACTOR as REINFORCE_FACTOR
from core.base.rules.nodes import EdgeLike, EdgeRow, NodeRow
from core.base.rules.state.write_rounds import distinct_key_rounds
from core.base.state.graph_db import GraphDB, Reader, Transaction

log = structlog.get_logger(__name__)


def properties_json(value: Mapping[str, Any] | None) -> str:
    """Compact JSON of a property object, always valid JSON (see the module docstring); a
    non-finite float is written as null (lines with one are malformed anyway)."""
    if not value:  # None or empty (every structural edge): no encoder call
        return "{}"
    return orjson.dumps(value if type(value) is dict else dict(value)).decode()


def _ids_json(ids: Collection[str]) -> str:
    return orjson.dumps(list(ids)).decode()


# ------------------------------------------------------------------------------------ writes


async def _write_rows(tx: Transaction, row_sql: str, columns_sql: str,
                      rows: Sequence[tuple[Any, ...]], *, key_width: int) -> None:
    """Run `row_sql` for each row in order, or, where the backend has a set-based form
    (`columns_sql`), that form once per round of distinct keys (the first `key_width`
    columns): the same outcome (`core.base.rules.state.write_rounds`) in a few statements."""
    if not columns_sql:
        await tx.executemany(row_sql, rows)
        return
    key = itemgetter(*range(key_width))
    for round_rows in distinct_key_rounds(rows, key):
        await tx.execute(columns_sql, [list(column) for column in zip(*round_rows, strict=True)])


async def insert_nodes_if_absent(tx: Transaction, nodes: Iterable[NodeRow]) -> None:
    """Create nodes that do not exist; an existing node (say, live-ingested meanwhile) wins."""
    if tx.model is not None:
        await tx.model.insert_nodes_if_absent(tx, nodes)
        return
    await _write_rows(tx, tx.sql.insert_node_if_absent, tx.sql.insert_nodes_columns,
                      [(n.id, n.label, properties_json(n.properties)) for n in nodes],
                      key_width=1)


async def upsert_nodes(
    tx: Transaction, nodes: Iterable[NodeRow], *, drop_keys: Sequence[str] = ()
) -> None:
    """Create or merge nodes: new properties overwrite, others are kept, `drop_keys` go
    (except on a graph that keeps every key: `keeps_every_key`)."""
    if tx.model is not None:
        await tx.model.upsert_nodes(tx, nodes)
        return
    removal = properties_json(dict.fromkeys(drop_keys))
    await tx.executemany(
        tx.sql.upsert_node, [(n.id, n.label, properties_json(n.properties), removal) for n in nodes]
    )


async def rewrite_node_keys(tx: Transaction, node: NodeRow) -> None:
    """Set each top-level key of `node.properties` on the existing node to exactly that value
    (an object replaced whole, so a key inside it can go, which an upsert's merge never
    does); the other keys are kept, and a missing node is not created."""
    if tx.model is not None:
        await tx.model.rewrite_node_keys(tx, node)
        return
    if not node.properties or not await tx.query(tx.sql.node_properties, (node.id,)):
        return
    await upsert_nodes(tx, [NodeRow(node.id, node.label, {})], drop_keys=tuple(node.properties))
    await upsert_nodes(tx, [node])


async def insert_edges_if_absent(tx: Transaction, edges: Iterable[EdgeLike]) -> None:
    """Create structural edges (ORIGINATES_IN) without reinforcing existing ones."""
    if tx.model is not None:
        await tx.model.insert_edges_if_absent(tx, edges)
        return
    await _write_rows(
        tx, tx.sql.insert_edge_if_absent, tx.sql.insert_edges_columns,
        [(e.source, e.target, e.relationship, e.weight, properties_json(e.properties))
         for e in edges],
        key_width=3,
    )


async def link_edges(tx: Transaction, edges: Iterable[EdgeLike]) -> None:
    """Create edges, or reinforce each existing one by REINFORCE_FACTOR x the new weight
    (within MIN_WEIGHT..MAX_WEIGHT) and merge its properties; two links of one edge in a
    batch reinforce twice, in their order.

    The rows are written grouped by source (a stable sort, so the graph is the same as in
    the given order), which walks the edge index instead of landing all over it."""
    if tx.model is not None:
        await tx.model.link_edges(tx, edges)
        return
    dumps = orjson.dumps  # once per batch of thousands of rows, not once per row
    rows = [(e.source, e.target, e.relationship, e.weight,
             dumps(e.properties).decode() if type(e.properties) is dict and e.properties
             else properties_json(e.properties))
            for e in edges]
    rows.sort(key=itemgetter(0))
    await _write_rows(tx, tx.sql.link_edge, tx.sql.link_edges_columns, rows, key_width=3)


async def upsert_node(
    graph: GraphDB, node_id: str, label: str, properties: Mapping[str, Any] | None = None
) -> None:
    """Create a node or merge `properties` into it (canonical id), in a transaction of its own."""
    async with graph.write() as tx:
        await upsert_nodes(
            tx, [NodeRow(normalize_graph_node_id(node_id), label, dict(properties or {}))]
        )


async def link_nodes(
    graph: GraphDB,
    source: str,
    target: str,
    relationship: str,
    weight: float = 1.0,
    properties: Mapping[str, Any] | None = None,
) -> bool:
    """Link two existing nodes (or reinforce the edge) in one transaction with the existence
    check; False, logged, when an endpoint is missing. Never back-fills."""
    source = normalize_graph_node_id(source)
    target = normalize_graph_node_id(target)
    async with graph.write() as tx:
        found = await existing_ids(tx, [source, target])
        missing = sorted({source, target} - found)
        if missing:
            log.info("graph.edge_culled", source=source, target=target,
                     relationship=relationship, missing=missing)
            return False
        await link_edges(tx, [EdgeRow(source, target, relationship, weight, properties)])
    return True


# ------------------------------------------------------------------------------------- reads


async def existing_ids(reader: Reader, ids: Collection[str]) -> set[str]:
    """Which of `ids` are nodes, in one query whatever their number."""
    if not ids:
        return set()
    if reader.model is not None:
        return await reader.model.existing_ids(reader, ids)
    return {row[0] for row in await reader.query(reader.sql.existing_ids, (_ids_json(ids),))}


async def nodes_by_id(reader: Reader, ids: Collection[str]) -> dict[str, NodeRow]:
    """Several nodes by id, in one query (on a graph model: the node a write of each id
    lands on, by the id asked)."""
    if not ids:
        return {}
    if reader.model is not None:
        return await reader.model.nodes_by_id(reader, ids)
    rows = await reader.query(reader.sql.nodes_by_id, (json.dumps(list(ids)),))
    return {r[0]: NodeRow(r[0], r[1], json.loads(r[2])) for r in rows}


async def identity_conflicts(reader: Reader, ids: Collection[str]) -> dict[str, str]:
    """The ids of `ids` that can never resolve as they are, with the reason (a neo.mjs graph:
    a `memory:X` whose bare id `X` another kind of node holds); none on this project's graph."""
    if not ids or reader.model is None:
        return {}
    return await reader.model.identity_conflicts(reader, ids)


def write_conflicts(reader: Reader, nodes: Sequence[NodeRow],
                    existing: Mapping[str, NodeRow]) -> dict[str, str]:
    """The nodes of `nodes` that must not be written over what `existing` (`nodes_by_id`)
    found, with the reason; none on this project's graph."""
    if reader.model is None:
        return {}
    return reader.model.write_conflicts(nodes, existing)


def keeps_every_key(reader: Reader) -> bool:
    """Whether an upsert keeps every key a node has (the original's merge never deletes one),
    so that `drop_keys` stay."""
    return reader.model is not None and reader.model.keeps_every_key


async def count_nodes_and_edges(reader: Reader, tables: Collection[str]) -> tuple[int, int]:
    """How many nodes and edges there are (0 for a table the file does not have yet)."""
    nodes = int((await reader.query(reader.sql.count_nodes))[0][0]) \
        if "nodes" in tables else 0
    edges = int((await reader.query(reader.sql.count_edges))[0][0]) \
        if "edges" in tables else 0
    return nodes, edges


#: Rows per page of `node_pages` / `edge_pages`: what one read holds in memory at a time.
PAGE_ROWS = 1000


async def node_pages(reader: Reader, *, page_rows: int = PAGE_ROWS
                     ) -> AsyncIterator[list[tuple[Any, ...]]]:
    """Every node as stored, a page at a time in id order (`Statements.node_page`'s columns):
    a graph of any size is read in bounded memory, and the same graph in the same order."""
    after: str | None = None
    while True:
        page = [tuple(row) for row in await reader.query(reader.sql.node_page,
                                                         (after, page_rows))]
        if page:
            yield page
        if len(page) < page_rows:
            return
        after = str(page[-1][0])


async def edge_pages(reader: Reader, *, page_rows: int = PAGE_ROWS
                     ) -> AsyncIterator[list[tuple[Any, ...]]]:
    """Every edge as stored, a page at a time in the order of its unique key
    (`Statements.edge_page`'s columns), in bounded memory as `node_pages`."""
    after: tuple[str | None, str | None, str | None] = (None, None, None)
    while True:
        page = [tuple(row) for row in await reader.query(reader.sql.edge_page,
                                                         (*after, page_rows))]
        if page:
            yield page
        if len(page) < page_rows:
            return
        after = (str(page[-1][0]), str(page[-1][1]), str(page[-1][2]))


async def provenance_counts(reader: Reader) -> dict[str, tuple[int, int, int, int]]:
    """MEMORY and SESSION nodes by label: (total, back-filled, live-ingested, minimal)."""
    return {str(label): (int(total), int(backfilled or 0), int(live or 0), int(minimal or 0))
            for label, total, backfilled, live, minimal
            in await reader.query(reader.sql.provenance_counts)}


def original_tenants(reader: Reader) -> bool:
    """Whether the tenant nodes are read and written in the original's shape (a neo.mjs
    graph: `core.base.rules.tenants`, `core.reconcile.rules.manifests`)."""
    return reader.model is not None and reader.model.original_tenants
