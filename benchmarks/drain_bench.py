"""Drain benchmark: the project's drainer against the original's per-edge algorithm and the
storage floor, each from the same fresh copy of one seeded store, in child processes.

    python -m benchmarks.drain_bench [--smoke] [--repeats N]      # the whole benchmark
    python -m benchmarks.drain_bench --seed ROOT --lines ...      # (child) seed a store
    python -m benchmarks.drain_bench --contender NAME --data ROOT # (child) one contender

The workload (issue 9): a queue of `lines` lines over an embedded Chroma holding `memories`
memories and `summaries` session summaries. 40% of the lines point at a memory whose node is
missing but whose row exists, 5% at targets that exist nowhere, 5% are malformed, and the rest
link nodes that already exist. The contenders:

- **drainer**: `core.drain.drain_queue`, exactly as a REM tick runs it;
- **baseline**: the original's algorithm (seeds/000, "JSONL Lazy Queue", "The Async Edge
  Path"), written here on the bare clients so it is not slowed by this project's adapters:
  per line, check both endpoints (one SQLite query each), one Chroma `get` per missing
  `memory:` / `session:` endpoint (a memory by id, then its parent session by `where
  sessionId` when that node is missing too; a minimal session when there is no summary),
  upsert the nodes, link the edge (reinforcing an existing one), one commit per edge;
  malformed lines skipped, failed lines kept on the queue;
- **floor**: only the storage work no drainer can avoid: the bulk Chroma `get`s of the rows
  it needs and one bulk SQLite write of the resulting nodes and edges, from a plan worked out
  at seeding time (no parsing, no lookups, no bookkeeping).

Every contender must end with the same number of nodes and edges; the report says whether
they did (`consistent`), so a fast but wrong contender cannot win.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import random
import sqlite3
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.bare_stores import (
    count_rows,
    open_chroma,
    open_sqlite,
    settings_for,
    write_queue_file,
)
from benchmarks.harness import (
    ChildRun,
    Measure,
    Target,
    child_env,
    copy_data,
    emit_report,
    format_table,
    make_workdir,
    progress,
    ratio,
    remove_tree,
    run_child,
    set_up_child,
)

MODULE = "benchmarks.drain_bench"
CONTENDERS = ("drainer", "baseline", "floor")
#: Where the seeder leaves the floor's plan inside a contender root (copied with the data).
FLOOR_PLAN_FILE = "floor-plan.json"

#: Shares of the queue (issue 9).
MISSING_MEMORY_SHARE = 0.40
GHOST_SHARE = 0.05
MALFORMED_SHARE = 0.05
#: Memories that live ingestion already turned into nodes (with their sessions): the targets
#: of the "between existing nodes" lines besides concepts. A quarter is the platform's state a
#: few days after a large extraction run: most history is not in the graph yet.
LIVE_MEMORY_SHARE = 0.25
#: Sessions that never reached summarization, so back-filling them gives minimal nodes.
UNSUMMARIZED_SESSION_EVERY = 10
#: One memory reference in this many uses the legacy `MEMORY:` prefix (normalized on input).
LEGACY_PREFIX_EVERY = 20
#: Edge relationships the platform's extractor writes.
RELATIONSHIPS = ("MENTIONED_IN", "DISCUSSED_IN", "REFERENCED_BY")
#: Issue 9's targets: the drainer's in-process time over the floor's (at most, and the aim),
#: and its speed-up over the per-edge baseline (at least).
MAX_OVER_FLOOR = 1.5
AIM_OVER_FLOOR = 1.2
MIN_SPEEDUP = 7.0
#: The random seed of the workload: every run benchmarks the same queue.
WORKLOAD_SEED = 10_153

#: The floor's chunking: as many ids per `get` as one call takes comfortably (the 32,766-row
#: metadata limit is far away) and as many sessions per `$in` as the drainer uses, so the floor
#: differs from the drainer only in work, not in how it talks to Chroma.
FLOOR_IDS_PER_GET = 5_000
FLOOR_SESSIONS_PER_WHERE = 1_000

_INSERT_NODE = "INSERT OR IGNORE INTO nodes(id, label, properties) VALUES (?, ?, ?)"
_INSERT_EDGE_IF_ABSENT = ("INSERT OR IGNORE INTO edges(source, target, relationship, weight, "
                          "properties) VALUES (?, ?, ?, ?, ?)")


@dataclass(slots=True)
class CpuMeasure(Measure):
    """`Measure` plus the CPU time the whole process (every thread) spent in the pass. The
    machine is shared: wall time swings with the neighbours' load, CPU time much less, so
    the drainer/floor ratio of CPU times says what the wall ratio means."""

    cpu_s: float = 0.0
    _cpu_started: float = 0.0

    def start(self) -> None:
        """Right before the pass."""
        self._cpu_started = time.process_time()
        Measure.start(self)

    def stop(self) -> None:
        """Right after the pass."""
        Measure.stop(self)
        self.cpu_s = time.process_time() - self._cpu_started

    def figures(self) -> dict[str, float]:
        """`Measure`'s figures and `cpuS`."""
        return {**Measure.figures(self), "cpuS": round(self.cpu_s, 4)}


