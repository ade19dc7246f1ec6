"""The graph store: nodes and edges in SQLite (aiosqlite), plus the daemons' own tables.

Every write happens in a short `BEGIN IMMEDIATE` transaction (`GraphDB.write()`), so a writer
learns about a competing writer at the start, within `busy_timeout`, rather than half-way
through. WAL lets `status` and other readers run beside a daemon's writes. Existence is always
asked of SQLite: no in-process cache that another writer could make stale (the original's
cache-only checks culled edges whose nodes existed and linked edges whose nodes did not).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import AsyncIterator, Collection, Iterable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiosqlite
import orjson
import structlog

from core.rules.errors import KbError, StoreUnavailable
from core.rules.ids import normalize_graph_node_id
from core.rules.nodes import EdgeRow, NodeRow
from core.stores.schema import ALL_DDL

log = structlog.get_logger(__name__)

#: How long a write waits for another writer before the tick gives up (ms). Long enough to ride
#: out a neighbour's batch commit (tens of ms), short enough that a stuck writer fails the tick
#: instead of hanging it.
BUSY_TIMEOUT_MS = 5_000
#: Linking an existing edge again adds this fraction of the new weight (the original's rule).
REINFORCE_FACTOR = 0.1
#: Reinforcement never takes a weight above this (the original's cap).
MAX_WEIGHT = 5.0

_INSERT_NODE_IF_ABSENT = "INSERT OR IGNORE INTO nodes(id, label, properties) VALUES (?, ?, ?)"
# A stored `properties` that is not valid JSON (written by an earlier version: `Infinity`) would
# make json_patch fail on every later write to the row; it is replaced instead of merged.
_UPSERT_NODE = """
INSERT INTO nodes(id, label, properties) VALUES (?, ?, ?)
ON CONFLICT(id) DO UPDATE SET
    label = excluded.label,
    properties = json_patch(json_patch(CASE WHEN json_valid(nodes.properties)
                                            THEN nodes.properties ELSE '{}' END,
                                       excluded.properties), ?)
"""
_INSERT_EDGE_IF_ABSENT = """
INSERT OR IGNORE INTO edges(source, target, relationship, weight, properties)
VALUES (?, ?, ?, ?, ?)
"""
# A zero (or NULL) stored weight counts as 1.0 before reinforcing, as in the original.
_LINK_EDGE = f"""
INSERT INTO edges(source, target, relationship, weight, properties) VALUES (?, ?, ?, ?, ?)
ON CONFLICT(source, target, relationship) DO UPDATE SET
    weight = MIN(COALESCE(NULLIF(edges.weight, 0), 1.0) + excluded.weight * {REINFORCE_FACTOR},
                 {MAX_WEIGHT}),
    properties = CASE WHEN json_valid(edges.properties)
                      THEN json_patch(edges.properties, excluded.properties)
                      ELSE excluded.properties END
