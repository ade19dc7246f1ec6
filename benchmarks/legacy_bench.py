"""What the legacy path costs per chunk (issue 25): one tombstoning pass over N config-stale
chunks whose `ingestedAt` is an ISO string or absent (deleted by id: `legacy_bands`), against
the same pass over N chunks with a numeric `ingestedAt` (deleted by `ingestedAt` bands), each
on a fresh embedded store in a temp folder, in this process.

    python -m benchmarks.legacy_bench [--chunks 10000] [--repeats 2]

Prints one line per path (best run, µs per chunk) and the ratio, then one JSON object. `make
bench` runs it as a child (`--only legacy`: FULL_CHUNKS; `--smoke`: SMOKE_CHUNKS).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.harness import (
    child_env,
    format_table,
    make_workdir,
    remove_tree,
    run_child,
    set_up_child,
)
from core.base.chroma import VectorStore
from core.base.config.config import resolve_config
from core.base.rules.rows import ChromaRow
from core.base.rules.tenants import TENANT_CONFIG_LABEL
from core.base.runtime.context import TickContext
from core.base.state.graph import upsert_node
from core.base.state.state import open_graph
from core.reconcile.run_pass import reconcile_tick
from core.suite.tick import run_tick

MODULE = "benchmarks.legacy_bench"
KB = "neo-knowledge-base"
#: Chunks per path in `make bench` and in the smoke run.
FULL_CHUNKS = 5_000
SMOKE_CHUNKS = 50
DIM = 384
PATHS = ("band", "legacy")


def metadata(i: int, path: str) -> dict[str, Any]:
    """Chunk i: config-stale (stamp 1 of version 3); its `ingestedAt` as the path needs."""
    meta: dict[str, Any] = {"tenantId": "acme", "repoSlug": "r", "sourcePath": f"p{i // 20}.md",
                            "tenantConfigVersion": 1}
    if path == "band":
        meta["ingestedAt"] = 1_700_000_000_000 + i
    elif i % 2:
        meta["ingestedAt"] = f"2024-01-{1 + i % 28:02}T00:00:00Z"
    return meta


async def one_pass(chunks: int, path: str) -> float:
    """Seconds of one tombstoning pass over `chunks` chunks of this path (seeding untimed)."""
    with tempfile.TemporaryDirectory(prefix="legacy-bench-") as folder:
        loaded = resolve_config({"knowledgeBase": {
            "dataDir": folder, "reconciliationEnabled": True,
            "reconciliationAutoTombstone": True, "reconciliationMaxStaleFraction": 1.0,
            "reconciliationMaxDeletesPerTick": chunks}}, base_dir=Path(folder))
        settings = loaded.settings
        graph = await open_graph(settings.state)
        vectors = await VectorStore.open(settings.chroma)
        try:
            await upsert_node(graph, "kb-config:acme", TENANT_CONFIG_LABEL, {"version": 3})
            rng = random.Random(7)
            for start in range(0, chunks, 5_000):
                await vectors.upsert(KB, [
                    ChromaRow(f"c{i:07}", metadata(i, path), f"doc {i}",
                              [rng.random() for _ in range(DIM)])
                    for i in range(start, min(chunks, start + 5_000))], create=True)
            started = time.perf_counter()
            figures = (await run_tick("reconcile", TickContext(settings, graph, vectors),
                                      reconcile_tick, dry_run=False)).json()
            elapsed = time.perf_counter() - started
            assert figures["tombstonedCount"] == chunks, figures
            return elapsed
        finally:
            await vectors.close()
            await graph.close()


def run_legacy_benchmark(chunks: int, *, repeats: int) -> dict[str, Any]:
    """`make bench`'s legacy section: this module in a child process (its own $HOME)."""
    workdir = make_workdir("legacy")
    try:
        run = run_child(MODULE, ["--chunks", str(chunks), "--repeats", str(repeats)],
                        env=child_env(workdir))
    finally:
        remove_tree(workdir)
    return {**run.report, "targets": []}


def table(result: dict[str, Any]) -> str:
    """The section as printed: each path's µs per chunk, and the ratio."""
    rows = [[p, f"{result['seconds'][p]:.2f}", f"{result['usPerChunk'][p]:.0f}"]
            for p in PATHS]
    return (f"Legacy chunks: {result['chunks']:,} config-stale chunks per path "
            f"(legacy / band: {result['ratio']}x)\n"
            + format_table(["path", "s", "µs per chunk"], rows))


def main(argv: Sequence[str] | None = None) -> int:
    """Run both paths, print the figures and one JSON object."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.legacy_bench")
    parser.add_argument("--chunks", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args(argv)
    set_up_child()
    best = {p: min(asyncio.run(one_pass(args.chunks, p)) for _ in range(args.repeats))
            for p in PATHS}
    per_chunk = {p: best[p] / args.chunks * 1e6 for p in PATHS}
    for p in PATHS:
        print(f"{p:>6}: {best[p]:.2f} s for {args.chunks:,} chunks, {per_chunk[p]:.0f} µs/chunk")
    ratio = per_chunk["legacy"] / per_chunk["band"]
    print(f"legacy / band: {ratio:.2f}x")
    print(json.dumps({"chunks": args.chunks, "seconds": best, "usPerChunk": per_chunk,
                      "ratio": round(ratio, 2)}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
