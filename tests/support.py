"""Helpers shared by tests and benchmarks: settings in a temp folder, seeded Chroma rows, and
the test-only reads of the stores (a node, an edge, a table's rows, calls and commits counted)
that the product does not need."""

from __future__ import annotations

import ast
import json
import os
import re
import socket
import subprocess
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import asyncpg
import pytest

from core.base.chroma import VectorStore
from core.base.config.config import Settings, resolve_config
from core.base.rules.ids import normalize_graph_node_id
from core.base.rules.nodes import REINFORCE_FACTOR, NodeRow
from core.base.rules.rows import ChromaRow
from core.base.rules.tenants import TENANT_CONFIG_LABEL
from core.base.state.graph import upsert_node
from core.base.state.graph_db import GraphDB, Transaction
from core.base.state.state import open_graph
from core.reconcile.rules.archives.format import (
    ARCHIVE_FORMAT,
    FIRST_FORMAT,
    ArchivedChunk,
    ArchiveHeader,
    json_object,
    parse_chunk,
    parse_header,
    unseal,
)

DIM = 4


def embedding_for(row_id: str) -> list[float]:
    """A deterministic synthetic embedding (no model is ever loaded)."""
    seed = sum(row_id.encode()) % 97
    return [float((seed + i) % 7) / 7 for i in range(DIM)]


def make_settings(tmp_path: Path, **overrides: Any) -> Settings:
    """Settings rooted in `tmp_path`, with `[knowledgeBase]` overrides by TOML key name."""
    table = {"dataDir": str(tmp_path / "data"), **overrides}
    loaded = resolve_config({"knowledgeBase": table}, base_dir=tmp_path)
    assert not loaded.warnings, loaded.warnings
    return loaded.settings


async def seed(
    vectors: VectorStore, collection: str, rows: Sequence[tuple[str, Mapping[str, Any]]],
    *, documents: bool = True,
) -> None:
    """Write rows (id, metadata) with synthetic embeddings into a collection, creating it."""
    await vectors.upsert(
        collection,
        [ChromaRow(i, dict(m), f"doc {i}" if documents else None, embedding_for(i))
         for i, m in rows],
        create=True,
    )


REPO = Path(__file__).resolve().parent.parent


async def seed_acme_drift(settings: Settings) -> None:
    """Tenant `acme` at version 4 (repo `acme/repo`) and four of its chunks stamped 1 to 4
    (`old1`, `old2`: actionable; `grace`: within the version gap; `now`: current), ingested
    at 1,001 to 1,004: the drift the command tests tombstone and restore."""
    graph = await open_graph(settings.state)
    try:
        await upsert_node(graph, "kb-config:acme", TENANT_CONFIG_LABEL,
                          {"version": 4, "repoSlug": "acme/repo"})
    finally:
        await graph.close()
    vectors = await VectorStore.open(settings.chroma)
    try:
        await seed(vectors, settings.chroma.knowledge_base_collection, [
            (i, {"tenantId": "acme", "tenantConfigVersion": v, "ingestedAt": 1_000 + v})
            for i, v in (("old1", 1), ("old2", 2), ("grace", 3), ("now", 4))])
    finally:
        await vectors.close()


async def seed_concepts(settings: Settings, count: int) -> None:
    """Nodes `CONCEPT:c0` ... `CONCEPT:c<count - 1>`: the endpoints of the lines a test
    appends, present so that every line links."""
    graph = await open_graph(settings.state)
    try:
        for c in range(count):
            await upsert_node(graph, f"CONCEPT:c{c}", "CONCEPT")
    finally:
        await graph.close()


async def edge_mentions(url: str) -> Counter[str]:
    """Copies applied per relationship, read from the edges of the PostgreSQL state at `url`
    (an edge's weight is 1.0 for one copy, + REINFORCE_FACTOR for each more)."""
    conn = await asyncpg.connect(url)
    try:
        rows = await conn.fetch("SELECT relationship, weight FROM edges")
    finally:
        await conn.close()
    return Counter({str(r[0]): round((float(r[1]) - 1.0) / REINFORCE_FACTOR) + 1 for r in rows})


def unix_socket_to(path: Path, *, blocking: bool = True) -> socket.socket:
    """A Unix socket connected to `path` through its folder's descriptor, as the product
    connects (pytest's temp paths can pass the 108-byte socket address). A non-blocking
    connect that would wait raises BlockingIOError, as `connect` does."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.setblocking(blocking)
    fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        sock.connect(f"/proc/self/fd/{fd}/{path.name}")
    except BaseException:
        sock.close()
        raise
    finally:
        os.close(fd)
    return sock


def wait_until(predicate: Callable[[], bool], timeout: float, what: str) -> float:
    """Poll until `predicate`; the monotonic time it became true."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return time.monotonic()
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def log_events(log: Path, name: str, **fields: Any) -> list[dict[str, Any]]:
    """The JSON log lines of a daemon's log file whose event is `name` and whose fields have
    the given values."""
    found = []
    for line in log.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if event.get("event") == name and all(event.get(k) == v for k, v in fields.items()):
            found.append(event)
    return found


def child_env(home: Path) -> dict[str, str]:
    """The environment of a command a test runs: its own $HOME (nothing may land in the real
    one), telemetry off, and no config or notify socket inherited from the test's shell."""
    env = {**os.environ, "HOME": str(home), "ANONYMIZED_TELEMETRY": "False"}
    env.pop("KB_CONFIG", None)
    env.pop("NOTIFY_SOCKET", None)
    return env


