"""Reconciliation benchmark: one pass over one tenant at several sizes (10% stale), dry and with
tombstones, against the floors of the same storage work, each contender in a child process on
a fresh copy of the same seeded store.

    python -m benchmarks.reconcile_bench [--smoke] [--repeats N] [--sizes 20000,50000]
    python -m benchmarks.reconcile_bench --seed ROOT --size N          # (child) grow a store
    python -m benchmarks.reconcile_bench --contender NAME --data ROOT  # (child) one contender

The contenders:

- **dry**: `core.reconcile.reconcile_tick(stores, dry_run=True)` with tombstoning configured,
  so it also counts the tenant for the stale-fraction guard, as a preview of a real pass would;
- **tombstone**: the same pass for real: per band, archive what the band's `where` returns
  (whole rows), fsync, then delete by that `where`;
- **scan-floor**: a bare paged scan of the rows the pass classifies (the tenant's chunks
  stamped below its current version), metadatas only, at the pass's page size;
- **tombstone-floor**: that scan, then the same deletes by ids in batches of Chroma's maximum,
  with nothing else (no count, no archive read, no archive);
- **where-floor**: that scan, then ONE where-only delete of every actionable chunk (the
  staleness predicate, no bands): what the store's own delete-by-predicate costs against
  deleting by ids, with nothing else.

With a manifest (issue 15): the repo's manifest claims every page but one in MANIFEST_GAP_EVERY
(5% of the chunks orphaned by path) plus one page no chunk carries (a missing path). A tenant
with a manifest is read whole, so the manifest contenders are held against a whole-tenant scan:

- **manifest-dry** / **manifest-tombstone**: the pass, dry and for real (the real one deletes
  the union of config-stale and orphaned chunks: stale bands, then `sourcePath $in` bands);
- **full-scan-floor**: a bare paged scan of every chunk of the tenant, metadatas only;
- **manifest-tombstone-floor**: that scan, then deletes by ids of the same union;
- **in-cost**: what one ids-only `get` whose `where` carries `sourcePath $in` N paths costs
  (N = 1,000, 5,000, 10,000: Chroma 1.5.9 takes 10,000 values, fails at 50,000), against the
  same `get` without the `$in`: the price of naming orphaned paths in a predicate.

Chunks carry synthetic 384-number embeddings (pseudo-random, from a fixed seed: no model is
ever loaded), the size of the platform's default embedding model, because the tombstone
pass reads and archives every embedding it deletes: tiny test embeddings would hide that cost
and its memory.
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.bare_stores import delete_ids, open_chroma, scan_picking, settings_for
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

MODULE = "benchmarks.reconcile_bench"
CONTENDERS = ("dry", "tombstone", "scan-floor", "tombstone-floor", "where-floor",
              "manifest-dry", "manifest-tombstone", "full-scan-floor",
              "manifest-tombstone-floor", "in-cost")
#: Which floor each pass is held against.
FLOOR_OF = {"dry": "scan-floor", "tombstone": "tombstone-floor",
            "manifest-dry": "full-scan-floor", "manifest-tombstone": "manifest-tombstone-floor"}
#: Contenders that record the repo's manifest (untimed) before they run.
WITH_MANIFEST = ("manifest-dry", "manifest-tombstone", "full-scan-floor",
                 "manifest-tombstone-floor", "in-cost")
#: Chunks per source page (`docs/page-<i // PAGE_CHUNKS>.md`).
PAGE_CHUNKS = 20
#: One page in this many is absent from the manifest: 5% of the chunks orphaned by path.
MANIFEST_GAP_EVERY = 20
#: A manifest path no chunk carries.
MISSING_PAGE = "docs/never-ingested.md"
#: Time allowed to grow a store (seeding is not what is measured).
SEED_TIMEOUT_S = 3_600.0
#: `$in` sizes the in-cost contender measures.
IN_SIZES = (1_000, 5_000, 10_000)

#: Issue 9's sizes (chunks of the one tenant) and a smoke pair (two sizes, so growth is
#: computed the same way).
FULL_SIZES = (20_000, 50_000, 100_000)
SMOKE_SIZES = (400, 1_000)
#: One chunk in this many is stale (10%, issue 9).
STALE_EVERY = 10
TENANT = "bench-tenant"
#: The tenant's current config version, and the stamps of its fresh and stale chunks: stale
#: chunks are two versions behind, so with the default gap of 2 every stale chunk is
#: actionable and the tombstone pass deletes all of them.
CURRENT_VERSION = 3
STALE_STAMP = 1
#: A cap no benchmark size reaches: the pass deletes every actionable chunk in one pass.
UNCAPPED_DELETES = 10_000_000
#: Characters of each chunk's document: the size of a small knowledge-base chunk, so that
#: reading documents for the archive costs something real.
DOCUMENT_CHARS = 400
#: Numbers per embedding: all-MiniLM-L6-v2's, Chroma's default model (never loaded here).
EMBEDDING_DIM = 384
#: Seed of the synthetic embeddings (each chunk's vector depends only on its index).
EMBEDDING_SEED = 10_154
#: Issue 9's targets: a pass's time over its floor's, and how much more its peak memory may
#: grow than the floor's.
MAX_OVER_FLOOR = 1.5
MAX_EXTRA_RSS_MIB = 50.0


def chunk_rows(start: int, stop: int) -> list[tuple[str, dict[str, Any], str]]:
    """Chunks `start`..`stop` of the tenant (pure): id, metadata, document."""
    rows = []
    for i in range(start, stop):
        stamp = STALE_STAMP if i % STALE_EVERY == 0 else CURRENT_VERSION
        rows.append((f"chunk-{i:07d}", {
            "tenantId": TENANT, "repoSlug": f"{TENANT}/docs", "tenantConfigVersion": stamp,
            "sourcePath": page_path(i // PAGE_CHUNKS), "ingestedAt": 1_714_000_000_000 + i,
        }, (f"Chunk {i} of the knowledge base. " * 20)[:DOCUMENT_CHARS]))
    return rows


def embeddings(start: int, stop: int) -> list[list[float]]:
    """Synthetic embeddings of chunks `start`..`stop` (pure; the same for a chunk however the
    store was grown)."""
    import numpy as np

    return [np.random.default_rng([EMBEDDING_SEED, i]).random(EMBEDDING_DIM,
                                                               dtype=np.float32).tolist()
            for i in range(start, stop)]


def stale_count(size: int) -> int:
    """How many of the first `size` chunks are stale."""
    return len(range(0, size, STALE_EVERY))


def page_path(page: int) -> str:
    """The source path of a page of chunks."""
    return f"docs/page-{page:05d}.md"


def orphaned_page(page: int) -> bool:
    """Whether the manifest leaves this page out."""
    return page % MANIFEST_GAP_EVERY == MANIFEST_GAP_EVERY // 2


def manifest_counts(size: int) -> dict[str, int]:
    """What the manifest pass must find among the first `size` chunks (pure): manifest orphans
    and the union with the stale ones (each chunk once)."""
    orphans = [i for i in range(size) if orphaned_page(i // PAGE_CHUNKS)]
    both = sum(1 for i in orphans if i % STALE_EVERY == 0)
    return {"orphans": len(orphans), "union": stale_count(size) + len(orphans) - both}


def manifest_paths(size: int) -> list[str]:
    """The manifest of a store of `size` chunks: every page but the orphaned ones, plus one
    page no chunk carries."""
    pages = range((size + PAGE_CHUNKS - 1) // PAGE_CHUNKS)
    return [page_path(p) for p in pages if not orphaned_page(p)] + [MISSING_PAGE]


async def record_manifest(root: Path, size: int) -> None:
    """(child, untimed) Record the repo's manifest, as `tenants set-manifest` would."""
    from core.base.io.clock import now_ms
    from core.base.state.state import open_graph
    from core.reconcile.rules.manifests import RepoManifest, claimed_paths
    from core.reconcile.stores.tenant_manifests import set_tenant_manifest

    settings = settings_for(root)
    graph = await open_graph(settings.state)
    try:
        await set_tenant_manifest(graph, TENANT, RepoManifest(
            f"{TENANT}/docs", claimed_paths(manifest_paths(size)), now_ms()))
    finally:
        await graph.close()


