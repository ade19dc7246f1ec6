"""PostgreSQL benchmark (issue 27): the drain and a reconcile pass with `stateUrl` set, beside the
same work on SQLite, each against a PostgreSQL floor; and two drainers at once on one database.

    python -m benchmarks.postgres_bench [--smoke] [--repeats N]
    python -m benchmarks.postgres_bench --contender NAME --data ROOT [--url URL]   # (child)

The PostgreSQL: `$KB_BENCH_PG_URL` when set (an operator's server; the URL names a database the
benchmark connects to in order to create and drop its own `kb_bench_*` databases, so the role
needs CREATEDB), else a throwaway cluster in a temp folder (`benchmarks.postgres_cluster`)
started with fsync, synchronous commit and full-page writes ON, as a deployment runs. The
report says which, and quotes the server's `fsync` and `synchronous_commit`.

Drain (`benchmarks.drain_bench`'s workload, seeding and drainer, imported, not copied):

- **drainer-sqlite**: the drainer on SQLite, the reference beside it;
- **drainer**: the same drainer with `stateUrl` on a fresh copy of the seeded database;
- **floor**: the same bulk Chroma gets as drain_bench's floor, then the same nodes and edges
  written with the least logic PostgreSQL allows: `COPY` into three temp tables and one
  `INSERT … SELECT … ON CONFLICT` each (nodes and structural edges if absent, the linked edges
  reinforced), in one transaction;
- **pair**: two drainers at once (two data folders, each with its own copy of the Chroma store
  and half the queue's lines, every other line; one database), released together once both have
  opened their stores; its time is from the first one's start to the last one's end, against
  **drainer**'s in-process time for the whole queue. The graph they leave must be identical to
  the one drainer's (a fingerprint of every node and edge, weights and properties included).

Reconcile (`benchmarks.reconcile_bench`'s one tenant, 10% stale, tombstoning for real):

- **pass-sqlite** / **pass**: the pass on SQLite and with `stateUrl`;
- **floor**: reconcile_bench's tombstone floor (a bare scan of the candidate rows and deletes by
  ids: the pass's store side, which is Chroma on both backends) plus the pass's state side done
  bare on PostgreSQL: one read of the tenant's config node and one insert of its telemetry row.
  A pass's state work is a few small statements; the table shows it apart (`state s`), so the
  pass's PostgreSQL overhead is read from `pass` against `pass-sqlite`, not hidden in Chroma.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from benchmarks import drain_bench, reconcile_bench
from benchmarks.bare_stores import open_chroma, settings_for, write_queue_file
from benchmarks.harness import (
    CHILD_TIMEOUT_S,
    STDERR_TAIL_CHARS,
    BenchmarkError,
    ChildRun,
    child_env,
    copy_data,
    emit_report,
    format_table,
    make_workdir,
    progress,
    ratio,
    remove_tree,
    repo_root,
    run_child,
    set_up_child,
)

MODULE = "benchmarks.postgres_bench"
#: An operator's PostgreSQL for the benchmark (else a throwaway cluster is started).
URL_VARIABLE = "KB_BENCH_PG_URL"
DRAIN_CONTENDERS = ("drainer-sqlite", "drainer", "floor", "pair")
RECONCILE_CONTENDERS = ("pass-sqlite", "pass", "floor")
#: The smoke run leaves out the SQLite reference rows (the drain and reconcile benchmarks' own
#: smoke runs cover them): every child costs seconds of start-up, and the suite runs this.
SMOKE_DRAIN_CONTENDERS = ("drainer", "floor", "pair")
SMOKE_RECONCILE_CONTENDERS = ("pass", "floor")
#: The contenders that run on PostgreSQL (each on its own copy of the seeded database).
ON_POSTGRES = frozenset({"drainer", "floor", "pair", "pass"})
#: Issue 27's target: the drainer on PostgreSQL within 1.5x of the PostgreSQL floor.
MAX_OVER_FLOOR = drain_bench.MAX_OVER_FLOOR
#: One tenant's chunks for the reconcile rows (reconcile_bench's smallest full size: the pass
#: is Chroma's work, and its PostgreSQL side does not grow with the chunks).
FULL_CHUNKS = reconcile_bench.FULL_SIZES[0]
SMOKE_CHUNKS = reconcile_bench.SMOKE_SIZES[0]
#: Names of the benchmark's databases (created from a seeded template, dropped after).
DB_PREFIX = "kb_bench_"
#: How long a drainer of the pair waits for the other to be ready before it gives up.
PAIR_READY_TIMEOUT_S = 300.0
#: How often a waiting drainer of the pair looks for the go file.
PAIR_POLL_S = 0.005


# ------------------------------------------------------------------------------------------
# The PostgreSQL (parent)
# ------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Postgres:
    """Where the benchmark's databases live and how durable the server is."""

    admin_url: str
    source: str
    fsync: str
    synchronous_commit: str

    def url(self, database: str) -> str:
        """The URL of one of the benchmark's databases on the same server."""
        head, _, _ = self.admin_url.partition("?")
        base, _, _ = head.rpartition("/")
        query = self.admin_url[len(head):]
        return f"{base}/{database}{query}"

    def sql(self, *statements: str) -> list[Any]:
        """Run statements on the admin database (autocommit: CREATE DATABASE needs it); the
        last one's rows."""
        import asyncpg

        async def run() -> list[Any]:
            conn = await asyncpg.connect(self.admin_url)
            try:
                rows: list[Any] = []
                for statement in statements:
                    rows = list(await conn.fetch(statement))
                return rows
            finally:
                await conn.close()

        return asyncio.run(run())

    def create(self, name: str, *, template: str | None = None) -> str:
        """A fresh database (a copy of `template` when given); its URL."""
        copy = f' TEMPLATE "{template}"' if template else ""
        self.sql(f'DROP DATABASE IF EXISTS "{name}"', f'CREATE DATABASE "{name}"{copy}')
        return self.url(name)

    def drop(self, name: str) -> None:
        """Drop one of the benchmark's databases."""
        self.sql(f'DROP DATABASE IF EXISTS "{name}"')


