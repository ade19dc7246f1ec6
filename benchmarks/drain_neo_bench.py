"""Drain benchmark on a neo.mjs graph file: `benchmarks.drain_bench`'s workload and drainer, with
the graph in the original's latest schema (E3: `Nodes`/`Edges` documents, `GraphLog` and its
triggers, `user_id`), against the storage floor written for that schema.

    python -m benchmarks.drain_neo_bench [--smoke] [--repeats N]
    python -m benchmarks.drain_neo_bench --seed ROOT ...            # (child) seed a store
    python -m benchmarks.drain_neo_bench --contender NAME --data ROOT  # (child) one contender

The workload, the seeding of Chroma and the queue, and the drainer are `drain_bench`'s own
(imported); the graph starts as the original's boot leaves a file (its E3 DDL), seeded through
the neo backend. The **floor** does only the storage work no drainer of that schema can avoid:
the bulk Chroma `get`s of the rows it needs, and one transaction that inserts the back-filled
nodes as documents, reads the existing rows of the linked (source, target, type) keys (the
table has no UNIQUE key, so an edge is found by a query, as the original finds it), and
inserts the new edges (fresh ids) and updates the reinforced ones; every row change fires the
original's triggers. No parsing, no identity reads, no bookkeeping.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks import drain_bench
from benchmarks.bare_stores import open_chroma, open_sqlite
from benchmarks.harness import emit_report, set_up_child

MODULE = "benchmarks.drain_neo_bench"
CONTENDERS = ("drainer", "floor")
#: The graph file inside a contender root's data folder (copied with it).
GRAPH_FILE = "neo-graph.sqlite"


def neo_settings(root: Path, **overrides: Any) -> Any:
    """`drain_bench`'s settings for `root`, the graph a neo.mjs file in its data folder."""
    from benchmarks.bare_stores import settings_for

    return settings_for(root, graphDbPath=str(root / "data" / GRAPH_FILE), graphSchema="neo",
                        **overrides)


def seed_store(root: Path, sizes: drain_bench.DrainSizes) -> dict[str, Any]:
    """(child) The original's fresh E3 file, then `drain_bench`'s seeding into it."""
    from core.base.rules.graph_schema import NeoEra
    from tests.neo_graphs import build_neo_graph

    build_neo_graph(root / "data" / GRAPH_FILE, NeoEra.E3, nodes=())
    vars(drain_bench).update(settings_for=neo_settings)
    return asyncio.run(drain_bench.seed_store(root, sizes))


def _memory_id(node_id: str) -> str:
    """E3 keeps a raw memory under its bare id."""
    return node_id.removeprefix("memory:")


def _document(document: dict[str, Any]) -> str:
    return json.dumps(document, separators=(",", ":"), ensure_ascii=False)