# ------------------------------------------------------------------------------------------
# Children
# ------------------------------------------------------------------------------------------


async def grow_store(root: Path, size: int) -> dict[str, Any]:
    """(child) Add chunks to `root` until its tenant has `size`; give the tenant its config
    (version CURRENT_VERSION) the first time."""
    from core.base.chroma import VectorStore
    from core.base.rules.rows import ChromaRow
    from core.base.state.state import open_graph
    from core.base.state.tenants import set_tenant_config, tenant_version

    settings = settings_for(root)
    graph = await open_graph(settings.state)
    try:
        while await tenant_version(graph, TENANT) < CURRENT_VERSION:
            await set_tenant_config(graph, TENANT, repo_slug=f"{TENANT}/docs")
    finally:
        await graph.close()
    vectors = await VectorStore.open(settings.chroma)
    try:
        await vectors.ensure_collection(settings.chroma.knowledge_base_collection)
        present = await vectors.count(settings.chroma.knowledge_base_collection)
        # One write batch at a time: 100,000 embeddings as Python floats would take ~1 GB.
        for start in range(present, size, vectors.max_batch):
            stop = min(start + vectors.max_batch, size)
            await vectors.upsert(settings.chroma.knowledge_base_collection, [
                ChromaRow(row_id, metadata, document, embedding)
                for (row_id, metadata, document), embedding
                in zip(chunk_rows(start, stop), embeddings(start, stop), strict=True)
            ])
        total = await vectors.count(settings.chroma.knowledge_base_collection)
    finally:
        await vectors.close()
    return {"chunks": total, "stale": stale_count(total)}