@contextmanager
def postgres() -> Iterator[Postgres]:
    """`$KB_BENCH_PG_URL`'s server, else a throwaway durable cluster, stopped afterwards."""
    from benchmarks.postgres_cluster import PostgresServer

    operator_url = os.environ.get(URL_VARIABLE, "")
    server = None
    if operator_url:
        admin_url, source = operator_url, f"${URL_VARIABLE}"
    else:
        server = PostgresServer(durable=True, prefix="kb-bench-pg-")
        server.start()
        admin_url = server.url("postgres")
        source = f"throwaway PostgreSQL 15 cluster ({server.server_settings})"
    try:
        probe = Postgres(admin_url, source, "", "")
        [row] = probe.sql("SELECT current_setting('fsync'), "
                          "current_setting('synchronous_commit')")
        yield Postgres(admin_url, source, str(row[0]), str(row[1]))
    finally:
        if server is not None:
            server.stop()


def fingerprint(url: str) -> dict[str, Any]:
    """Every node and edge of a graph database, as counts and one digest over the rows in a
    fixed order (weights and properties included): two graphs with the same fingerprint are
    the same graph."""
    import asyncpg

    async def run() -> dict[str, Any]:
        conn = await asyncpg.connect(url)
        try:
            nodes = await conn.fetchrow(
                "SELECT COUNT(*), md5(COALESCE(string_agg(id || chr(31) || label || chr(31) "
                "|| properties, chr(30) ORDER BY id COLLATE \"C\"), '')) FROM nodes")
            edges = await conn.fetchrow(
                "SELECT COUNT(*), COALESCE(SUM(weight), 0), md5(COALESCE(string_agg("
                "source || chr(31) || target || chr(31) || relationship || chr(31) || "
                "weight::text || chr(31) || properties, chr(30) ORDER BY source COLLATE \"C\", "
                "target COLLATE \"C\", relationship COLLATE \"C\"), '')) FROM edges")
        finally:
            await conn.close()
        return {"nodes": int(nodes[0]), "nodesDigest": str(nodes[1]), "edges": int(edges[0]),
                "weightSum": round(float(edges[1]), 6), "edgesDigest": str(edges[2])}

    return asyncio.run(run())