"""


#: SQLite primary result codes that say the database cannot be used right now (permission,
#: abort, busy, locked, out of memory, read-only, interrupted, I/O error, corrupt, full, cannot
#: open, protocol, schema changed, auth, not a database): an outage, retried on a later tick.
#: Every other code (SQLITE_ERROR such as "malformed JSON", constraint, too big, mismatch...)
#: is a statement the data made fail.
_OUTAGE_CODES = frozenset({3, 4, 5, 6, 7, 8, 9, 10, 11, 13, 14, 15, 17, 23, 26})


class GraphDataError(KbError):
    """A statement failed because of the data it carried, not because SQLite is unavailable:
    retrying the same data fails the same way (the drainer isolates the line that causes it)."""


def _json(value: Mapping[str, Any] | None) -> str:
    """Compact JSON of a property object, always valid JSON: orjson refuses what JSON cannot
    hold (a lone surrogate, an integer past 64 bits, a non-string key) with an error instead of
    writing it, and writes a non-finite float as null (lines with one are malformed anyway)."""
    return orjson.dumps(value if type(value) is dict else dict(value or {})).decode()


def _store_error(path: Path, action: str, exc: BaseException) -> KbError:
    """StoreUnavailable for an outage (see _OUTAGE_CODES; an error without a code counts as
    one, to be safe: an outage spends no line's attempts), GraphDataError otherwise."""
    code = getattr(exc, "sqlite_errorcode", None)
    if isinstance(code, int) and code & 0xFF not in _OUTAGE_CODES:
        return GraphDataError(f"SQLite {path}: {action} failed: {exc}")
    return StoreUnavailable(f"SQLite {path}: {action} failed: {exc}")


@dataclass(frozen=True, slots=True)
class StoredEdge:
    """An edge as read back from SQLite."""

    source: str
    target: str
    relationship: str
    weight: float
    properties: dict[str, Any]


class Transaction:
    """The write operations available inside `GraphDB.write()`; all batched (executemany)."""

    def __init__(self, conn: aiosqlite.Connection) -> None:
        self.conn = conn

    async def insert_nodes_if_absent(self, nodes: Iterable[NodeRow]) -> None:
        """Create nodes that do not exist; an existing node (say, live-ingested meanwhile) wins."""
        await self.conn.executemany(
            _INSERT_NODE_IF_ABSENT, [(n.id, n.label, _json(n.properties)) for n in nodes]
        )

    async def upsert_nodes(
        self, nodes: Iterable[NodeRow], *, drop_keys: Sequence[str] = ()
    ) -> None:
        """Create or merge nodes: new properties overwrite, others are kept, `drop_keys` go."""
        removal = _json(dict.fromkeys(drop_keys))
        await self.conn.executemany(
            _UPSERT_NODE, [(n.id, n.label, _json(n.properties), removal) for n in nodes]
        )

    async def insert_edges_if_absent(self, edges: Iterable[EdgeRow]) -> None:
        """Create structural edges (ORIGINATES_IN) without reinforcing existing ones."""
        await self.conn.executemany(
            _INSERT_EDGE_IF_ABSENT,
            [(e.source, e.target, e.relationship, e.weight, _json(e.properties)) for e in edges],
        )

    async def link_edges(self, edges: Iterable[EdgeRow]) -> None:
        """Create edges, or reinforce each existing one by REINFORCE_FACTOR x the new weight
        (capped at MAX_WEIGHT) and merge its properties. Rows apply in order, so two links of
        one edge in a batch reinforce twice, as two separate calls would."""
        await self.conn.executemany(
            _LINK_EDGE,
            [(e.source, e.target, e.relationship, e.weight, _json(e.properties)) for e in edges],
        )


class GraphDB:
    """One aiosqlite connection to the graph file, with the project's schema applied."""

    def __init__(self, conn: aiosqlite.Connection, path: Path, *, read_only: bool) -> None:
        self._conn = conn
        self.path = path
        self.read_only = read_only
        #: Committed write transactions, for tests and metrics that check batching.
        self.commits = 0

    @classmethod
    async def open(
        cls, path: Path, *, read_only: bool = False, busy_timeout_ms: int = BUSY_TIMEOUT_MS
    ) -> GraphDB:
        """Open (creating when writable) the SQLite file with WAL, busy_timeout and foreign keys.

        `read_only` is for dry runs: the file is opened `mode=ro` so not one byte of it can
        change; when it does not exist yet, an empty in-memory graph stands in for it.
        """
        timeout = busy_timeout_ms / 1000
        in_memory = read_only and not path.exists()
        try:
            if in_memory:
                conn = await aiosqlite.connect(":memory:", isolation_level=None)
            elif read_only:
                conn = await aiosqlite.connect(
                    f"{path.resolve().as_uri()}?mode=ro", uri=True, isolation_level=None,
                    timeout=timeout,
                )
            else:
                path.parent.mkdir(parents=True, exist_ok=True)
                conn = await aiosqlite.connect(str(path), isolation_level=None, timeout=timeout)
        except (sqlite3.Error, OSError) as exc:
            raise StoreUnavailable(f"SQLite {path}: open failed: {exc}") from exc
        try:
            if not read_only:
                await conn.execute("PRAGMA journal_mode=WAL")
                # FULL: a commit survives power loss, so deleting the queue file after it is safe.
                await conn.execute("PRAGMA synchronous=FULL")
            if not read_only or in_memory:
                await conn.executescript("".join(ALL_DDL))
            await conn.execute("PRAGMA foreign_keys=ON")
        except BaseException as exc:
            await conn.close()
            if isinstance(exc, sqlite3.Error):
                raise StoreUnavailable(f"SQLite {path}: open failed: {exc}") from exc
            raise
        return cls(conn, path, read_only=read_only)

    async def close(self) -> None:
        """Close the connection (idempotent)."""
        await self._conn.close()

    @asynccontextmanager
    async def write(self) -> AsyncIterator[Transaction]:
        """A `BEGIN IMMEDIATE` transaction, committed on success and rolled back on any error.

        Lock contention past busy_timeout and disk errors surface as StoreUnavailable: the
        caller's tick fails cleanly and nothing half-written remains. A statement the data made
        fail (malformed JSON, a constraint) surfaces as GraphDataError, also fully rolled back.
        """
        if self.read_only:
            raise RuntimeError("write on a read-only graph (dry run)")
        try:
            await self._conn.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            raise StoreUnavailable(f"SQLite {self.path}: begin write failed: {exc}") from exc
        try:
            yield Transaction(self._conn)
            await self._conn.execute("COMMIT")
            self.commits += 1
        except BaseException as exc:
            try:
                await self._conn.execute("ROLLBACK")
            except sqlite3.Error:
                log.warning("graph.rollback_failed", path=str(self.path), exc_info=True)
            if isinstance(exc, sqlite3.Error) and not isinstance(exc, sqlite3.IntegrityError):
                raise _store_error(self.path, "write", exc) from exc
            raise

    async def fetch_all(self, sql: str, params: Sequence[Any] = ()) -> list[sqlite3.Row]:
        """Run a read query and return every row."""
        try:
            async with self._conn.execute(sql, params) as cursor:
                return list(await cursor.fetchall())
        except sqlite3.Error as exc:
            raise _store_error(self.path, "read", exc) from exc

    async def existing_ids(self, ids: Collection[str]) -> set[str]:
        """Which of `ids` are nodes, in one query whatever their number."""
        if not ids:
            return set()
        rows = await self.fetch_all(
            "SELECT id FROM nodes WHERE id IN (SELECT value FROM json_each(?))",
            (orjson.dumps(list(ids)).decode(),),
        )
        return {row[0] for row in rows}

    async def node(self, node_id: str) -> NodeRow | None:
        """One node by id (canonicalized), or None."""
        rows = await self.fetch_all(
            "SELECT id, label, properties FROM nodes WHERE id = ?",
            (normalize_graph_node_id(node_id),),
        )
        return NodeRow(rows[0][0], rows[0][1], json.loads(rows[0][2])) if rows else None

    async def nodes_by_id(self, ids: Collection[str]) -> dict[str, NodeRow]:
        """Several nodes by id, in one query."""
        if not ids:
            return {}
        rows = await self.fetch_all(
            "SELECT id, label, properties FROM nodes "
            "WHERE id IN (SELECT value FROM json_each(?))",
            (json.dumps(list(ids)),),
        )
        return {r[0]: NodeRow(r[0], r[1], json.loads(r[2])) for r in rows}

    async def edge(self, source: str, target: str, relationship: str) -> StoredEdge | None:
        """One edge by its key (endpoints canonicalized), or None."""
        rows = await self.fetch_all(
            "SELECT source, target, relationship, weight, properties FROM edges "
            "WHERE source = ? AND target = ? AND relationship = ?",
            (normalize_graph_node_id(source), normalize_graph_node_id(target), relationship),
        )
        if not rows:
            return None
        r = rows[0]
        return StoredEdge(r[0], r[1], r[2], float(r[3]), json.loads(r[4]))

    async def count(self, table: str) -> int:
        """Rows in one of the project's tables (for status and tests)."""
        if table not in {"nodes", "edges", "drain_generations", "drain_requeued",
                         "kb_ingestion_metrics", "alerts_fired"}:
            raise ValueError(f"unknown table {table!r}")
        rows = await self.fetch_all(f"SELECT COUNT(*) FROM {table}")
        return int(rows[0][0])

    async def upsert_node(
        self, node_id: str, label: str, properties: Mapping[str, Any] | None = None
    ) -> None:
        """Create a node or merge `properties` into it (canonical id)."""
        async with self.write() as tx:
            await tx.upsert_nodes(
                [NodeRow(normalize_graph_node_id(node_id), label, dict(properties or {}))]
            )

    async def link_nodes(
        self,
        source: str,
        target: str,
        relationship: str,
        weight: float = 1.0,
        properties: Mapping[str, Any] | None = None,
    ) -> bool:
        """Link two existing nodes (or reinforce the edge); cull the edge when an endpoint is
        missing: log it and return False. Never back-fills (see `backfill.link_with_backfill`)."""
        source = normalize_graph_node_id(source)
        target = normalize_graph_node_id(target)
        async with self.write() as tx:
            async with tx.conn.execute(
                "SELECT id FROM nodes WHERE id IN (?, ?)", (source, target)
            ) as cursor:
                found = {row[0] for row in await cursor.fetchall()}
            missing = sorted({source, target} - found)
            if missing:
                log.info("graph.edge_culled", source=source, target=target,
                         relationship=relationship, missing=missing)
                return False
            await tx.link_edges([EdgeRow(source, target, relationship, weight, properties)])
        return True