@dataclass(frozen=True, slots=True)
class DrainSizes:
    """How big the drain workload is."""

    lines: int
    memories: int
    summaries: int
    #: CONCEPT nodes already in the graph (the sources of every line).
    concepts: int

    def args(self) -> list[str]:
        """The seeder's flags for these sizes."""
        return ["--lines", str(self.lines), "--memories", str(self.memories),
                "--summaries", str(self.summaries), "--concepts", str(self.concepts)]


#: Issue 9's workload.
FULL_SIZES = DrainSizes(lines=50_000, memories=20_000, summaries=2_000, concepts=2_000)
#: Seconds, not minutes: enough rows for every code path (batches, back-fill, minimal
#: sessions, ghosts, malformed lines), small enough for `make test`.
SMOKE_SIZES = DrainSizes(lines=600, memories=300, summaries=30, concepts=40)


# ------------------------------------------------------------------------------------------
# The workload (pure)
# ------------------------------------------------------------------------------------------


@dataclass(slots=True)
class FloorPlan:
    """What the floor does, worked out once at seeding time."""

    #: Chroma ids of every memory the queue names that has no node (ghosts included: the
    #: drain cannot know they are missing without asking).
    memory_keys: list[str] = field(default_factory=list)
    #: Sessions whose nodes the back-filled memories need (asked of the summary collection).
    session_keys: list[str] = field(default_factory=list)
    #: Of those, the sessions that have no summary row (written as minimal nodes).
    minimal_sessions: list[str] = field(default_factory=list)
    #: The edges of the lines that link: [source, target, relationship, weight, props JSON].
    edges: list[list[Any]] = field(default_factory=list)


@dataclass(slots=True)
class Workload:
    """Everything the seeder writes, and the outcome every contender must reach."""

    memory_rows: list[tuple[str, dict[str, Any]]]
    summary_rows: list[tuple[str, dict[str, Any]]]
    concept_ids: list[str]
    live_memories: list[tuple[str, dict[str, Any]]]
    live_sessions: list[str]
    queue_lines: list[bytes]
    plan: FloorPlan
    expected: dict[str, int]


def session_key(index: int) -> str:
    """The sessionId of session `index`."""
    return f"s-{index:05d}"