# ------------------------------------------------------------------------------------------
# Children
# ------------------------------------------------------------------------------------------


def _use_state_url(module: Any, url: str | None) -> None:
    """The one seam into reconcile_bench's pass, which looks its settings up by the name
    `settings_for`: with `url` it gets `stateUrl` set, everything else unchanged."""
    if url is None:
        return

    def postgres_settings(root: Path, **overrides: Any) -> Any:
        return settings_for(root, stateUrl=url, **overrides)

    vars(module).update(settings_for=postgres_settings)


async def seed_drain(root: Path, url: str, sizes: drain_bench.DrainSizes) -> dict[str, Any]:
    """(child) drain_bench's seeded root (Chroma, SQLite graph, queue, floor plan), and the
    same starting graph in the database at `url`: one child for both, a start-up saved."""
    seeded = await drain_bench.seed_store(root, sizes)
    await drain_bench.seed_graph(settings_for(root, stateUrl=url),
                                 drain_bench.build_workload(sizes))
    return seeded


async def seed_reconcile(root: Path, url: str, chunks: int) -> dict[str, Any]:
    """(child) reconcile_bench's store of `chunks` chunks with its tenant config, and the same
    tenant config (version CURRENT_VERSION) in the database at `url`."""
    from core.base.state.state import open_graph
    from core.base.state.tenants import set_tenant_config, tenant_version

    seeded = await reconcile_bench.grow_store(root, chunks)
    graph = await open_graph(settings_for(root, stateUrl=url).state)
    try:
        while await tenant_version(graph, reconcile_bench.TENANT) < \
                reconcile_bench.CURRENT_VERSION:
            await set_tenant_config(graph, reconcile_bench.TENANT,
                                    repo_slug=f"{reconcile_bench.TENANT}/docs")
    finally:
        await graph.close()
    return seeded


async def run_drainer(root: Path, url: str | None, barrier: Path | None) -> dict[str, Any]:
    """(child) drain_bench's drainer (`url`: with `stateUrl`). With `barrier` (the pair), it
    opens its stores, says it is ready, and drains only once the go file appears, so the two
    drainers' times overlap as two hosts' would."""
    from core.drain.queue_drain import drain_queue
    from core.suite.tick import open_context

    settings = settings_for(root, **({"stateUrl": url} if url else {}))
    measure = drain_bench.CpuMeasure()
    async with open_context(settings) as stores:
        if barrier is not None:
            (barrier / f"ready-{os.getpid()}").touch()
            await _wait_for(barrier / "go")
        started = time.time()
        measure.start()
        stats = await drain_queue(stores)
        measure.stop()
        finished = time.time()
    return {**measure.figures(), "linked": stats.succeeded, "unresolved": stats.failed,
            "malformed": stats.skipped_malformed, "startedAt": started,
            "finishedAt": finished}


async def _wait_for(path: Path) -> None:
    deadline = time.monotonic() + PAIR_READY_TIMEOUT_S
    while not path.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} never appeared")
        await asyncio.sleep(PAIR_POLL_S)


