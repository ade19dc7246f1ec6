"""Fleet-scale reconciliation benchmark: one pass over many tenants sharing one collection,
dry and with tombstones, against the bare floors of the same collection, each contender in a
child process on a fresh copy of the same seeded store.

    python -m benchmarks.scale_bench [--scale quick|full|smoke] [--repeats N] [--shapes 1000x100000]
    python -m benchmarks.scale_bench --seed ROOT --tenants T --chunks N        # (child)
    python -m benchmarks.scale_bench --contender NAME --data ROOT --tenants T  # (child)

A shape is `tenants x chunks in all`: every tenant holds chunks / tenants chunks, one in ten
stamped two versions behind its tenant's current version (so, with the default gap of 2,
every stale chunk is actionable and a tombstoning pass deletes all of them; 10% of a tenant
is under the default stale-fraction limit). `quick` (what `make bench` runs): 1 / 100 / 1,000
/ 10,000 tenants at 100,000 chunks in all; `full` adds 1,000,000 chunks for one tenant and
for 10,000 tenants.

The contenders:

- **dry**: `reconcile_tick(dry_run=True)` with tombstoning configured, so it also counts the
  tenants for the stale-fraction guard, as a preview of a real pass would;
- **tombstone**: the same pass for real (archives written, deletes by the bands' `where`);
- **scan-floor**: ONE bare paged scan of the whole collection (metadatas only, the pass's
  page size, no `where`): what reading every chunk once costs, whoever owns it;
- **tombstone-floor**: that scan, then the deletes of the stale chunks it found by ids in
  batches of Chroma's maximum, with nothing else (no count, no archive).

Every contender is measured as a daemon's passes after its first are: the store open and the
collection already touched once (untimed). Embedded Chroma loads a collection's whole vector
index (vectors and id maps) into memory on the first read of any kind, a `count` too, and keeps
it while the client is open: at 1,000,000 chunks of 8 numbers that load alone is ~550 MB, the
same for every contender, and it is the store's resident cost, not a pass's. It is reported
apart (`storeLoadMiB`, `storeLoadS`); the peak RSS growth is the pass's own (the peak is reset
at its start: `benchmarks.harness.reset_peak_rss`).

Embeddings are small (8 numbers, pseudo-random from a fixed seed): no contender here reads an
embedding except the tombstoning pass's archive, and seeding a million 384-number rows would
take most of an hour. The embedding's cost to an archive is measured by
`benchmarks.reconcile_bench`, which uses 384 numbers.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
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
    reset_peak_rss,
    run_child,
    set_up_child,
    window_peak_rss_mib,
)

MODULE = "benchmarks.scale_bench"
CONTENDERS = ("dry", "tombstone", "scan-floor", "tombstone-floor")
#: Which floor each pass is held against.
FLOOR_OF = {"dry": "scan-floor", "tombstone": "tombstone-floor"}
#: Shapes (tenants, chunks in all) per scale.
SCALES: dict[str, tuple[tuple[int, int], ...]] = {
    "smoke": ((20, 600),),
    "quick": ((1, 100_000), (100, 100_000), (1_000, 100_000), (10_000, 100_000)),
    "full": ((1, 100_000), (100, 100_000), (1_000, 100_000), (10_000, 100_000),
             (1, 1_000_000), (10_000, 1_000_000)),
}
#: One chunk in this many is stale.
STALE_EVERY = 10
CURRENT_VERSION = 3
STALE_STAMP = 1
#: A cap no shape reaches per tenant: the pass deletes every actionable chunk.
UNCAPPED_DELETES = 10_000_000
DOCUMENT_CHARS = 200
#: Numbers per embedding: small on purpose (module docstring).
EMBEDDING_DIM = 8
EMBEDDING_SEED = 10_171
#: Issue 17's targets: a pass over its floor at 1,000 tenants; 10,000 tenants no slower per
#: chunk than 1,000 (with a noise margin: the machine is shared); peak RSS growth at
#: 1,000,000 chunks.
MAX_OVER_FLOOR = 1.5
TARGET_TENANTS = 1_000
MAX_PER_CHUNK_GROWTH = 1.1
MAX_RSS_GROWTH_MIB = 150.0
MILLION = 1_000_000
#: A 1,000,000-chunk child (seeding, or a pass and its floor, each reading every chunk by
#: offset pages) can take many minutes on a busy 2-core machine.
SCALE_CHILD_TIMEOUT_S = 3_600.0


def tenant_name(index: int) -> str:
    """The id of tenant `index`."""
    return f"tenant-{index:05d}"


def chunk_rows(start: int, stop: int, per_tenant: int) -> list[tuple[str, dict[str, Any], str]]:
    """Chunks `start`..`stop` (pure): id, metadata, document; chunk i belongs to tenant
    i // per_tenant and is stale when its index within its tenant is a multiple of
    STALE_EVERY."""
    rows = []
    for i in range(start, stop):
        tenant = tenant_name(i // per_tenant)
        stamp = STALE_STAMP if (i % per_tenant) % STALE_EVERY == 0 else CURRENT_VERSION
        rows.append((f"chunk-{i:07d}", {
            "tenantId": tenant, "repoSlug": f"{tenant}/docs", "tenantConfigVersion": stamp,
            "sourcePath": f"docs/page-{i // 20:06d}.md", "ingestedAt": 1_714_000_000_000 + i,
        }, (f"Chunk {i} of the knowledge base. " * 10)[:DOCUMENT_CHARS]))
    return rows


def stale_count(tenants: int, chunks: int) -> int:
    """Stale chunks of a shape."""
    per_tenant = chunks // tenants
    return tenants * len(range(0, per_tenant, STALE_EVERY))


# ------------------------------------------------------------------------------------------
# Children
# ------------------------------------------------------------------------------------------


async def seed_store(root: Path, tenants: int, chunks: int) -> dict[str, Any]:
    """(child) Write the shape: every tenant's config node at CURRENT_VERSION (one
    transaction), then the chunks, one write batch at a time."""
    import numpy as np

    from core.base.chroma import VectorStore
    from core.base.rules.nodes import NodeRow
    from core.base.rules.rows import ChromaRow
    from core.base.rules.tenants import TENANT_CONFIG_LABEL, tenant_config_node_id
    from core.base.state.graph import upsert_nodes
    from core.base.state.state import open_graph

    settings = settings_for(root)
    graph = await open_graph(settings.state)
    try:
        async with graph.write() as tx:
            await upsert_nodes(tx, [NodeRow(
                tenant_config_node_id(tenant_name(t)), TENANT_CONFIG_LABEL,
                {"tenantId": tenant_name(t), "version": CURRENT_VERSION,
                 "repoSlug": f"{tenant_name(t)}/docs", "updatedAt": 1_714_000_000_000})
                for t in range(tenants)])
    finally:
        await graph.close()
    per_tenant = chunks // tenants
    vectors = await VectorStore.open(settings.chroma)
    rng = np.random.default_rng(EMBEDDING_SEED)
    try:
        await vectors.ensure_collection(settings.chroma.knowledge_base_collection)
        for start in range(0, per_tenant * tenants, vectors.max_batch):
            stop = min(start + vectors.max_batch, per_tenant * tenants)
            vectors_batch = rng.random((stop - start, EMBEDDING_DIM), dtype=np.float32).tolist()
            await vectors.upsert(settings.chroma.knowledge_base_collection, [
                ChromaRow(row_id, metadata, document, embedding)
                for (row_id, metadata, document), embedding
                in zip(chunk_rows(start, stop, per_tenant), vectors_batch, strict=True)])
        total = await vectors.count(settings.chroma.knowledge_base_collection)
    finally:
        await vectors.close()
    return {"chunks": total, "stale": stale_count(tenants, chunks)}


async def load_collection(count: Callable[[], Awaitable[int]]) -> dict[str, float]:
    """(child) Touch the collection once, untimed, before a contender runs, and say what that
    cost: embedded Chroma loads a collection's whole vector index into memory on its first
    touch (any read, a `count` too) and keeps it while the client is open. A daemon keeps its
    store open, so every pass after its first finds the index loaded; the contenders are
    measured as those passes are, and the first touch is reported apart (`storeLoad*`)."""
    started = time.perf_counter()
    before = reset_peak_rss()
    await count()
    return {"storeLoadS": round(time.perf_counter() - started, 3),
            "storeLoadMiB": round(window_peak_rss_mib() - before, 1)}


async def run_pass(root: Path, *, dry_run: bool) -> dict[str, Any]:
    """(child) One reconciliation pass over every tenant, as the daemon runs it."""
    from core.base.rules.camel_json import to_json
    from core.reconcile.run_pass import reconcile_tick
    from core.suite.tick import open_context

    settings = settings_for(root, reconciliationEnabled=True, reconciliationAutoTombstone=True,
                            reconciliationMaxDeletesPerTick=UNCAPPED_DELETES)
    measure = Measure()
    async with open_context(settings, dry_run=dry_run) as stores:
        load = await load_collection(lambda: stores.vectors.count(
            settings.chroma.knowledge_base_collection))
        measure.start()
        figures = to_json(await reconcile_tick(stores, dry_run))
        measure.stop()
        remaining = await stores.vectors.count(settings.chroma.knowledge_base_collection)
    return {**measure.figures(), **load, "tenantsSeen": len(figures["tenants"]),
            "scanned": sum(t["scanned"] for t in figures["tenants"]),
            "stale": figures["staleCount"], "tombstoned": figures["tombstonedCount"],
            "remaining": remaining, "failedTenants": figures["failedTenants"]}


def run_floor(root: Path, *, delete: bool) -> dict[str, Any]:
    """(child) One bare paged scan of the whole collection; then (`delete`) the deletes of
    the stale chunks by ids; nothing else."""
    from core.reconcile.rules.reconcile import STAMP_KEY

    settings = settings_for(root)
    client = open_chroma(settings)
    collection = client.get_collection(settings.chroma.knowledge_base_collection,
                                       embedding_function=None)
    load = asyncio.run(load_collection(lambda: asyncio.to_thread(collection.count)))
    measure = Measure()
    measure.start()
    scanned, stale = scan_picking(collection, None,
                                  lambda metadata: metadata[STAMP_KEY] < CURRENT_VERSION)
    tombstoned = (delete_ids(collection, stale, batch=int(client.get_max_batch_size()))
                  if delete else 0)
    measure.stop()
    return {**measure.figures(), **load, "scanned": scanned, "stale": len(stale),
            "tombstoned": tombstoned, "remaining": int(collection.count()), "failedTenants": 0}


def run_contender(name: str, root: Path) -> dict[str, Any]:
    """(child) Run one contender on `root`."""
    set_up_child()
    if name in FLOOR_OF:
        figures = asyncio.run(run_pass(root, dry_run=name == "dry"))
    elif name in FLOOR_OF.values():
        figures = run_floor(root, delete=name == "tombstone-floor")
    else:
        raise ValueError(f"unknown contender {name!r}")
    return {"contender": name, **figures}


# ------------------------------------------------------------------------------------------
# The benchmark (parent)
# ------------------------------------------------------------------------------------------


def shape_key(tenants: int, chunks: int) -> str:
    """A shape's key in the report: `tenants x chunks`."""
    return f"{tenants}x{chunks}"