def build_workload(sizes: DrainSizes, seed: int = WORKLOAD_SEED) -> Workload:
    """The seeded rows, graph and queue for `sizes` (pure and deterministic)."""
    rng = random.Random(seed)
    n_sessions = math.ceil(sizes.summaries * UNSUMMARIZED_SESSION_EVERY
                           / (UNSUMMARIZED_SESSION_EVERY - 1))
    summarized = [k for k in range(n_sessions)
                  if k % UNSUMMARIZED_SESSION_EVERY != UNSUMMARIZED_SESSION_EVERY - 1]
    summarized = summarized[: sizes.summaries]
    summary_rows = [
        (f"sum-{k:05d}", {"sessionId": session_key(k), "title": f"Session {k}",
                          "createdAt": 1_700_000_000_000 + k * 60_000, "userId": f"u-{k % 7}"})
        for k in summarized
    ]
    memory_rows = []
    for i in range(sizes.memories):
        # Contiguous blocks: the live quarter of the memories covers a quarter of the sessions.
        k = i * n_sessions // sizes.memories
        memory_rows.append((f"mem-{i:06d}", {
            "sessionId": session_key(k), "userId": f"u-{k % 7}",
            "createdAt": (f"2024-05-{1 + i % 28:02d}T12:{i % 60:02d}:00Z" if i % 2
                          else 1_714_000_000_000 + i * 1_000),
        }))
    live_count = int(sizes.memories * LIVE_MEMORY_SHARE)
    live_memories = memory_rows[:live_count]
    live_sessions = list(dict.fromkeys(str(m["sessionId"]) for _, m in live_memories))
    missing_memories = memory_rows[live_count:]
    concept_ids = [f"CONCEPT:c-{j:05d}" for j in range(sizes.concepts)]

    n_missing = round(sizes.lines * MISSING_MEMORY_SHARE)
    n_ghost = round(sizes.lines * GHOST_SHARE)
    n_malformed = round(sizes.lines * MALFORMED_SHARE)
    n_existing = sizes.lines - n_missing - n_ghost - n_malformed
    existing_targets = (concept_ids + [f"memory:{i}" for i, _ in live_memories]
                        + [f"session:{s}" for s in live_sessions])
    keys: set[tuple[str, str, str]] = set()
    plan = FloorPlan()
    entries: list[bytes] = []

    def edge_line(target: str, written_target: str) -> None:
        while True:
            key = (rng.choice(concept_ids), target, rng.choice(RELATIONSHIPS))
            if key not in keys and key[0] != target:
                keys.add(key)
                break
        weight = round(rng.uniform(0.5, 2.0), 2)
        body = {"source": key[0], "target": written_target, "relationship": key[2],
                "weight": weight, "justification": f"{key[0]} is discussed in {target}",
                "timestamp": 1_714_000_000_000 + len(entries)}
        entries.append(json.dumps(body).encode())
        if not target.startswith("memory:ghost-"):
            props = json.dumps({"justification": body["justification"],
                                "timestamp": body["timestamp"]}, separators=(",", ":"))
            plan.edges.append([key[0], target, key[2], weight, props])

    for _ in range(n_existing):
        target = rng.choice(existing_targets)
        edge_line(target, target)
    referenced: dict[str, dict[str, Any]] = {}
    for n in range(n_missing):
        chroma_id, metadata = rng.choice(missing_memories)
        referenced.setdefault(chroma_id, metadata)
        prefix = "MEMORY:" if n % LEGACY_PREFIX_EVERY == 0 else "memory:"
        edge_line(f"memory:{chroma_id}", prefix + chroma_id)
    ghosts = [f"ghost-{g:06d}" for g in range(n_ghost)]
    for ghost in ghosts:
        edge_line(f"memory:{ghost}", f"memory:{ghost}")
    entries.extend(_malformed_line(n) for n in range(n_malformed))
    rng.shuffle(entries)

    plan.memory_keys = list(referenced) + ghosts
    live = set(live_sessions)
    has_summary = {str(m["sessionId"]) for _, m in summary_rows}
    plan.session_keys = list(dict.fromkeys(
        s for m in referenced.values() if (s := str(m["sessionId"])) not in live))
    plan.minimal_sessions = [s for s in plan.session_keys if s not in has_summary]
    pre_nodes = len(concept_ids) + len(live_memories) + len(live_sessions)
    pre_edges = len(live_memories)
    expected = {
        "lines": sizes.lines,
        "linked": n_existing + n_missing,
        "unresolved": n_ghost,
        "malformed": n_malformed,
        "backfilledMemories": len(referenced),
        "backfilledSessions": len(plan.session_keys),
        "minimalSessions": len(plan.minimal_sessions),
        "nodesBefore": pre_nodes,
        "edgesBefore": pre_edges,
        "nodesAfter": pre_nodes + len(referenced) + len(plan.session_keys),
        "edgesAfter": pre_edges + n_existing + n_missing + len(referenced),
    }
    return Workload(memory_rows, summary_rows, concept_ids, live_memories, live_sessions,
                    entries, plan, expected)


def _malformed_line(n: int) -> bytes:
    """Lines both the original and this project reject: broken JSON, a missing or empty
    required field, a non-object, bytes that are not UTF-8.

    Each is distinct (it names `n`): identical lines share an identity, and the drainer
    would count the copies as duplicates rather than as malformed lines."""
    kinds = (
        f'{{"source": "CONCEPT:c-{n:05d}", "target": "memory:mem-0'.encode(),
        json.dumps({"source": "CONCEPT:c-00001", "target": f"memory:mem-{n:06d}"}).encode(),
        json.dumps({"source": f"CONCEPT:c-{n:05d}", "target": "", "relationship": "X"}).encode(),
        json.dumps([f"CONCEPT:c-{n:05d}", "memory:mem-000001", "MENTIONED_IN"]).encode(),
        b'{"source": "CONCEPT:' + str(n).encode() + b'\xff\xfe", "target": "memory:x", '
        b'"relationship": "X"}',
    )
    return kinds[n % len(kinds)]