async def run_drain_floor(root: Path, url: str) -> dict[str, Any]:
    """(child) drain_bench's floor reads, then COPY into temp tables and one INSERT … SELECT …
    ON CONFLICT per table, in one transaction: the least PostgreSQL work for the same rows."""
    import asyncpg

    from core.base.rules.nodes import MAX_WEIGHT, REINFORCE_FACTOR

    settings = settings_for(root)
    plan = drain_bench.FloorPlan(**json.loads(
        (root / drain_bench.FLOOR_PLAN_FILE).read_text(encoding="utf-8")))
    conn = await asyncpg.connect(url)
    client = open_chroma(settings)
    measure = drain_bench.CpuMeasure()
    measure.start()
    memories = client.get_collection(settings.chroma.memory_collection, embedding_function=None)
    summaries = client.get_collection(settings.chroma.summary_collection, embedding_function=None)
    nodes: list[tuple[str, str, str]] = []
    structural: list[tuple[str, str, str, float, str]] = []
    for chunk in drain_bench._chunks(plan.memory_keys, drain_bench.FLOOR_IDS_PER_GET):
        got = memories.get(ids=chunk, include=["metadatas"])
        for row_id, metadata in zip(got["ids"], got["metadatas"], strict=True):
            nodes.append((f"memory:{row_id}", "MEMORY", drain_bench._json(metadata)))
            structural.append((f"memory:{row_id}", f"session:{metadata['sessionId']}",
                               "ORIGINATES_IN", 1.0, "{}"))
    for chunk in drain_bench._chunks(plan.session_keys, drain_bench.FLOOR_SESSIONS_PER_WHERE):
        got = summaries.get(where={"sessionId": {"$in": chunk}}, include=["metadatas"])
        for metadata in got["metadatas"]:
            nodes.append((f"session:{metadata['sessionId']}", "SESSION",
                          drain_bench._json(metadata)))
    nodes += [(f"session:{s}", "SESSION", '{"minimal":true}') for s in plan.minimal_sessions]
    edge_columns = ["source", "target", "relationship", "weight", "properties"]
    async with conn.transaction():
        await conn.execute(
            "CREATE TEMP TABLE stage_nodes (id text, label text, properties text) "
            "ON COMMIT DROP; "
            "CREATE TEMP TABLE stage_structural (source text, target text, relationship text, "
            "weight float8, properties text) ON COMMIT DROP; "
            "CREATE TEMP TABLE stage_links (LIKE stage_structural) ON COMMIT DROP")
        await conn.copy_records_to_table("stage_nodes", records=nodes)
        await conn.copy_records_to_table("stage_structural", records=structural,
                                         columns=edge_columns)
        await conn.copy_records_to_table("stage_links", records=[tuple(e) for e in plan.edges],
                                         columns=edge_columns)
        await conn.execute(
            "INSERT INTO nodes(id, label, properties) SELECT * FROM stage_nodes "
            "ON CONFLICT DO NOTHING")
        await conn.execute(
            "INSERT INTO edges(source, target, relationship, weight, properties) "
            "SELECT * FROM stage_structural ON CONFLICT DO NOTHING")
        await conn.execute(
            "INSERT INTO edges(source, target, relationship, weight, properties) "
            "SELECT * FROM stage_links ON CONFLICT(source, target, relationship) DO UPDATE SET "
            f"weight = LEAST(COALESCE(NULLIF(edges.weight, 0), 1.0) + excluded.weight * "
            f"{REINFORCE_FACTOR}, {MAX_WEIGHT})")
    measure.stop()
    await conn.close()
    return {**measure.figures(), "linked": len(plan.edges), "unresolved": None,
            "malformed": None}


async def _graph_counts(url: str) -> dict[str, int]:
    import asyncpg

    conn = await asyncpg.connect(url)
    try:
        return {"nodes": int(await conn.fetchval("SELECT COUNT(*) FROM nodes")),
                "edges": int(await conn.fetchval("SELECT COUNT(*) FROM edges"))}
    finally:
        await conn.close()


def run_drain_contender(name: str, root: Path, url: str | None,
                        barrier: Path | None) -> dict[str, Any]:
    """(child) One drain contender, and what it left in the graph."""
    from benchmarks.bare_stores import count_rows

    set_up_child()
    if name in ("drainer-sqlite", "drainer", "pair"):
        figures = asyncio.run(run_drainer(root, url, barrier))
    elif name == "floor" and url is not None:
        figures = asyncio.run(run_drain_floor(root, url))
    else:
        raise ValueError(f"unknown drain contender {name!r} (or no --url)")
    if url is None:
        graph_path = settings_for(root).state.graph_db_path
        counts = {"nodes": count_rows(graph_path, "nodes"),
                  "edges": count_rows(graph_path, "edges")}
    else:
        counts = asyncio.run(_graph_counts(url))
    return {"contender": name, **figures, **counts}