async def run_pass(root: Path, *, dry_run: bool) -> dict[str, Any]:
    """(child) One reconciliation pass, as the daemon runs it (stores opened untimed)."""
    from core.base.rules.camel_json import to_json
    from core.reconcile.run_pass import reconcile_tick
    from core.suite.tick import open_context

    settings = settings_for(root, reconciliationEnabled=True, reconciliationAutoTombstone=True,
                            reconciliationMaxDeletesPerTick=UNCAPPED_DELETES,
                            reconciliationManifestGraceMs=0)
    measure = Measure()
    async with open_context(settings, dry_run=dry_run) as stores:
        measure.start()
        figures = to_json(await reconcile_tick(stores, dry_run))
        measure.stop()
        remaining = await stores.vectors.count(settings.chroma.knowledge_base_collection)
    [tenant] = figures["tenants"]
    return {**measure.figures(), "scanned": tenant["scanned"], "stale": tenant["staleCount"],
            "orphans": tenant["manifestOrphanCount"], "union": tenant["totalOrphanCount"],
            "missing": tenant["missingPathCount"], "tombstoned": tenant["tombstonedCount"],
            "remaining": remaining, "failedTenants": figures["failedTenants"]}


def run_floor(root: Path, *, delete: str | None) -> dict[str, Any]:
    """(child) The bare paged scan of the pass's candidate rows, then (`delete`) the deletes
    by ids ("ids") or one where-only delete of the actionable chunks ("where"); nothing
    else."""
    from core.reconcile.rules.reconcile import actionable_stamp_ceiling, candidate_where

    settings = settings_for(root)
    client = open_chroma(settings)
    measure = Measure()
    measure.start()
    collection = client.get_collection(settings.chroma.knowledge_base_collection,
                                       embedding_function=None)
    scanned, doomed = scan_picking(collection, candidate_where(TENANT, CURRENT_VERSION),
                                   (lambda _m: True) if delete == "ids" else None)
    tombstoned = delete_ids(collection, doomed, batch=int(client.get_max_batch_size()))
    if delete == "where":
        ceiling = actionable_stamp_ceiling(CURRENT_VERSION, 2)
        tombstoned = collection.delete(where={"$and": [
            {"tenantId": TENANT}, {"tenantConfigVersion": {"$lte": ceiling}}]})["deleted"]
    measure.stop()
    return {**measure.figures(), "scanned": scanned, "stale": scanned, "tombstoned": tombstoned,
            "remaining": int(collection.count()), "failedTenants": 0}