# ------------------------------------------------------------------------------------------
# Children
# ------------------------------------------------------------------------------------------


async def seed_store(root: Path, sizes: DrainSizes) -> dict[str, Any]:
    """(child) Write the workload into `root`: Chroma rows, graph, queue, the floor's plan."""
    from core.base.chroma import VectorStore
    from tests.support import seed

    workload = build_workload(sizes)
    settings = settings_for(root)
    vectors = await VectorStore.open(settings.chroma)
    try:
        await seed(vectors, settings.chroma.memory_collection, workload.memory_rows)
        await seed(vectors, settings.chroma.summary_collection, workload.summary_rows)
    finally:
        await vectors.close()
    await seed_graph(settings, workload)
    write_queue_file(settings.drain.lazy_edges_queue_path, workload.queue_lines)
    (root / FLOOR_PLAN_FILE).write_text(json.dumps(asdict(workload.plan)), encoding="utf-8")
    return {"expected": workload.expected, "sizes": asdict(sizes)}


async def seed_graph(settings: Any, workload: Workload) -> None:
    """(child) The graph the workload starts from (concepts, live memories and sessions, their
    ORIGINATES_IN edges), in the state store `settings` names (SQLite or PostgreSQL)."""
    from core.base.rules.nodes import (
        NodeRow,
        memory_node,
        minimal_session_node,
        originates_in,
        session_node,
    )
    from core.base.state.graph import insert_edges_if_absent, upsert_nodes
    from core.base.state.state import open_graph

    summaries = {str(m["sessionId"]): (i, m) for i, m in workload.summary_rows}
    nodes = [NodeRow(c, "CONCEPT", {"name": c.split(":", 1)[1]}) for c in workload.concept_ids]
    nodes += [memory_node(i, m, "liveIngested") for i, m in workload.live_memories]
    for sid in workload.live_sessions:
        if sid in summaries:
            nodes.append(session_node(sid, summaries[sid][0], summaries[sid][1],
                                      "liveIngested"))
        else:
            nodes.append(minimal_session_node(sid))
    graph = await open_graph(settings.state)
    try:
        async with graph.write() as tx:
            await upsert_nodes(tx, nodes)
            await insert_edges_if_absent(
                tx,
                [originates_in(i, str(m["sessionId"])) for i, m in workload.live_memories])
    finally:
        await graph.close()


async def run_drainer(root: Path) -> dict[str, Any]:
    """(child) The project's drainer, as one REM tick runs it (stores opened untimed)."""
    from core.drain.queue_drain import drain_queue
    from core.suite.tick import open_context

    settings = settings_for(root)
    measure = CpuMeasure()
    async with open_context(settings) as stores:
        measure.start()
        stats = await drain_queue(stores)
        measure.stop()
    return {**measure.figures(), "linked": stats.succeeded, "unresolved": stats.failed,
            "malformed": stats.skipped_malformed}


def run_baseline(root: Path) -> dict[str, Any]:
    """(child) The original's per-edge algorithm (see the module docstring)."""
    settings = settings_for(root)
    conn = open_sqlite(settings.state.graph_db_path)
    client = open_chroma(settings)
    measure = CpuMeasure()
    measure.start()
    baseline = _PerEdgeBaseline(conn, client, settings)
    figures = baseline.drain(settings.drain.lazy_edges_queue_path, settings.drain.draining_path)
    measure.stop()
    conn.close()
    return {**measure.figures(), **figures}