async def bare_state_writes(url: str) -> float:
    """(child) The pass's state side, bare: read the tenant's config node, insert its
    telemetry row (autocommit, as the pass commits it alone). Seconds it took."""
    import asyncpg

    conn = await asyncpg.connect(url)
    try:
        started = time.perf_counter()
        await conn.fetchrow("SELECT properties FROM nodes WHERE id = $1",
                            f"kb-config:{reconcile_bench.TENANT}")
        await conn.execute(
            "INSERT INTO kb_ingestion_metrics(id, timestamp, tenant_id, repo_slug, event_type, "
            "chunks_total, chunks_deleted, detail) VALUES ($1, $2, $3, $4, 'reconcile', $5, "
            "$5, $6)", f"floor-{os.getpid()}", int(time.time() * 1000),
            reconcile_bench.TENANT, f"{reconcile_bench.TENANT}/docs", 0,
            json.dumps({"staleCount": 0}))
        return time.perf_counter() - started
    finally:
        await conn.close()


def run_reconcile_contender(name: str, root: Path, url: str | None) -> dict[str, Any]:
    """(child) One reconcile contender on a store of `size` chunks."""
    set_up_child()
    if name in ("pass-sqlite", "pass"):
        _use_state_url(reconcile_bench, url)
        figures = asyncio.run(reconcile_bench.run_pass(root, dry_run=False))
        figures["stateS"] = None
    elif name == "floor" and url is not None:
        figures = reconcile_bench.run_floor(root, delete="ids")
        state_s = asyncio.run(bare_state_writes(url))
        figures["inProcessS"] = round(float(figures["inProcessS"]) + state_s, 4)
        figures["stateS"] = round(state_s, 4)
    else:
        raise ValueError(f"unknown reconcile contender {name!r} (or no --url)")
    return {"contender": name, **figures}


# ------------------------------------------------------------------------------------------
# The benchmark (parent)
# ------------------------------------------------------------------------------------------


def run_postgres_benchmark(sizes: drain_bench.DrainSizes, chunks: int, *, repeats: int = 1,
                           drain_contenders: Sequence[str] = DRAIN_CONTENDERS,
                           reconcile_contenders: Sequence[str] = RECONCILE_CONTENDERS
                           ) -> dict[str, Any]:
    """Seed once per part (SQLite root and a PostgreSQL template database), then run every
    contender on its own fresh copy of both (best of `repeats`, taken in turns). The
    contenders on PostgreSQL always run; the SQLite reference rows may be left out."""
    workdir = make_workdir("postgres")
    try:
        with postgres() as pg:
            env = child_env(workdir)
            drain = _drain_part(pg, workdir, env, sizes, repeats, drain_contenders)
            reconcile = _reconcile_part(pg, workdir, env, chunks, repeats,
                                        reconcile_contenders)
            server = {"source": pg.source, "fsync": pg.fsync,
                      "synchronousCommit": pg.synchronous_commit}
        return {"server": server, "drain": drain, "reconcile": reconcile,
                "consistent": drain["consistent"] and reconcile["consistent"],
                "targets": drain["targets"]}
    finally:
        remove_tree(workdir)