def run_full_floor(root: Path, *, delete: bool) -> dict[str, Any]:
    """(child) The bare paged scan of every chunk of the tenant (what a pass with a manifest
    reads), then (`delete`) deletes by ids of the stale and orphaned ones; nothing else."""
    settings = settings_for(root)
    client = open_chroma(settings)
    gone = {page_path(p) for p in range(10**6) if orphaned_page(p)}
    measure = Measure()
    measure.start()
    collection = client.get_collection(settings.chroma.knowledge_base_collection,
                                       embedding_function=None)
    scanned, doomed = scan_picking(
        collection, {"tenantId": TENANT},
        (lambda m: m["tenantConfigVersion"] < CURRENT_VERSION or m["sourcePath"] in gone)
        if delete else None)
    tombstoned = delete_ids(collection, doomed, batch=int(client.get_max_batch_size()))
    measure.stop()
    return {**measure.figures(), "scanned": scanned, "tombstoned": tombstoned,
            "remaining": int(collection.count()), "failedTenants": 0}


def run_in_cost(root: Path) -> dict[str, Any]:
    """(child) One ids-only `get` per `$in` size (N orphaned-looking paths, the first ones
    real), and the same `get` without `$in`, timed apart."""
    import time

    settings = settings_for(root)
    client = open_chroma(settings)
    collection = client.get_collection(settings.chroma.knowledge_base_collection,
                                       embedding_function=None)
    base = [{"tenantId": TENANT}, {"repoSlug": f"{TENANT}/docs"}]
    measure = Measure()
    measure.start()
    seconds: dict[str, float] = {}
    for n in (0, *IN_SIZES):
        paths = [page_path(p) for p in range(n)]
        where = {"$and": [*base, {"sourcePath": {"$in": paths}}]} if n else {"$and": base}
        started = time.perf_counter()
        matched = len(collection.get(where=where, include=[])["ids"])
        seconds[f"in{n}" if n else "noIn"] = round(time.perf_counter() - started, 4)
        seconds[f"in{n}Matched" if n else "noInMatched"] = matched
    measure.stop()
    return {**measure.figures(), **seconds, "scanned": 0, "tombstoned": 0,
            "remaining": int(collection.count()), "failedTenants": 0}


def run_contender(name: str, root: Path, size: int) -> dict[str, Any]:
    """(child) Run one contender on `root` (a store of `size` chunks)."""
    set_up_child()
    if name in WITH_MANIFEST:
        asyncio.run(record_manifest(root, size))
    if name in ("dry", "tombstone", "manifest-dry", "manifest-tombstone"):
        figures = asyncio.run(run_pass(root, dry_run=name.endswith("dry")))
    elif name in ("scan-floor", "tombstone-floor", "where-floor"):
        figures = run_floor(root, delete={"tombstone-floor": "ids",
                                          "where-floor": "where"}.get(name))
    elif name in ("full-scan-floor", "manifest-tombstone-floor"):
        figures = run_full_floor(root, delete=name == "manifest-tombstone-floor")
    elif name == "in-cost":
        figures = run_in_cost(root)
    else:
        raise ValueError(f"unknown contender {name!r}")
    return {"contender": name, **figures}


def expected_figures(name: str, size: int) -> dict[str, int]:
    """What a contender that did its work reports for a store of `size` chunks."""
    stale, counts = stale_count(size), manifest_counts(size)
    if name == "in-cost":
        return {"remaining": size, "failedTenants": 0}
    if name in ("full-scan-floor", "manifest-tombstone-floor"):
        gone = counts["union"] if name == "manifest-tombstone-floor" else 0
        return {"scanned": size, "tombstoned": gone, "remaining": size - gone,
                "failedTenants": 0}
    if name.startswith("manifest-"):
        gone = counts["union"] if name == "manifest-tombstone" else 0
        return {"scanned": size, "stale": stale, "orphans": counts["orphans"],
                "union": counts["union"], "missing": 1, "tombstoned": gone,
                "remaining": size - gone, "failedTenants": 0}
    gone = stale if name in ("tombstone", "tombstone-floor", "where-floor") else 0
    return {"stale": stale, "tombstoned": gone, "remaining": size - gone, "failedTenants": 0}


# ------------------------------------------------------------------------------------------
# The benchmark (parent)
# ------------------------------------------------------------------------------------------


