"""neo.mjs graph files for tests: built as each version of the original's boot builds them (its
DDL, quoted in `core.base.state.neo.schema`), filled with rows in the shapes its services write
(`research/neo-deployment.md` §2, §4, §6), and booted again the way each version boots (§1.3),
with the reads a test needs of the original's tables (documents, `GraphLog`, `sqlite_master`).

Everything here runs plain SQL through `sqlite3`, as the original's better-sqlite3 does; none
of it goes through the code under test.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable, Iterator, Sequence
from contextlib import closing, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core.base.rules.graph_schema import NeoEra
from core.base.state.neo.schema import (
    NEO_E1_DDL,
    NEO_GRAPH_DDL,
    NEO_V0_DDL,
    OWN_PREFIX,
    SCHEMA_VERSION_DDL,
)

#: Every era, oldest first.
ERAS: tuple[NeoEra, ...] = tuple(NeoEra)
#: The eras that keep a raw memory under its bare id.
BARE_ERAS = (NeoEra.E2, NeoEra.E3)


@contextmanager
def connected(path: Path) -> Iterator[sqlite3.Connection]:
    """A connection to `path` as the original opens it (WAL; E2+ foreign keys), autocommit."""
    with closing(sqlite3.connect(str(path), isolation_level=None, timeout=10)) as conn:
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA foreign_keys = ON")
        yield conn


@dataclass(frozen=True, slots=True)
class Node:
    """A node as the original's `upsertNode` stores it: `data = {id, label, properties}`,
    `user_id = properties.userId || null` (E2+)."""

    id: str
    label: str
    properties: dict[str, Any]

    @property
    def data(self) -> str:
        return json.dumps({"id": self.id, "label": self.label, "properties": self.properties},
                          separators=(",", ":"), ensure_ascii=False)


@dataclass(frozen=True, slots=True)
class Edge:
    """An edge as the original's `linkNodes` stores it: `{id, source, target, type,
    properties: {weight, ...}}`."""

    id: str
    source: str
    target: str
    type: str
    weight: float = 1.0
    extra: tuple[tuple[str, Any], ...] = ()

    @property
    def data(self) -> str:
        return json.dumps({"id": self.id, "source": self.source, "target": self.target,
                           "type": self.type,
                           "properties": {"weight": self.weight, **dict(self.extra)}},
                          separators=(",", ":"))


def concept(name: str) -> Node:
    """A concept node as the REM extractor writes one."""
    return Node(f"CONCEPT:{name}", "CONCEPT", {"name": name, "description": ""})


def agent_memory(chroma_id: str, *, session_id: str = "s1", user_id: str = "tobiu") -> Node:
    """A raw memory as E2/E3's MemoryService projects it at write time (before REM)."""
    return Node(chroma_id, "AGENT_MEMORY",
                {"name": f"Memory: {chroma_id}", "description": "", "userId": user_id,
                 "sessionId": session_id, "timestamp": "2026-08-01T10:00:00.000Z"})


def tenant_config(tenant: str, version: int = 3) -> Node:
    """`kb-config:<tenant>` as the original's `setTenantConfig` writes it (no top-level
    `repoSlug`: the repos are in `tenantRepos`)."""
    return Node(f"kb-config:{tenant}", "KnowledgeBaseTenantConfig", {
        "name": f"kb-config:{tenant}", "description": "", "tenantId": tenant,
        "useDefaultSources": True, "rawRepoSource": False, "useDefaultParsers": True,
        "customSources": [], "customParsers": [], "sourcePaths": {},
        "tenantRepos": [{"cloneUrl": f"https://github.com/{tenant}/repo.git",
                         "credentialRef": "vault:gh", "repoSlug": f"github.com/{tenant}/repo"}],
        "version": version, "visibility": "team"})


def tenant_manifest(tenant: str, repo: str, paths: Sequence[str], updated_at: int) -> Node:
    """`kb-manifest:<tenant>` as the original's `setTenantManifest` writes it."""
    return Node(f"kb-manifest:{tenant}", "KnowledgeBaseTenantManifest", {
        "name": f"kb-manifest:{tenant}", "description": "", "tenantId": tenant,
        "manifests": {repo: {"repoSlug": repo, "pathsAfterPush": sorted(paths),
                             "updatedAt": updated_at}},
        "updatedAt": updated_at, "visibility": "team"})


#: The nodes every test graph starts with: the boot seeds and a few concepts.
SEED_NODES: tuple[Node, ...] = (
    Node("frontier", "SYSTEM_ANCHOR", {"name": "Active Context Frontier",
                                       "description": "The shifting focal point."}),
    concept("a"), concept("b"), concept("c"),
)


def build_neo_graph(path: Path, era: NeoEra, *, nodes: Iterable[Node] = SEED_NODES,
                    edges: Iterable[Edge] = ()) -> None:
    """A graph file as a fresh boot of `era` leaves it, with `nodes` and `edges` written as
    the original writes them (so its triggers log them)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with connected(path) as conn:
        conn.executescript(NEO_GRAPH_DDL[era])
        insert_nodes(conn, era, nodes)
        insert_edges(conn, era, edges)


def insert_nodes(conn: sqlite3.Connection, era: NeoEra, nodes: Iterable[Node]) -> None:
    """The original's `addNodes`."""
    for node in nodes:
        if era in BARE_ERAS:
            conn.execute("INSERT INTO Nodes (id, user_id, data) VALUES (?, ?, ?)",
                         (node.id, node.properties.get("userId") or None, node.data))
        else:
            conn.execute("INSERT INTO Nodes (id, data) VALUES (?, ?)", (node.id, node.data))


def insert_edges(conn: sqlite3.Connection, era: NeoEra, edges: Iterable[Edge]) -> None:
    """The original's `addEdges`."""
    for edge in edges:
        columns = ((edge.id, None, edge.source, edge.target, edge.type, edge.data)
                   if era in BARE_ERAS else (edge.id, edge.source, edge.target, edge.type,
                                             edge.data))
        marks = ", ".join("?" * len(columns))
        names = ("id, user_id, source, target, type, data" if era in BARE_ERAS
                 else "id, source, target, type, data")
        conn.execute(f"INSERT INTO Edges ({names}) VALUES ({marks})", columns)


# ------------------------------------------------------------------------------- the boots


def _has_table(conn: sqlite3.Connection, name: str) -> bool:
    """The original's `hasTable`: `sqlite_master.name = ?`, case-sensitive."""
    return conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' AND name = ? "
                        "LIMIT 1", (name,)).fetchone() is not None


def _has_column(conn: sqlite3.Connection, table: str, column: str) -> bool:
    return _has_table(conn, table) and any(
        row[1] == column for row in conn.execute(f"PRAGMA table_info({table})"))


class BootRefused(RuntimeError):
    """The original's E2/E3 boot throws (an unsupported SchemaVersion, NEO_ALLOW_SCHEMA_WIPE
    unset)."""


def boot(path: Path, era: NeoEra) -> None:
    """Run `era`'s `initSchema` on the file, step by step as the original does (§1.3)."""
    with connected(path) as conn:
        if era == NeoEra.V0:
            _probe_or_drop(conn, "SELECT data FROM Nodes LIMIT 1")
            conn.executescript(NEO_V0_DDL)
        elif era == NeoEra.E1:
            _probe_or_drop(conn, "SELECT log_id FROM GraphLog LIMIT 1")
            conn.executescript(NEO_E1_DDL)
        else:
            _boot_versioned(conn, era)


def _probe_or_drop(conn: sqlite3.Connection, probe: str) -> None:
    """V0 and E1: any failure of the probe drops Edges and Nodes."""
    try:
        conn.execute(probe).fetchone()
    except sqlite3.Error:
        conn.execute("DROP TABLE IF EXISTS Edges")
        conn.execute("DROP TABLE IF EXISTS Nodes")


def _boot_versioned(conn: sqlite3.Connection, era: NeoEra) -> None:
    """E2/E3: check `SchemaVersion`, create what is missing, add the columns `hasColumn`
    misses, then the log, the triggers, the jobs table, and the stamp."""
    if _has_table(conn, "SchemaVersion"):
        row = conn.execute("SELECT version FROM SchemaVersion WHERE id = ? LIMIT 1",
                           ("graph",)).fetchone()
        if row is not None and row[0] != 1:
            raise BootRefused(f"Unsupported SQLite graph schema version {row[0]}")
    ddl = NEO_GRAPH_DDL[era]
    graph_part, rest = ddl.split("CREATE TABLE IF NOT EXISTS GraphLog", 1)
    conn.executescript(graph_part)
    for table in ("Nodes", "Edges"):
        if not _has_column(conn, table, "user_id"):
            conn.execute(f"ALTER TABLE {table} ADD COLUMN user_id TEXT")
    log_table, after_log = ("CREATE TABLE IF NOT EXISTS GraphLog" + rest).split(");", 1)
    conn.executescript(log_table + ");")
    if era == NeoEra.E3:
        for column in ("event_id", "event_payload"):
            if not _has_column(conn, "GraphLog", column):
                conn.execute(f"ALTER TABLE GraphLog ADD COLUMN {column} TEXT")
    jobs, _ = after_log.split(SCHEMA_VERSION_DDL, 1)
    conn.executescript(jobs)
    if era == NeoEra.E3:
        for column, kind in (("result_envelope", "BLOB"), ("result_encoding", "TEXT"),
                             ("result_staged_at", "INTEGER"),
                             ("result_acknowledged_at", "INTEGER"),
                             ("result_last_replayed_at", "INTEGER")):
            if not _has_column(conn, "SummarizationJobs", column):
                conn.execute(f"ALTER TABLE SummarizationJobs ADD COLUMN {column} {kind}")
    conn.executescript(SCHEMA_VERSION_DDL)


# ------------------------------------------------------------------------------- the reads


def schema_entries(path: Path) -> list[tuple[str, str, str, str | None]]:
    """Every `sqlite_master` entry (type, name, table, sql), sorted."""
    with closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as conn:
        return sorted(conn.execute("SELECT type, name, tbl_name, sql FROM sqlite_master"))


def _ours(entry: tuple[str, str, str, str | None]) -> bool:
    return entry[2].startswith(OWN_PREFIX)


def original_entries(path: Path) -> list[tuple[str, str, str, str | None]]:
    """The entries of everything but the daemons' own tables (theirs and their indexes)."""
    return [e for e in schema_entries(path) if not _ours(e)]


def assert_original_schema_unchanged(before: Sequence[tuple[str, str, str, str | None]],
                                     path: Path) -> None:
    """Every entry the file had is there byte for byte, and nothing but the daemons' own
    tables was added (and, when missing, the original's telemetry table as the original would
    create it, and SQLite's `sqlite_sequence` of an AUTOINCREMENT table)."""
    after = schema_entries(path)
    assert [e for e in before if e not in after] == [], "an entry of the original changed"
    added = [e for e in after if e not in before and not _ours(e)]
    assert all(e[2] in ("kb_ingestion_metrics", "sqlite_sequence") for e in added), added


def documents(path: Path, table: str = "Nodes") -> dict[str, dict[str, Any]]:
    """Every row's document by id."""
    if table not in ("Nodes", "Edges"):
        raise ValueError(table)
    with closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as conn:
        return {row[0]: json.loads(row[1])
                for row in conn.execute(f"SELECT id, data FROM {table}")}


def node_rows(path: Path) -> dict[str, tuple[Any, dict[str, Any]]]:
    """Every node: (user_id or None where the table has none, document), by id."""
    with closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as conn:
        columns = {row[1] for row in conn.execute("PRAGMA table_info(Nodes)")}
        user = "user_id" if "user_id" in columns else "NULL"
        return {r[0]: (r[1], json.loads(r[2]))
                for r in conn.execute(f"SELECT id, {user}, data FROM Nodes")}


def edges_between(path: Path, source: str, target: str, kind: str
                  ) -> list[dict[str, Any]]:
    """The documents of every row with this key, oldest (lowest rowid) first."""
    with closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as conn:
        return [json.loads(r[0]) for r in conn.execute(
            "SELECT data FROM Edges WHERE source = ? AND target = ? AND type = ? ORDER BY rowid",
            (source, target, kind))]


def graph_log(path: Path) -> list[tuple[int, str, str]]:
    """`GraphLog`'s rows (log_id, entity_id, entity_type), oldest first."""
    with closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as conn:
        return [tuple(r) for r in conn.execute(
            "SELECT log_id, entity_id, entity_type FROM GraphLog ORDER BY log_id")]


def file_bytes(path: Path) -> bytes:
    """The graph file and its WAL, for "unchanged" checks (a checkpoint moves pages between
    them; the pair is what a reader sees)."""
    wal = path.with_name(path.name + "-wal")
    return path.read_bytes() + (wal.read_bytes() if wal.exists() else b"")