class _PerEdgeBaseline:
    """The original LazyEdgeDrainer + linkNodesAsync + ingestSingleRow, per line."""

    def __init__(self, conn: sqlite3.Connection, client: Any, settings: Any) -> None:
        from core.base.state.graph import MAX_WEIGHT, REINFORCE_FACTOR

        self.conn = conn
        self.memories = client.get_collection(settings.chroma.memory_collection,
                                              embedding_function=None)
        self.summaries = client.get_collection(settings.chroma.summary_collection,
                                               embedding_function=None)
        # The original's linkNodes: a zero stored weight counts as 1.0; reinforce and cap.
        self.link_sql = (
            "INSERT INTO edges(source, target, relationship, weight, properties) "
            "VALUES (?, ?, ?, ?, ?) ON CONFLICT(source, target, relationship) DO UPDATE SET "
            f"weight = MIN(COALESCE(NULLIF(edges.weight, 0), 1.0) + excluded.weight * "
            f"{REINFORCE_FACTOR}, {MAX_WEIGHT}), "
            "properties = json_patch(edges.properties, excluded.properties)"
        )

    def drain(self, queue: Path, draining: Path) -> dict[str, Any]:
        """Rename the queue, link line by line, append the failures back, remove the file."""
        from core.drain.stores.queue_files import append_locked, new_segment, rotate_queue

        linked = malformed = 0
        failures: list[bytes] = []
        if rotate_queue(queue, draining, new_segment(now_ms=0, dead_letters_size=0)):
            with draining.open("rb") as lines:
                for raw in lines:
                    raw = raw.rstrip(b"\r\n")
                    if not raw.strip():
                        continue
                    edge = _parse_like_the_original(raw)
                    if edge is None:
                        malformed += 1  # the original counted and discarded them
                    elif self.link_with_backfill(*edge):
                        linked += 1
                    else:
                        failures.append(raw)
            append_locked(queue, failures)
            draining.unlink()
        return {"linked": linked, "unresolved": len(failures), "malformed": malformed}

    def exists(self, node_id: str) -> bool:
        """One SQLite query per endpoint, as the original's ensureNodeExists."""
        row = self.conn.execute("SELECT 1 FROM nodes WHERE id = ?", (node_id,)).fetchone()
        return row is not None

    def link_with_backfill(self, source: str, target: str, relationship: str, weight: float,
                           properties: str) -> bool:
        """linkNodesAsync: back-fill missing endpoints, then link; one commit per edge."""
        missing = [n for n in (source, target) if not self.exists(n)]
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            for node_id in missing:
                if not self.ingest_single_row(node_id):
                    self.conn.execute("ROLLBACK")
                    return False
            self.conn.execute(self.link_sql, (source, target, relationship, weight, properties))
            self.conn.execute("COMMIT")
        except BaseException:
            self.conn.execute("ROLLBACK")
            raise
        return True

    def ingest_single_row(self, node_id: str) -> bool:
        """One Chroma `get` for a missing memory (and one for its missing parent session)."""
        from core.base.rules.ids import parse_row_node_id
        from core.base.rules.nodes import memory_node, originates_in, session_id_of

        parsed = parse_row_node_id(node_id)
        if parsed is None:
            return False  # unrecognized prefix: the edge is culled
        if parsed.kind == "session":
            self.backfill_session(parsed.key)
            return True
        got = self.memories.get(ids=[parsed.key], include=["metadatas"])
        if not got["ids"]:
            return False  # chroma-row-not-found
        metadata = dict((got["metadatas"] or [None])[0] or {})
        sid = session_id_of(metadata)
        if sid is not None and not self.exists(f"session:{sid}"):
            self.backfill_session(sid)  # the original's recursion: parent first
        node = memory_node(parsed.key, metadata, "backfilled")
        self.conn.execute(_INSERT_NODE, (node.id, node.label, _json(node.properties)))
        if sid is not None:
            edge = originates_in(parsed.key, sid)
            self.conn.execute(_INSERT_EDGE_IF_ABSENT,
                              (edge.source, edge.target, edge.relationship, edge.weight, "{}"))
        return True

    def backfill_session(self, session_id: str) -> None:
        """A session from its summary row (`where sessionId`), else a minimal node."""
        from core.base.rules.nodes import minimal_session_node, pick_summary_row, session_node

        got = self.summaries.get(where={"sessionId": session_id}, include=["metadatas"])
        rows = list(zip(got["ids"], [dict(m or {}) for m in got["metadatas"] or []],
                        strict=False))
        chosen = pick_summary_row(rows)
        node = (minimal_session_node(session_id) if chosen is None
                else session_node(session_id, chosen[0], chosen[1], "backfilled"))
        self.conn.execute(_INSERT_NODE, (node.id, node.label, _json(node.properties)))