def run_reconcile_benchmark(sizes: Sequence[int], *, repeats: int = 1,
                            contenders: Sequence[str] = CONTENDERS) -> dict[str, Any]:
    """Grow one store through the sizes (seeding costs ~3,500 rows/s, so each size adds only
    what the previous one lacks and is copied aside), then run every contender on a fresh copy
    of each size (best of `repeats`, taken in turns)."""
    sizes = sorted(sizes)
    workdir = make_workdir("reconcile")
    try:
        env = child_env(workdir)
        grow = workdir / "grow"
        for size in sizes:
            progress(f"reconcile: seeding {size:,} chunks")
            # Seeding is not measured; on a busy machine 100,000 chunks took over 600 s.
            run_child(MODULE, ["--seed", str(grow), "--size", str(size)], env=env,
                      timeout_s=SEED_TIMEOUT_S)
            copy_data(grow, workdir / f"seed-{size}")
        remove_tree(grow)
        runs: dict[int, dict[str, list[ChildRun]]] = {}
        for size in sizes:
            runs[size] = {name: [] for name in contenders}
            for turn in range(repeats):
                for name in contenders:
                    root = copy_data(workdir / f"seed-{size}", workdir / f"{name}-{size}")
                    progress(f"reconcile: {name} at {size:,} (run {turn + 1}/{repeats})")
                    runs[size][name].append(run_child(
                        MODULE, ["--contender", name, "--data", str(root), "--size",
                                 str(size)], env=env))
                    remove_tree(root)
            remove_tree(workdir / f"seed-{size}")
        return summarize(sizes, runs)
    finally:
        remove_tree(workdir)


def summarize(sizes: Sequence[int], runs: dict[int, dict[str, list[ChildRun]]]
              ) -> dict[str, Any]:
    """Per size and contender: best run; the pass/floor ratios, growth and memory targets;
    and whether each contender did its work (stale chunks found, and deleted when it should)."""
    by_size: dict[str, dict[str, dict[str, Any]]] = {}
    problems: list[str] = []
    for size in sizes:
        entry: dict[str, dict[str, Any]] = {}
        for name, child_runs in runs[size].items():
            best = min(child_runs, key=lambda r: float(r.report["inProcessS"]))
            report = {**best.report, "wholeProcessS": round(best.wall_s, 3),
                      "inProcessRunsS": [float(r.report["inProcessS"]) for r in child_runs]}
            entry[name] = report
            problems += [f"{name} at {size}: {key} {report.get(key)} != expected {value}"
                         for key, value in expected_figures(name, size).items()
                         if report.get(key) != value]
        by_size[str(size)] = entry
    targets: list[Target] = []
    smallest, largest = str(sizes[0]), str(sizes[-1])
    growth: dict[str, float] = {}
    for name, floor in FLOOR_OF.items():
        if name not in runs[sizes[0]] or floor not in runs[sizes[0]]:
            continue
        for size in sizes:
            entry = by_size[str(size)]
            entry[name]["overFloor"] = round(ratio(entry[name]["inProcessS"],
                                                   entry[floor]["inProcessS"]), 3)
            targets.append(Target(f"reconcile {name} at {size:,}: time / {floor}",
                                  entry[name]["overFloor"], MAX_OVER_FLOOR, unit="x"))
            extra = entry[name]["peakRssGrowthMiB"] - entry[floor]["peakRssGrowthMiB"]
            targets.append(Target(f"reconcile {name} at {size:,}: peak RSS growth over "
                                  f"{floor}'s", extra, MAX_EXTRA_RSS_MIB, unit=" MiB"))
        for contender in (name, floor):
            growth[contender] = round(ratio(by_size[largest][contender]["inProcessS"],
                                            by_size[smallest][contender]["inProcessS"]), 3)
        if len(sizes) > 1:
            targets.append(Target(
                f"reconcile {name}: time growth {int(smallest):,} -> {int(largest):,} "
                f"(limit: {floor}'s)", growth[name], growth[floor], unit="x"))
    # What deleting by the store's predicate costs against deleting by ids (a figure, not a
    # target): the where-floor over the tombstone-floor, per size.
    where_over_ids = {
        size: round(ratio(entry["where-floor"]["inProcessS"],
                          entry["tombstone-floor"]["inProcessS"]), 3)
        for size, entry in by_size.items()
        if "where-floor" in entry and "tombstone-floor" in entry
    }
    in_cost = {size: {k: v for k, v in entry["in-cost"].items()
                      if k == "noIn" or (k.startswith("in") and k[2:].isdigit())}
               for size, entry in by_size.items() if "in-cost" in entry}
    return {
        "sizes": list(sizes),
        "staleShare": 1 / STALE_EVERY,
        "orphanedShare": 1 / MANIFEST_GAP_EVERY,
        "inCostS": in_cost,
        "runs": by_size,
        "timeGrowth": growth,
        "whereFloorOverTombstoneFloor": where_over_ids,
        "consistent": not problems,
        "problems": problems,
        "targets": [t.as_dict() for t in targets],
    }