def _drain_part(pg: Postgres, workdir: Path, env: dict[str, str],
                sizes: drain_bench.DrainSizes, repeats: int,
                contenders: Sequence[str]) -> dict[str, Any]:
    seed_root = workdir / "drain-seed"
    template = f"{DB_PREFIX}drain_seed"
    progress(f"postgres: seeding the drain ({sizes.lines:,} lines)")
    pg.create(template)
    seeded = run_child(MODULE, ["--seed-drain", str(seed_root), "--url", pg.url(template),
                                *sizes.args()], env=env)
    runs: dict[str, list[ChildRun]] = {name: [] for name in contenders}
    prints: dict[str, list[dict[str, Any]]] = {"drainer": [], "pair": []}
    try:
        for turn in range(repeats):
            for name in contenders:
                progress(f"postgres: drain {name} (run {turn + 1}/{repeats})")
                database = f"{DB_PREFIX}drain_{name.replace('-', '_')}"
                url = pg.create(database, template=template) if name in ON_POSTGRES else None
                root = copy_data(seed_root, workdir / f"drain-{name}-{turn}")
                try:
                    if name == "pair":
                        runs[name].append(_run_pair(root, workdir / f"pair-{turn}", url, env))
                    else:
                        runs[name].append(run_child(MODULE, [
                            "--contender", name, "--data", str(root),
                            *(["--url", url] if url else [])], env=env))
                    if url is not None and name in ("drainer", "pair"):
                        # The pair's children counted while the other may still have run.
                        prints[name].append(fingerprint(url))
                        runs[name][-1].report.update(nodes=prints[name][-1]["nodes"],
                                                     edges=prints[name][-1]["edges"])
                finally:
                    remove_tree(root)
                    if url is not None:
                        pg.drop(database)
    finally:
        pg.drop(template)
    result = drain_bench.summarize(sizes, seeded.report["expected"], runs)
    best = result["contenders"]
    result["pairOverDrainer"] = round(ratio(float(best["pair"]["inProcessS"]),
                                            float(best["drainer"]["inProcessS"])), 3)
    result["pgOverSqlite"] = (
        round(ratio(float(best["drainer"]["inProcessS"]),
                    float(best["drainer-sqlite"]["inProcessS"])), 3)
        if "drainer-sqlite" in best else None)
    result["fingerprints"] = prints
    result["pairSameGraph"] = all(p == prints["drainer"][0]
                                  for p in prints["drainer"] + prints["pair"])
    if not result["pairSameGraph"]:
        result["mismatches"].append("pair: the graph differs from one drainer's")
    result["consistent"] = not result["mismatches"]
    for target in result["targets"]:
        target["name"] = target["name"].replace("drain:", "drain (PostgreSQL):", 1)
    return result