def _parse_like_the_original(raw: bytes) -> tuple[str, str, str, float, str] | None:
    """JSON.parse plus the required-field check; None for a malformed line."""
    from core.base.rules.ids import normalize_graph_node_id

    try:
        entry = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(entry, dict) or not all(
            isinstance(entry.get(k), str) and entry[k] for k in
            ("source", "target", "relationship")):
        return None
    weight = entry.get("weight", 1.0)
    if isinstance(weight, bool) or not isinstance(weight, (int, float)):
        weight = 1.0
    properties = {k: v for k, v in entry.items()
                  if k not in ("source", "target", "relationship", "weight")}
    return (normalize_graph_node_id(entry["source"]), normalize_graph_node_id(entry["target"]),
            entry["relationship"], float(weight), _json(properties))


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def run_floor(root: Path) -> dict[str, Any]:
    """(child) The bulk Chroma reads and the one bulk SQLite write, nothing else."""
    from core.base.state.graph import MAX_WEIGHT, REINFORCE_FACTOR

    settings = settings_for(root)
    plan = FloorPlan(**json.loads((root / FLOOR_PLAN_FILE).read_text(encoding="utf-8")))
    conn = open_sqlite(settings.state.graph_db_path)
    client = open_chroma(settings)
    link_sql = (
        "INSERT INTO edges(source, target, relationship, weight, properties) "
        "VALUES (?, ?, ?, ?, ?) ON CONFLICT(source, target, relationship) DO UPDATE SET "
        f"weight = MIN(COALESCE(NULLIF(edges.weight, 0), 1.0) + excluded.weight * "
        f"{REINFORCE_FACTOR}, {MAX_WEIGHT})"
    )
    measure = CpuMeasure()
    measure.start()
    memories = client.get_collection(settings.chroma.memory_collection, embedding_function=None)
    summaries = client.get_collection(settings.chroma.summary_collection, embedding_function=None)
    nodes: list[tuple[str, str, str]] = []
    structural: list[tuple[str, str, str, float, str]] = []
    for chunk in _chunks(plan.memory_keys, FLOOR_IDS_PER_GET):
        got = memories.get(ids=chunk, include=["metadatas"])
        for row_id, metadata in zip(got["ids"], got["metadatas"], strict=True):
            nodes.append((f"memory:{row_id}", "MEMORY", _json(metadata)))
            structural.append((f"memory:{row_id}", f"session:{metadata['sessionId']}",
                               "ORIGINATES_IN", 1.0, "{}"))
    for chunk in _chunks(plan.session_keys, FLOOR_SESSIONS_PER_WHERE):
        got = summaries.get(where={"sessionId": {"$in": chunk}}, include=["metadatas"])
        for metadata in got["metadatas"]:
            nodes.append((f"session:{metadata['sessionId']}", "SESSION", _json(metadata)))
    nodes += [(f"session:{s}", "SESSION", '{"minimal":true}') for s in plan.minimal_sessions]
    conn.execute("BEGIN IMMEDIATE")
    conn.executemany(_INSERT_NODE, nodes)
    conn.executemany(_INSERT_EDGE_IF_ABSENT, structural)
    conn.executemany(link_sql, [tuple(edge) for edge in plan.edges])
    conn.execute("COMMIT")
    measure.stop()
    conn.close()
    return {**measure.figures(), "linked": len(plan.edges), "unresolved": None,
            "malformed": None}


def _chunks(items: Sequence[str], size: int) -> Iterator[list[str]]:
    for start in range(0, len(items), size):
        yield list(items[start:start + size])


def run_contender(name: str, root: Path) -> dict[str, Any]:
    """(child) Run one contender on `root` and add what it left in the graph."""
    set_up_child()
    if name == "drainer":
        figures = asyncio.run(run_drainer(root))
    elif name == "baseline":
        figures = run_baseline(root)
    elif name == "floor":
        figures = run_floor(root)
    else:
        raise ValueError(f"unknown contender {name!r}")
    graph_path = settings_for(root).state.graph_db_path
    return {"contender": name, **figures, "nodes": count_rows(graph_path, "nodes"),
            "edges": count_rows(graph_path, "edges")}


# ------------------------------------------------------------------------------------------
# The benchmark (parent)
# ------------------------------------------------------------------------------------------