def run_module(*args: str, home: Path, stdin: str | None = None,
               timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """`python -m <args>` from the repository, as an operator runs it; never raises on a
    non-zero exit (tests assert the code)."""
    return subprocess.run([sys.executable, "-m", *args], cwd=REPO, env=child_env(home),
                          input=stdin, capture_output=True, text=True, timeout=timeout,
                          check=False)


# --------------------------------------------------------------------------------------------
# Test-only reads and counters
# --------------------------------------------------------------------------------------------

#: Tables `count_rows` may count (a table name cannot be a query parameter).
COUNTED_TABLES = frozenset({"nodes", "edges", "drain_generations", "drain_requeued",
                            "kb_ingestion_metrics", "alerts_fired"})


def portable(graph: GraphDB, sql: str) -> str:
    """A test's own SQLite-style statement (`?` parameters) in the store's dialect."""
    if graph.location.startswith(("postgresql://", "postgres://")):
        numbers = iter(range(1, sql.count("?") + 1))
        return re.sub(r"\?", lambda _: f"${next(numbers)}", sql)
    return sql


async def count_rows(graph: GraphDB, table: str) -> int:
    """Rows in one of the project's tables."""
    if table not in COUNTED_TABLES:
        raise ValueError(f"unknown table {table!r}")
    return int((await graph.query(f"SELECT COUNT(*) FROM {table}"))[0][0])


async def read_node(graph: GraphDB, node_id: str) -> NodeRow | None:
    """One node by id (canonicalized), or None."""
    rows = await graph.query(
        portable(graph, "SELECT id, label, properties FROM nodes WHERE id = ?"),
        (normalize_graph_node_id(node_id),))
    return NodeRow(rows[0][0], rows[0][1], json.loads(rows[0][2])) if rows else None


@dataclass(frozen=True, slots=True)
class StoredEdge:
    """An edge as read back from SQLite."""

    source: str
    target: str
    relationship: str
    weight: float
    properties: dict[str, Any]


async def read_edge(
    graph: GraphDB, source: str, target: str, relationship: str
) -> StoredEdge | None:
    """One edge by its key (endpoints canonicalized), or None."""
    rows = await graph.query(portable(
        graph, "SELECT source, target, relationship, weight, properties FROM edges "
        "WHERE source = ? AND target = ? AND relationship = ?"),
        (normalize_graph_node_id(source), normalize_graph_node_id(target), relationship))
    if not rows:
        return None
    r = rows[0]
    return StoredEdge(r[0], r[1], r[2], float(r[3]), json.loads(r[4]))


def count_chroma_calls(monkeypatch: pytest.MonkeyPatch, vectors: VectorStore
                       ) -> Callable[[], int]:
    """Count the calls the store makes on its collections from now on (each try counts)."""
    real = vectors._call_on_collection
    calls = 0

    def counted(name: str, method: str, kwargs: Mapping[str, Any]) -> Any:
        nonlocal calls
        calls += 1
        return real(name, method, kwargs)

    monkeypatch.setattr(vectors, "_call_on_collection", counted)
    return lambda: calls


def count_commits(monkeypatch: pytest.MonkeyPatch, graph: GraphDB) -> Callable[[], int]:
    """Count the write transactions `graph` commits from now on."""
    real = graph.write
    commits = 0

    @asynccontextmanager
    async def counted() -> AsyncIterator[Transaction]:
        nonlocal commits
        async with real() as tx:
            yield tx
        commits += 1

    monkeypatch.setattr(graph, "write", counted)
    return lambda: commits


def patch_target(owner: object, name: str) -> Any:
    """`owner`'s attribute `name`, after checking that replacing it changes what the code runs.
    A class's attribute is looked up on every call; a module's global only by the functions of
    that module (`from m import f` binds `f` in each importer's globals): patching a module
    that merely imports or re-exports the name, or one whose code no longer reads it (after a
    move), would change nothing and a crash point would silently never fire."""
    if isinstance(owner, ModuleType):
        source = Path(str(owner.__file__)).read_text(encoding="utf-8")
        read = any(isinstance(node, ast.Name) and node.id == name
                   and isinstance(node.ctx, ast.Load)
                   for function in ast.walk(ast.parse(source))
                   if isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef))
                   for node in ast.walk(function))
        if not read:
            raise AssertionError(f"no function of {owner.__name__} reads {name!r}: a patch "
                                 f"of {owner.__name__}.{name} would have no effect")
    return getattr(owner, name)


def read_archived_chunks(path: Path) -> Iterator[tuple[ArchiveHeader | None, ArchivedChunk]]:
    """Every readable chunk line of an archive with the archive's header (None for format 1),
    unreadable lines are skipped."""
    with path.open("rb") as handle:
        header: ArchiveHeader | None = None
        first = True
        for raw in (line.rstrip(b"\r\n") for line in handle if line.strip()):
            try:
                if first:
                    first = False
                    try:
                        header = parse_header(unseal(raw))
                        continue
                    except ValueError:
                        pass
                record = unseal(raw) if header is not None else json_object(raw)
                yield header, parse_chunk(
                    record, expected_format=ARCHIVE_FORMAT if header else FIRST_FORMAT)
            except ValueError:
                continue