def run_scale_benchmark(shapes: Sequence[tuple[int, int]], *, repeats: int = 1,
                        contenders: Sequence[str] = CONTENDERS) -> dict[str, Any]:
    """Seed each shape once, then run every contender on a fresh copy of it (best of
    `repeats`, taken in turns)."""
    workdir = make_workdir("scale")
    try:
        env = child_env(workdir)
        runs: dict[str, dict[str, list[ChildRun]]] = {}
        for tenants, chunks in shapes:
            key = shape_key(tenants, chunks)
            seed = workdir / f"seed-{key}"
            progress(f"scale: seeding {tenants:,} tenants, {chunks:,} chunks")
            run_child(MODULE, ["--seed", str(seed), "--tenants", str(tenants),
                               "--chunks", str(chunks)], env=env,
                      timeout_s=SCALE_CHILD_TIMEOUT_S)
            runs[key] = {name: [] for name in contenders}
            for turn in range(repeats):
                for name in contenders:
                    root = copy_data(seed, workdir / f"{name}-{key}")
                    progress(f"scale: {name} at {tenants:,} tenants x {chunks:,} "
                             f"(run {turn + 1}/{repeats})")
                    runs[key][name].append(run_child(
                        MODULE, ["--contender", name, "--data", str(root)], env=env,
                        timeout_s=SCALE_CHILD_TIMEOUT_S))
                    remove_tree(root)
            remove_tree(seed)
        return summarize(shapes, runs)
    finally:
        remove_tree(workdir)