def run_drain_benchmark(sizes: DrainSizes, *, repeats: int = 1,
                        contenders: Sequence[str] = CONTENDERS) -> dict[str, Any]:
    """Seed once, run every contender on its own fresh copy (best of `repeats` each, taken in
    turns so that a noisy minute hurts all of them alike), and compare. Leaving a contender
    out (`contenders`, for profiling sessions) leaves its ratios out of the report."""
    return run_variant(MODULE, "drain", sizes, repeats=repeats, contenders=contenders)


def run_variant(module: str, label: str, sizes: DrainSizes, *, repeats: int,
                contenders: Sequence[str], seed_module: str | None = None,
                around: Callable[[Path, Path], AbstractContextManager[list[str]]] | None = None,
                ) -> dict[str, Any]:
    """This workload in the variant `module` runs (its `--contender` children; `seed_module`'s
    `--seed`, `module`'s by default): seeded once, each contender on a fresh copy, best of
    `repeats`, `summarize`d. `around`, when given, wraps each run (given the copy and the work
    folder) and yields the extra arguments of its child (a server it started for the run)."""
    workdir = make_workdir(label)
    try:
        env = child_env(workdir)
        seed_root = workdir / "seed"
        progress(f"{label}: seeding {sizes.lines:,} lines, {sizes.memories:,} memories, "
                 f"{sizes.summaries:,} summaries")
        seeded = run_child(seed_module or module, ["--seed", str(seed_root), *sizes.args()],
                           env=env)
        runs: dict[str, list[ChildRun]] = {name: [] for name in contenders}
        for turn in range(repeats):
            for name in contenders:
                root = copy_data(seed_root, workdir / f"{name}-{turn}")
                with (around(root, workdir) if around is not None
                      else contextlib.nullcontext([])) as extra:
                    progress(f"{label}: {name} (run {turn + 1}/{repeats})")
                    runs[name].append(run_child(
                        module, ["--contender", name, "--data", str(root), *extra], env=env))
                remove_tree(root)
        return summarize(sizes, seeded.report["expected"], runs)
    finally:
        remove_tree(workdir)


def summarize(sizes: DrainSizes, expected: dict[str, int],
              runs: dict[str, list[ChildRun]]) -> dict[str, Any]:
    """Figures per contender (its best run), the ratios, the targets, and the consistency
    check (every contender ends with the expected nodes and edges)."""
    contenders: dict[str, dict[str, Any]] = {}
    for name, child_runs in runs.items():
        best = min(child_runs, key=lambda r: float(r.report["inProcessS"]))
        report = dict(best.report)
        seconds = float(report["inProcessS"])
        contenders[name] = {
            **report,
            "wholeProcessS": round(best.wall_s, 3),
            "edgesPerS": round(ratio(expected["linked"], seconds), 1),
            "edgesPerSWhole": round(ratio(expected["linked"], best.wall_s), 1),
            "inProcessRunsS": [float(r.report["inProcessS"]) for r in child_runs],
            "cpuRunsS": [float(r.report["cpuS"]) for r in child_runs],
            "bestCpuS": min(float(r.report["cpuS"]) for r in child_runs),
        }
    def over(numerator: str, denominator: str, key: str) -> float | None:
        if numerator not in contenders or denominator not in contenders:
            return None
        return round(ratio(float(contenders[numerator][key]),
                           float(contenders[denominator][key])), 3)

    over_floor = over("drainer", "floor", "inProcessS")
    over_floor_cpu = over("drainer", "floor", "bestCpuS")
    speedup = over("baseline", "drainer", "inProcessS")
    mismatches = [
        f"{name}: {key} {c[key]} != expected {expected[key + 'After']}"
        for name, c in contenders.items() for key in ("nodes", "edges")
        if c[key] != expected[key + "After"]
    ] + [
        f"{name}: linked {c['linked']} != expected {expected['linked']}"
        for name, c in contenders.items() if c["linked"] != expected["linked"]
    ] + [
        f"{name}: {key} {c[key]} != expected {expected[key]}"
        for name, c in contenders.items() for key in ("unresolved", "malformed")
        if c[key] is not None and c[key] != expected[key]
    ]
    targets = []
    if over_floor is not None:
        targets.append(Target("drain: drainer / floor in-process time", over_floor,
                              MAX_OVER_FLOOR, unit="x"))
    if speedup is not None:
        targets.append(Target("drain: speed-up over the per-edge baseline", speedup,
                              MIN_SPEEDUP, kind="min", unit="x"))
    return {
        "sizes": asdict(sizes),
        "expected": expected,
        "contenders": contenders,
        "drainerOverFloor": over_floor,
        "drainerOverFloorWhole": over("drainer", "floor", "wholeProcessS"),
        "drainerOverFloorCpu": over_floor_cpu,
        "speedupOverBaseline": speedup,
        "speedupOverBaselineWhole": over("baseline", "drainer", "wholeProcessS"),
        "aimOverFloor": AIM_OVER_FLOOR,
        "consistent": not mismatches,
        "mismatches": mismatches,
        "targets": [t.as_dict() for t in targets],
    }