def run_floor(root: Path) -> dict[str, Any]:
    """(child) The bulk Chroma reads and the one transaction of the schema's writes."""
    from core.base.rules.nodes import REINFORCE_FACTOR

    settings = neo_settings(root)
    plan = drain_bench.FloorPlan(**json.loads(
        (root / drain_bench.FLOOR_PLAN_FILE).read_text(encoding="utf-8")))
    conn = open_sqlite(settings.state.graph_db_path)
    client = open_chroma(settings)
    measure = drain_bench.CpuMeasure()
    measure.start()
    memories = client.get_collection(settings.chroma.memory_collection, embedding_function=None)
    summaries = client.get_collection(settings.chroma.summary_collection, embedding_function=None)
    nodes: list[tuple[str, Any, str]] = []
    edges: list[tuple[str, str, str, float, dict[str, Any]]] = []
    for chunk in drain_bench._chunks(plan.memory_keys, drain_bench.FLOOR_IDS_PER_GET):
        got = memories.get(ids=chunk, include=["metadatas"])
        for row_id, metadata in zip(got["ids"], got["metadatas"], strict=True):
            nodes.append((row_id, metadata.get("userId"), _document(
                {"id": row_id, "label": "AGENT_MEMORY", "properties": dict(metadata)})))
            edges.append((row_id, f"session:{metadata['sessionId']}", "ORIGINATES_IN", 1.0, {}))
    for chunk in drain_bench._chunks(plan.session_keys, drain_bench.FLOOR_SESSIONS_PER_WHERE):
        got = summaries.get(where={"sessionId": {"$in": chunk}}, include=["metadatas"])
        for metadata in got["metadatas"]:
            node_id = f"session:{metadata['sessionId']}"
            nodes.append((node_id, metadata.get("userId"), _document(
                {"id": node_id, "label": "SESSION", "properties": dict(metadata)})))
    nodes += [(f"session:{s}", None, _document({"id": f"session:{s}", "label": "SESSION",
                                               "properties": {"minimal": True}}))
              for s in plan.minimal_sessions]
    edges += [(source, _memory_id(target), kind, weight, json.loads(props))
              for source, target, kind, weight, props in plan.edges]
    conn.execute("BEGIN IMMEDIATE")
    conn.executemany("INSERT INTO Nodes (id, user_id, data) VALUES (?, ?, ?) "
                     "ON CONFLICT(id) DO NOTHING", nodes)
    keys = json.dumps(sorted({(e[0], e[1], e[2]) for e in edges}))
    found: dict[tuple[str, str, str], tuple[str, dict[str, Any]]] = {}
    for edge_id, source, target, kind, data in conn.execute(
            "SELECT id, source, target, type, data FROM Edges WHERE (source, target, type) IN "
            "(SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]'), "
            "json_extract(value, '$[2]') FROM json_each(?)) ORDER BY rowid", (keys,)):
        found.setdefault((source, target, kind), (edge_id, json.loads(data)))
    inserts, updates = [], []
    for source, target, kind, weight, props in edges:
        if (source, target, kind) in found:
            edge_id, document = found[(source, target, kind)]
            stored = document["properties"].get("weight") or 1.0
            document["properties"].update(props, weight=min(stored + weight * REINFORCE_FACTOR,
                                                            5.0))
            updates.append((_document(document), edge_id))
        else:
            edge_id = str(uuid.uuid4())
            inserts.append((edge_id, None, source, target, kind, _document(
                {"id": edge_id, "source": source, "target": target, "type": kind,
                 "properties": {"weight": weight, **props}})))
    conn.executemany("INSERT INTO Edges (id, user_id, source, target, type, data) "
                     "VALUES (?, ?, ?, ?, ?, ?)", inserts)
    conn.executemany("UPDATE Edges SET data = ? WHERE id = ?", updates)
    conn.execute("COMMIT")
    measure.stop()
    conn.close()
    return {**measure.figures(), "linked": len(plan.edges), "unresolved": None,
            "malformed": None}


def run_contender(name: str, root: Path) -> dict[str, Any]:
    """(child) One contender on `root`, and what it left in the graph."""
    set_up_child()
    vars(drain_bench).update(settings_for=neo_settings, run_floor=run_floor)
    return drain_bench.run_contender(name, root)


def run_neo_benchmark(sizes: drain_bench.DrainSizes, *, repeats: int = 1) -> dict[str, Any]:
    """Seed once, run each contender on its own fresh copy (best of `repeats`), compare."""
    result = drain_bench.run_variant(MODULE, "drain-neo", sizes, repeats=repeats,
                                     contenders=CONTENDERS)
    for target in result["targets"]:
        target["name"] = target["name"].replace("drain:", "drain (neo.mjs graph):", 1)
    return result


def table(result: dict[str, Any]) -> str:
    """The neo drain section of the printed table."""
    return drain_bench.table(result).replace(
        "Drain:", "Drain on a neo.mjs graph (E3: Nodes/Edges documents, GraphLog triggers):", 1)


def main(argv: Sequence[str] | None = None) -> int:
    """Child or parent, by flags."""
    parser = argparse.ArgumentParser(prog=f"python -m {MODULE}", description=__doc__)
    parser.add_argument("--smoke", action="store_true", help="tiny sizes (seconds)")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--seed", type=Path, metavar="ROOT", help="(child) seed a store")
    parser.add_argument("--contender", choices=CONTENDERS, help="(child) run one contender")
    parser.add_argument("--data", type=Path, metavar="ROOT", help="(child) the seeded root")
    for flag in ("lines", "memories", "summaries", "concepts"):
        parser.add_argument(f"--{flag}", type=int, default=getattr(drain_bench.FULL_SIZES, flag),
                            help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.seed is not None:
        set_up_child()
        sizes = drain_bench.DrainSizes(args.lines, args.memories, args.summaries, args.concepts)
        emit_report(seed_store(args.seed, sizes))
        return 0
    if args.contender is not None:
        if args.data is None:
            parser.error("--contender needs --data ROOT")
        emit_report(run_contender(args.contender, args.data))
        return 0
    result = run_neo_benchmark(
        drain_bench.SMOKE_SIZES if args.smoke else drain_bench.FULL_SIZES, repeats=args.repeats)
    print(table(result))
    emit_report(result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