def table(result: dict[str, Any]) -> str:
    """The reconciliation section of the printed table."""
    rows = []
    for size, entry in result["runs"].items():
        for name, c in entry.items():
            rows.append([f"{int(size):,}", name, c["inProcessS"], c.get("overFloor", ""),
                         c["wholeProcessS"], c["peakRssGrowthMiB"], c.get("stale", ""),
                         c.get("orphans", ""), c["tombstoned"]])
    head = (f"Reconciliation: one tenant, {result['staleShare']:.0%} stale; the manifest "
            f"contenders also {result['orphanedShare']:.0%} orphaned by path "
            f"(in-process s; x floor: the pass over its floor)")
    body = format_table(["chunks", "contender", "in-process s", "x floor", "whole-process s",
                         "peak RSS +MiB", "stale", "orphans", "tombstoned"], rows)
    growth = ", ".join(f"{name} {value:.2f}x" for name, value in result["timeGrowth"].items())
    where = ", ".join(f"{int(size):,}: {value:.2f}x"
                      for size, value in result.get("whereFloorOverTombstoneFloor", {}).items())
    in_cost = "; ".join(f"{int(size):,}: " + ", ".join(f"{k} {v:.3f}s" for k, v in c.items())
                        for size, c in result.get("inCostS", {}).items())
    tail = [f"time growth smallest -> largest size: {growth}",
            f"ids-only get with sourcePath $in N paths (noIn: without): {in_cost or '-'}",
            f"where-only delete floor over the delete-by-ids floor: {where or '-'}",
            f"consistent (every contender did its work): {result['consistent']}"]
    return "\n".join([head, body, *tail])


def build_parser() -> argparse.ArgumentParser:
    """Parent flags and the children's."""
    parser = argparse.ArgumentParser(prog=f"python -m {MODULE}", description=__doc__)
    parser.add_argument("--smoke", action="store_true", help="tiny sizes (seconds)")
    parser.add_argument("--repeats", type=int, default=1,
                        help="runs per contender and size; the best is reported")
    parser.add_argument("--sizes", help="comma-separated chunk counts (default: 20k, 50k, 100k)")
    parser.add_argument("--contenders", default=",".join(CONTENDERS),
                        help="comma-separated subset to run (default: all)")
    parser.add_argument("--seed", type=Path, metavar="ROOT", help="(child) grow a store")
    parser.add_argument("--size", type=int, help="(child) chunks to grow the store to")
    parser.add_argument("--contender", choices=CONTENDERS, help="(child) run one contender")
    parser.add_argument("--data", type=Path, metavar="ROOT", help="(child) the seeded root")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Child or parent, by flags."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.seed is not None:
        if args.size is None:
            parser.error("--seed needs --size N")
        set_up_child()
        emit_report(asyncio.run(grow_store(args.seed, args.size)))
        return 0
    if args.contender is not None:
        if args.data is None or args.size is None:
            parser.error("--contender needs --data ROOT --size N")
        emit_report(run_contender(args.contender, args.data, args.size))
        return 0
    sizes: Sequence[int] = SMOKE_SIZES if args.smoke else FULL_SIZES
    if args.sizes:
        sizes = [int(s) for s in args.sizes.split(",") if s]
    chosen = [c for c in args.contenders.split(",") if c]
    if not chosen or set(chosen) - set(CONTENDERS):
        parser.error(f"--contenders: choose from {CONTENDERS}")
    result = run_reconcile_benchmark(sizes, repeats=args.repeats, contenders=chosen)
    print(table(result))
    emit_report(result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