def _run_pair(root: Path, pair_dir: Path, url: str | None,
              env: dict[str, str]) -> ChildRun:
    """Two drainers at once on one database, each with half the queue (every other line) and
    its own copy of the store; one ChildRun whose in-process time is from the first drainer's
    start to the last one's end, and whose figures are the two drainers' sums."""
    assert url is not None
    roots = [root, copy_data(root, pair_dir / "second")]
    lines = settings_for(root).drain.lazy_edges_queue_path.read_bytes().splitlines()
    for half, half_root in enumerate(roots):
        write_queue_file(settings_for(half_root).drain.lazy_edges_queue_path, lines[half::2])
    barrier = pair_dir / "barrier"
    barrier.mkdir(parents=True)
    command = [sys.executable, "-m", MODULE, "--contender", "pair", "--url", url,
               "--barrier", str(barrier), "--data"]
    started = time.perf_counter()
    children = [subprocess.Popen([*command, str(r)], env=env, cwd=repo_root(),
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                for r in roots]
    try:
        deadline = time.monotonic() + PAIR_READY_TIMEOUT_S
        while len(list(barrier.glob("ready-*"))) < len(children):
            if time.monotonic() > deadline or any(c.poll() is not None for c in children):
                break
            time.sleep(PAIR_POLL_S)
        (barrier / "go").touch()
        outputs = [c.communicate(timeout=CHILD_TIMEOUT_S) for c in children]
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
                child.wait()
    wall_s = time.perf_counter() - started
    reports = []
    for child, (out, err) in zip(children, outputs, strict=True):
        lines_out = [line for line in out.splitlines() if line.strip()]
        if child.returncode != 0 or not lines_out:
            raise BenchmarkError(f"pair drainer exited {child.returncode}; stderr:\n"
                                 f"{err[-STDERR_TAIL_CHARS:]}")
        reports.append(json.loads(lines_out[-1]))
    remove_tree(pair_dir)
    span = max(r["finishedAt"] for r in reports) - min(r["startedAt"] for r in reports)
    summed = {key: sum(r[key] for r in reports)
              for key in ("linked", "unresolved", "malformed", "cpuS")}
    return ChildRun({**reports[-1], **summed, "inProcessS": round(span, 4),
                     "drainersS": [r["inProcessS"] for r in reports],
                     "nodes": reports[-1]["nodes"], "edges": reports[-1]["edges"]}, wall_s)


def _reconcile_part(pg: Postgres, workdir: Path, env: dict[str, str], chunks: int,
                    repeats: int, contenders: Sequence[str]) -> dict[str, Any]:
    seed_root = workdir / "reconcile-seed"
    template = f"{DB_PREFIX}reconcile_seed"
    progress(f"postgres: seeding the reconcile pass ({chunks:,} chunks)")
    pg.create(template)
    run_child(MODULE, ["--seed-reconcile", str(seed_root), "--url", pg.url(template),
                       "--chunks", str(chunks)], env=env,
              timeout_s=reconcile_bench.SEED_TIMEOUT_S)
    runs: dict[str, list[ChildRun]] = {name: [] for name in contenders}
    try:
        for turn in range(repeats):
            for name in contenders:
                progress(f"postgres: reconcile {name} (run {turn + 1}/{repeats})")
                database = f"{DB_PREFIX}reconcile_{name.replace('-', '_')}"
                url = pg.create(database, template=template) if name in ON_POSTGRES else None
                root = copy_data(seed_root, workdir / f"reconcile-{name}-{turn}")
                try:
                    runs[name].append(run_child(MODULE, [
                        "--contender", name, "--part", "reconcile", "--data", str(root),
                        *(["--url", url] if url else [])], env=env))
                finally:
                    remove_tree(root)
                    if url is not None:
                        pg.drop(database)
    finally:
        pg.drop(template)
    best_runs: dict[str, dict[str, Any]] = {}
    problems: list[str] = []
    stale = reconcile_bench.stale_count(chunks)
    for name, child_runs in runs.items():
        best = min(child_runs, key=lambda r: float(r.report["inProcessS"]))
        best_runs[name] = {**best.report, "wholeProcessS": round(best.wall_s, 3),
                            "inProcessRunsS": [float(r.report["inProcessS"])
                                               for r in child_runs]}
        for key, value in {"tombstoned": stale, "remaining": chunks - stale,
                           "failedTenants": 0}.items():
            if best_runs[name].get(key) != value:
                problems.append(f"{name}: {key} {best_runs[name].get(key)} != {value}")

    def over(numerator: str, denominator: str) -> float | None:
        if numerator not in best_runs or denominator not in best_runs:
            return None
        return round(ratio(float(best_runs[numerator]["inProcessS"]),
                           float(best_runs[denominator]["inProcessS"])), 3)

    return {"chunks": chunks, "stale": stale, "contenders": best_runs,
            "passOverFloor": over("pass", "floor"), "pgOverSqlite": over("pass", "pass-sqlite"),
            "consistent": not problems, "mismatches": problems}


def table(result: dict[str, Any]) -> str:
    """The PostgreSQL section of the printed table."""
    server = result["server"]
    drain, reconcile = result["drain"], result["reconcile"]
    sizes = drain["sizes"]
    rows = []
    for name, c in drain["contenders"].items():
        rows.append([name, "PostgreSQL" if name in ON_POSTGRES else "SQLite", c["inProcessS"],
                     c["edgesPerS"], c["bestCpuS"], c["wholeProcessS"], c["edges"]])
    head = (f"On PostgreSQL: {server['source']}; fsync={server['fsync']}, "
            f"synchronous_commit={server['synchronousCommit']}\n"
            f"Drain: {sizes['lines']:,} lines, {sizes['memories']:,} memories; "
            f"{drain['expected']['linked']:,} edges linked")
    drain_table = format_table(["contender", "state", "in-process s", "edges/s", "CPU s",
                                "whole-process s", "edges in graph"], rows)
    pair = drain["contenders"]["pair"]
    drain_tail = [
        f"consistent (same nodes and edges everywhere): {drain['consistent']}",
        f"drainer / floor on PostgreSQL: {drain['drainerOverFloor']:.2f}x in-process "
        f"(target <= {MAX_OVER_FLOOR}x), {drain['drainerOverFloorCpu']:.2f}x CPU; "
        f"drainer PostgreSQL / SQLite: {_times(drain['pgOverSqlite'])}",
        f"two drainers at once (half the lines each): {pair['inProcessS']:.2f} s first start "
        f"to last end ({', '.join(f'{s:.2f}' for s in pair['drainersS'])} s each), "
        f"{drain['pairOverDrainer']:.2f}x one drainer's time for all of it; same graph as one "
        f"drainer's: {drain['pairSameGraph']}",
    ]
    rows = [[name, "PostgreSQL" if name in ON_POSTGRES else "SQLite", c["inProcessS"],
             "" if c.get("stateS") is None else c["stateS"], c["tombstoned"],
             c["wholeProcessS"], c["peakRssGrowthMiB"]]
            for name, c in reconcile["contenders"].items()]
    reconcile_head = (f"Reconcile pass, one tenant, {reconcile['chunks']:,} chunks, "
                      f"{reconcile['stale']:,} stale, tombstoned")
    reconcile_table = format_table(["contender", "state", "in-process s", "state s",
                                    "tombstoned", "whole-process s", "peak RSS +MiB"], rows)
    reconcile_tail = [
        f"consistent: {reconcile['consistent']}; pass / floor on PostgreSQL: "
        f"{_times(reconcile['passOverFloor'])}; pass PostgreSQL / SQLite: "
        f"{_times(reconcile['pgOverSqlite'])}"]
    return "\n".join([head, drain_table, *drain_tail, "", reconcile_head, reconcile_table,
                      *reconcile_tail])


def run_benchmark(*, smoke: bool, repeats: int) -> dict[str, Any]:
    """The full benchmark, or (`smoke`) tiny sizes and the PostgreSQL contenders only."""
    if smoke:
        return run_postgres_benchmark(drain_bench.SMOKE_SIZES, SMOKE_CHUNKS, repeats=repeats,
                                      drain_contenders=SMOKE_DRAIN_CONTENDERS,
                                      reconcile_contenders=SMOKE_RECONCILE_CONTENDERS)
    return run_postgres_benchmark(drain_bench.FULL_SIZES, FULL_CHUNKS, repeats=repeats)


def _times(value: float | None) -> str:
    return "not run" if value is None else f"{value:.2f}x"


def build_parser() -> argparse.ArgumentParser:
    """Parent flags and the children's."""
    parser = argparse.ArgumentParser(prog=f"python -m {MODULE}", description=__doc__)
    parser.add_argument("--smoke", action="store_true", help="tiny sizes (seconds)")
    parser.add_argument("--repeats", type=int, default=1,
                        help="runs per contender; the best is reported")
    parser.add_argument("--contender", help="(child) run one contender")
    parser.add_argument("--part", choices=("drain", "reconcile"), default="drain",
                        help="(child) which part the contender belongs to")
    parser.add_argument("--data", type=Path, metavar="ROOT", help="(child) the seeded root")
    parser.add_argument("--url", help="(child) the contender's database")
    parser.add_argument("--barrier", type=Path, help="(child) the pair's barrier folder")
    parser.add_argument("--seed-drain", type=Path, metavar="ROOT",
                        help="(child) seed the drain's store, and its graph at --url")
    parser.add_argument("--seed-reconcile", type=Path, metavar="ROOT",
                        help="(child) seed the reconcile store, and its tenant at --url")
    parser.add_argument("--chunks", type=int, default=FULL_CHUNKS, help=argparse.SUPPRESS)
    for flag, default in asdict(drain_bench.FULL_SIZES).items():
        parser.add_argument(f"--{flag}", type=int, default=default, help=argparse.SUPPRESS)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Child or parent, by flags."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.seed_drain is not None or args.seed_reconcile is not None:
        if args.url is None:
            parser.error("--seed-drain / --seed-reconcile need --url")
        set_up_child()
        if args.seed_drain is not None:
            sizes = drain_bench.DrainSizes(args.lines, args.memories, args.summaries,
                                           args.concepts)
            emit_report(asyncio.run(seed_drain(args.seed_drain, args.url, sizes)))
        else:
            emit_report(asyncio.run(seed_reconcile(args.seed_reconcile, args.url,
                                                   args.chunks)))
        return 0
    if args.contender is not None:
        if args.data is None:
            parser.error("--contender needs --data ROOT")
        if args.part == "reconcile":
            emit_report(run_reconcile_contender(args.contender, args.data, args.url))
        else:
            emit_report(run_drain_contender(args.contender, args.data, args.url,
                                            args.barrier))
        return 0
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    result = run_benchmark(smoke=args.smoke, repeats=args.repeats)
    print(table(result))
    emit_report(result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