def table(result: dict[str, Any]) -> str:
    """The drain section of the printed table."""
    rows = []
    for name, c in result["contenders"].items():
        rows.append([name, c["inProcessS"], c["edgesPerS"], c["bestCpuS"], c["wholeProcessS"],
                     c["edgesPerSWhole"], c["peakRssGrowthMiB"], c["edges"]])
    sizes = result["sizes"]
    head = (f"Drain: {sizes['lines']:,} lines, {sizes['memories']:,} memories, "
            f"{sizes['summaries']:,} summaries; {result['expected']['linked']:,} edges linked")
    body = format_table(["contender", "in-process s", "edges/s", "CPU s", "whole-process s",
                         "edges/s whole", "peak RSS +MiB", "edges in graph"], rows)
    tail = [f"consistent (same nodes and edges everywhere): {result['consistent']}"]
    if result["drainerOverFloor"] is not None:
        tail.append(f"drainer / floor: {result['drainerOverFloor']:.2f}x in-process, "
                    f"{result['drainerOverFloorWhole']:.2f}x whole-process "
                    f"(target <= {MAX_OVER_FLOOR}x, aim {AIM_OVER_FLOOR}x); "
                    f"{result['drainerOverFloorCpu']:.2f}x in process CPU time (best runs)")
    if result["speedupOverBaseline"] is not None:
        tail.append(f"speed-up over the per-edge baseline: "
                    f"{result['speedupOverBaseline']:.1f}x in-process, "
                    f"{result['speedupOverBaselineWhole']:.1f}x whole-process "
                    f"(target >= {MIN_SPEEDUP}x)")
    return "\n".join([head, body, *tail])


def build_parser() -> argparse.ArgumentParser:
    """Parent flags (`--smoke`, `--repeats`) and the children's (`--seed`, `--contender`)."""
    parser = argparse.ArgumentParser(prog=f"python -m {MODULE}", description=__doc__)
    parser.add_argument("--smoke", action="store_true", help="tiny sizes (seconds)")
    parser.add_argument("--repeats", type=int, default=1,
                        help="runs per contender; the best is reported")
    parser.add_argument("--contenders", default=",".join(CONTENDERS),
                        help="comma-separated subset to run (default: all)")
    parser.add_argument("--seed", type=Path, metavar="ROOT", help="(child) seed a store")
    parser.add_argument("--contender", choices=CONTENDERS, help="(child) run one contender")
    parser.add_argument("--data", type=Path, metavar="ROOT", help="(child) the seeded root")
    for flag, default in asdict(FULL_SIZES).items():
        parser.add_argument(f"--{flag}", type=int, default=default, help=argparse.SUPPRESS)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Child or parent, by flags."""
    args = build_parser().parse_args(argv)
    if args.seed is not None:
        set_up_child()
        sizes = DrainSizes(args.lines, args.memories, args.summaries, args.concepts)
        emit_report(asyncio.run(seed_store(args.seed, sizes)))
        return 0
    if args.contender is not None:
        if args.data is None:
            build_parser().error("--contender needs --data ROOT")
        emit_report(run_contender(args.contender, args.data))
        return 0
    chosen = [c for c in args.contenders.split(",") if c]
    unknown = sorted(set(chosen) - set(CONTENDERS))
    if unknown or not chosen:
        build_parser().error(f"--contenders: unknown {unknown}; choose from {CONTENDERS}")
    result = run_drain_benchmark(SMOKE_SIZES if args.smoke else FULL_SIZES,
                                 repeats=args.repeats, contenders=chosen)
    print(table(result))
    emit_report(result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