def _check(name: str, tenants: int, chunks: int, report: dict[str, Any]) -> list[str]:
    """What a contender got wrong: every stale chunk found, deleted when it should be."""
    stale = stale_count(tenants, chunks)
    deletes = name in ("tombstone", "tombstone-floor")
    expected = {"stale": stale, "tombstoned": stale if deletes else 0,
                "remaining": chunks - (stale if deletes else 0), "failedTenants": 0}
    return [f"{name} at {shape_key(tenants, chunks)}: {key} {report[key]} != expected {value}"
            for key, value in expected.items() if report[key] != value]


def summarize(shapes: Sequence[tuple[int, int]], runs: dict[str, dict[str, list[ChildRun]]]
              ) -> dict[str, Any]:
    """Per shape and contender: the best run, its cost per tenant and per chunk, the runs'
    spread; each pass over its floor; and the targets."""
    by_shape: dict[str, dict[str, dict[str, Any]]] = {}
    problems: list[str] = []
    for tenants, chunks in shapes:
        key = shape_key(tenants, chunks)
        entry: dict[str, dict[str, Any]] = {}
        for name, child_runs in runs[key].items():
            best = min(child_runs, key=lambda r: float(r.report["inProcessS"]))
            seconds = float(best.report["inProcessS"])
            entry[name] = {**best.report, "tenants": tenants, "chunks": chunks,
                           "wholeProcessS": round(best.wall_s, 3),
                           "msPerTenant": round(seconds * 1000 / tenants, 3),
                           "usPerChunk": round(seconds * 1e6 / chunks, 3),
                           "inProcessRunsS": [float(r.report["inProcessS"])
                                              for r in child_runs]}
            problems += _check(name, tenants, chunks, best.report)
        for name, floor in FLOOR_OF.items():
            if name in entry and floor in entry:
                entry[name]["overFloor"] = round(ratio(entry[name]["inProcessS"],
                                                       entry[floor]["inProcessS"]), 3)
        by_shape[key] = entry
    return {"shapes": [shape_key(t, c) for t, c in shapes], "staleShare": 1 / STALE_EVERY,
            "embeddingDim": EMBEDDING_DIM, "runs": by_shape, "consistent": not problems,
            "problems": problems, "targets": [t.as_dict() for t in targets(by_shape)]}


