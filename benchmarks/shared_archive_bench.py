"""What the shared archive copy costs a tombstoning pass on PostgreSQL (issue 27).

    python -m benchmarks.shared_archive_bench [--shapes 1x10000,100x100,1000x10] [--repeats N]

For each shape (tenants x stale chunks per tenant, 384-number embeddings), one embedded Chroma
is seeded once and copied for every run; each run is one real reconcile pass (the `--tick`
path) on a fresh database of a throwaway PostgreSQL 15 cluster with `fsync` and
`synchronous_commit` on (the copy's commit waits for the disk, as in production), deleting
every chunk. The pass is timed with the shared copy (`SharedArchives.store`, timed on its own
too) and without it (the target's `shared` taken away: the file archive alone, as SQLite mode
does). Figures go to docs/beyond-one-machine.md ("Archives"); the 2-core machine is shared,
so take the median of a few repeats.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.harness import make_workdir, remove_tree, set_up_child
from benchmarks.postgres_cluster import PostgresServer

os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")

EMBEDDING_DIM = 384
SEED_BATCH = 2_000
DEFAULT_SHAPES = ((1, 10_000), (100, 100), (1_000, 10))


def _parse_shapes(text: str) -> list[tuple[int, int]]:
    shapes = []
    for item in text.split(","):
        tenants, chunks = item.lower().split("x")
        shapes.append((int(tenants), int(chunks)))
    return shapes


async def _seed_chroma(root: Path, tenants: int, chunks: int) -> None:
    import numpy as np

    from core.base.chroma import VectorStore
    from core.base.rules.rows import ChromaRow
    from tests.support import make_settings

    settings = make_settings(root)
    vectors = await VectorStore.open(settings.chroma)
    rng = np.random.default_rng(27)
    try:
        rows: list[ChromaRow] = []
        for t in range(tenants):
            for c in range(chunks):
                rows.append(ChromaRow(
                    f"t{t}-c{c}", {"tenantId": f"t{t}", "tenantConfigVersion": 1,
                                   "ingestedAt": 1_000 + c, "sourcePath": f"docs/{c}.md"},
                    f"chunk {c} of tenant {t} " * 8,
                    rng.random(EMBEDDING_DIM, dtype=np.float32).tolist()))
                if len(rows) >= SEED_BATCH:
                    await vectors.upsert(settings.chroma.knowledge_base_collection, rows,
                                         create=True)
                    rows = []
        if rows:
            await vectors.upsert(settings.chroma.knowledge_base_collection, rows, create=True)
    finally:
        await vectors.close()


async def _one_pass(root: Path, url: str, tenants: int, *, shared: bool) -> dict[str, Any]:
    from core.base.chroma import VectorStore
    from core.base.rules.tenants import TENANT_CONFIG_LABEL
    from core.base.runtime.context import TickContext
    from core.base.state.graph import upsert_node
    from core.base.state.state import open_graph
    from core.reconcile import deletion_plans
    from core.reconcile.run_pass import reconcile_tick
    from core.reconcile.stores.archives import shared as shared_archives
    from core.suite.tick import run_tick
    from tests.support import make_settings

    settings = make_settings(root, stateUrl=url, reconciliationEnabled=True,
                             reconciliationAutoTombstone=True,
                             reconciliationMaxStaleFraction=1.0)
    graph = await open_graph(settings.state)
    vectors = await VectorStore.open(settings.chroma)
    spent = [0.0]
    real_store = shared_archives.SharedArchives.store
    real_choice = getattr(deletion_plans, "shared_archives")  # noqa: B009

    async def timed_store(self: Any, archives: Sequence[Any]) -> None:
        started = time.perf_counter()
        try:
            await real_store(self, archives)
        finally:
            spent[0] += time.perf_counter() - started

    shared_archives.SharedArchives.store = timed_store  # type: ignore[method-assign]
    if not shared:
        setattr(deletion_plans, "shared_archives", lambda _s, _g: None)  # noqa: B010
    try:
        for t in range(tenants):
            await upsert_node(graph, f"kb-config:t{t}", TENANT_CONFIG_LABEL,
                              {"version": 3, "repoSlug": f"t{t}/repo"})
        started = time.perf_counter()
        figures = (await run_tick("reconcile", TickContext(settings, graph, vectors),
                                  reconcile_tick, dry_run=False)).json()
        elapsed = time.perf_counter() - started
        size = (await graph.query("SELECT COALESCE(sum(size), 0) FROM tombstone_archives"))[0][0]
    finally:
        shared_archives.SharedArchives.store = real_store  # type: ignore[method-assign]
        setattr(deletion_plans, "shared_archives", real_choice)  # noqa: B010
        await vectors.close()
        await graph.close()
    return {"passS": round(elapsed, 3), "copyS": round(spent[0], 3),
            "tombstoned": figures["tombstonedCount"], "sharedMiB": round(int(size) / 2**20, 1)}


def run(shapes: Sequence[tuple[int, int]], repeats: int) -> dict[str, Any]:
    """The figures per shape: the median pass with and without the copy, and the copy's
    own time."""
    server = PostgresServer(durable=True, prefix="kb-bench-archives-")
    server.start()
    work = make_workdir("shared-archives")
    report: dict[str, Any] = {}
    databases = iter(range(1, 1_000_000))
    try:
        for tenants, chunks in shapes:
            template = work / f"seed-{tenants}x{chunks}"
            asyncio.run(_seed_chroma(template, tenants, chunks))
            runs: dict[str, list[dict[str, Any]]] = {"with": [], "without": []}
            for _ in range(repeats):
                for variant in ("with", "without"):
                    root = work / "run"
                    remove_tree(root)
                    shutil.copytree(template, root)
                    url = server.create_database(f"bench{next(databases)}")
                    runs[variant].append(asyncio.run(
                        _one_pass(root, url, tenants, shared=variant == "with")))
            with_s = statistics.median(r["passS"] for r in runs["with"])
            without_s = statistics.median(r["passS"] for r in runs["without"])
            report[f"{tenants}x{chunks}"] = {
                "passWithCopyS": with_s, "passWithoutCopyS": without_s,
                "copyS": statistics.median(r["copyS"] for r in runs["with"]),
                "sharedMiB": runs["with"][0]["sharedMiB"],
                "tombstoned": runs["with"][0]["tombstoned"]}
            remove_tree(template)
    finally:
        remove_tree(work)
        server.stop()
    return report


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="benchmarks.shared_archive_bench")
    parser.add_argument("--shapes", type=_parse_shapes,
                        default=list(DEFAULT_SHAPES), help="TENANTSxCHUNKS,...")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    set_up_child()
    home = make_workdir("home")  # nothing may land under the real $HOME
    os.environ["HOME"] = str(home)
    try:
        report = run(args.shapes, args.repeats)
    finally:
        remove_tree(home)
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