def targets(by_shape: dict[str, dict[str, dict[str, Any]]]) -> list[Target]:
    """Issue 17's targets, for the shapes that ran."""
    found: list[Target] = []
    at_target = by_shape.get(shape_key(TARGET_TENANTS, 100_000), {})
    widest = by_shape.get(shape_key(10_000, 100_000), {})
    for name, floor in FLOOR_OF.items():
        if "overFloor" in at_target.get(name, {}):
            found.append(Target(f"scale {name} at {TARGET_TENANTS:,} tenants x 100,000: "
                                f"time / {floor}", at_target[name]["overFloor"],
                                MAX_OVER_FLOOR, unit="x"))
        if name in at_target and name in widest:
            found.append(Target(
                f"scale {name}: per-chunk time at 10,000 tenants / at {TARGET_TENANTS:,}",
                ratio(widest[name]["usPerChunk"], at_target[name]["usPerChunk"]),
                MAX_PER_CHUNK_GROWTH, unit="x"))
    for key, entry in by_shape.items():
        if int(key.split("x")[1]) < MILLION:
            continue
        found += [Target(f"scale {name} at {key.replace('x', ' tenants x ')}: peak RSS growth",
                         entry[name]["peakRssGrowthMiB"], MAX_RSS_GROWTH_MIB, unit=" MiB")
                  for name in FLOOR_OF if name in entry]
    return found


def table(result: dict[str, Any]) -> str:
    """The scale section of the printed table."""
    rows = []
    for entry in result["runs"].values():
        for name, c in entry.items():
            spread = c["inProcessRunsS"]
            rows.append([f"{c['tenants']:,}", f"{c['chunks']:,}", name, c["inProcessS"],
                         f"{min(spread):.2f}-{max(spread):.2f}", c.get("overFloor", ""),
                         c["msPerTenant"], c["usPerChunk"], c["peakRssGrowthMiB"],
                         c["storeLoadMiB"], c["stale"], c["tombstoned"]])
    head = (f"Reconciliation at fleet scale: many tenants in one collection, "
            f"{result['staleShare']:.0%} stale, {result['embeddingDim']}-number embeddings "
            f"(in-process s; x floor: the pass over its floor; peak RSS: the pass's own growth, "
            f"collection loaded; load: what Chroma's first touch of the collection added)")
    body = format_table(["tenants", "chunks", "contender", "in-process s", "runs s", "x floor",
                         "ms/tenant", "us/chunk", "peak RSS +MiB", "load +MiB", "stale",
                         "tombstoned"],
                        rows)
    return "\n".join([head, body,
                      f"consistent (every contender did its work): {result['consistent']}"])


def parse_shapes(text: str) -> list[tuple[int, int]]:
    """`1000x100000,1x1000000` -> [(1000, 100000), (1, 1000000)]."""
    shapes = []
    for item in filter(None, text.split(",")):
        tenants, _, chunks = item.partition("x")
        shapes.append((int(tenants), int(chunks)))
    return shapes


def build_parser() -> argparse.ArgumentParser:
    """Parent flags and the children's."""
    parser = argparse.ArgumentParser(prog=f"python -m {MODULE}", description=__doc__)
    parser.add_argument("--scale", choices=tuple(SCALES), default="quick",
                        help="which shapes: quick (100,000 chunks) or full (+1,000,000)")
    parser.add_argument("--shapes", help="comma-separated TENANTSxCHUNKS, instead of --scale")
    parser.add_argument("--repeats", type=int, default=1,
                        help="runs per contender and shape; the best is reported")
    parser.add_argument("--contenders", default=",".join(CONTENDERS),
                        help="comma-separated subset to run (default: all)")
    parser.add_argument("--seed", type=Path, metavar="ROOT", help="(child) seed a store")
    parser.add_argument("--tenants", type=int, help="(child) tenants to seed")
    parser.add_argument("--chunks", type=int, help="(child) chunks to seed, in all")
    parser.add_argument("--contender", choices=CONTENDERS, help="(child) run one contender")
    parser.add_argument("--data", type=Path, metavar="ROOT", help="(child) the seeded root")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Child or parent, by flags."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.seed is not None:
        if args.tenants is None or args.chunks is None:
            parser.error("--seed needs --tenants and --chunks")
        set_up_child()
        emit_report(asyncio.run(seed_store(args.seed, args.tenants, args.chunks)))
        return 0
    if args.contender is not None:
        if args.data is None:
            parser.error("--contender needs --data ROOT")
        emit_report(run_contender(args.contender, args.data))
        return 0
    shapes = parse_shapes(args.shapes) if args.shapes else list(SCALES[args.scale])
    chosen = [c for c in args.contenders.split(",") if c]
    if not chosen or set(chosen) - set(CONTENDERS):
        parser.error(f"--contenders: choose from {CONTENDERS}")
    result = run_scale_benchmark(shapes, repeats=args.repeats, contenders=chosen)
    print(table(result))
    emit_report(result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
