"""The benchmarks keep working: `python -m benchmarks --smoke` runs every benchmark at tiny sizes
and its report has the promised shape, with every contender having done the same work.

Speed is never asserted here (the machine is shared and the sizes are tiny); `make bench` runs
the full sizes and the README records those figures.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from benchmarks import postgres_bench, reconcile_bench
from benchmarks.harness import WORKDIR_PREFIX, repo_root
from tests.postgres_server import PostgresServer

#: Generous: the smoke run takes ~75 s here on a quiet machine, most of it interpreter, Chroma
#: and `chroma run` start-ups; at a load average of 8 it has taken over 300 s.
SMOKE_TIMEOUT_S = 600


def leftover_workdirs(temp_root: Path) -> set[Path]:
    return set(temp_root.glob(f"{WORKDIR_PREFIX}*"))


@pytest.fixture(scope="module")
def smoke_run(
    tmp_path_factory: pytest.TempPathFactory, postgres_server: PostgresServer,
) -> tuple[list[str], dict[str, Any], set[Path]]:
    """One smoke run shared by the tests below: stdout lines, the report, and the benchmark
    temp folders it left behind. It runs with a temp root of its own (TMPDIR), so a benchmark
    another process runs at the same time cannot be taken for this run's leftovers. Its
    PostgreSQL rows run on the session's server (`$KB_BENCH_PG_URL`, an operator's server as
    the benchmark sees it), which saves a second cluster's start-up."""
    temp_root = tmp_path_factory.mktemp("bench-tmp")
    env = {**os.environ, "TMPDIR": str(temp_root),
           postgres_bench.URL_VARIABLE: postgres_server.url()}
    done = subprocess.run([sys.executable, "-m", "benchmarks", "--smoke"], cwd=repo_root(),
                          env=env,
                          capture_output=True, text=True, timeout=SMOKE_TIMEOUT_S, check=False)
    assert done.returncode == 0, done.stderr[-4000:]
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    return lines, json.loads(lines[-1]), leftover_workdirs(temp_root)


def test_stdout_ends_with_exactly_one_json_object(
    smoke_run: tuple[list[str], dict[str, Any], set[Path]],
) -> None:
    lines, report, _ = smoke_run
    objects = [line for line in lines if line.startswith("{")]
    assert objects == [lines[-1]]
    assert report["mode"] == "smoke"
    assert {"drain", "drain-server", "drain-neo", "postgres", "reconcile", "scale", "idle",
            "targets", "machine"} <= report.keys()
    assert any(line.startswith("Drain:") for line in lines)
    assert any(line.startswith("Targets") for line in lines)


def test_every_drain_contender_ends_with_the_same_graph(
    smoke_run: tuple[list[str], dict[str, Any], set[Path]],
) -> None:
    drain = smoke_run[1]["drain"]
    expected = drain["expected"]
    assert drain["consistent"], drain["mismatches"]
    assert set(drain["contenders"]) == {"drainer", "baseline", "floor"}
    edges = {c["edges"] for c in drain["contenders"].values()}
    nodes = {c["nodes"] for c in drain["contenders"].values()}
    assert edges == {expected["edgesAfter"]} and nodes == {expected["nodesAfter"]}
    assert expected["edgesAfter"] > expected["edgesBefore"]
    for contender in drain["contenders"].values():
        assert contender["linked"] == expected["linked"] > 0
        assert 0 < contender["inProcessS"] <= contender["wholeProcessS"]
        assert contender["edgesPerS"] > 0
    for name in ("drainer", "baseline"):
        assert drain["contenders"][name]["malformed"] == expected["malformed"] > 0
        assert drain["contenders"][name]["unresolved"] == expected["unresolved"] > 0
    assert drain["drainerOverFloor"] > 0 and drain["speedupOverBaseline"] > 0


def test_every_reconcile_contender_finds_and_deletes_the_stale_chunks(
    smoke_run: tuple[list[str], dict[str, Any], set[Path]],
) -> None:
    reconcile = smoke_run[1]["reconcile"]
    assert reconcile["consistent"], reconcile["problems"]
    assert len(reconcile["sizes"]) >= 2
    for size, runs in reconcile["runs"].items():
        stale = int(size) // 10
        assert set(runs) == {"dry", "tombstone", "scan-floor", "tombstone-floor", "where-floor",
                             "manifest-dry", "manifest-tombstone", "full-scan-floor",
                             "manifest-tombstone-floor", "in-cost"}
        assert {r["stale"] for r in runs.values() if "stale" in r} == {stale}
        # The manifest pass: 5% orphaned by path, one missing path; the union deleted once.
        orphans = reconcile_bench.manifest_counts(int(size))
        assert (runs["manifest-dry"]["orphans"], runs["manifest-dry"]["missing"]) == (
            orphans["orphans"], 1)
        assert runs["manifest-tombstone"]["tombstoned"] == \
            runs["manifest-tombstone-floor"]["tombstoned"] == orphans["union"]
        assert runs["in-cost"]["in10000Matched"] == runs["in-cost"]["noInMatched"]
        assert runs["dry"]["tombstoned"] == runs["scan-floor"]["tombstoned"] == 0
        assert runs["tombstone"]["tombstoned"] == runs["tombstone-floor"]["tombstoned"] == \
            runs["where-floor"]["tombstoned"] == stale
        assert runs["tombstone"]["remaining"] == int(size) - stale
        for run in runs.values():
            assert run["inProcessS"] > 0 and "peakRssGrowthMiB" in run
    assert {"dry", "tombstone", "scan-floor", "tombstone-floor"} <= reconcile["timeGrowth"].keys()
    assert set(reconcile["whereFloorOverTombstoneFloor"]) == set(reconcile["runs"])
    assert set(reconcile["inCostS"]) == set(reconcile["runs"])


def test_the_scale_section_runs_every_contender_over_many_tenants(
    smoke_run: tuple[list[str], dict[str, Any], set[Path]],
) -> None:
    scale = smoke_run[1]["scale"]
    assert scale["consistent"], scale["problems"]
    for runs in scale["runs"].values():
        assert set(runs) == {"dry", "tombstone", "scan-floor", "tombstone-floor"}
        tenants = {r["tenants"] for r in runs.values()}
        assert tenants == {runs["dry"]["tenantsSeen"]} and tenants.pop() > 1
        assert runs["tombstone"]["tombstoned"] == runs["tombstone-floor"]["tombstoned"] > 0
        for run in runs.values():
            assert run["msPerTenant"] > 0 and run["usPerChunk"] > 0
        assert runs["dry"]["overFloor"] > 0 and runs["tombstone"]["overFloor"] > 0


def test_the_drain_on_a_neo_graph_ends_with_the_graph_its_floor_ends_with(
    smoke_run: tuple[list[str], dict[str, Any], set[Path]],
) -> None:
    neo, embedded = smoke_run[1]["drain-neo"], smoke_run[1]["drain"]
    assert neo["consistent"], neo["mismatches"]
    assert set(neo["contenders"]) == {"drainer", "floor"}
    assert neo["expected"] == embedded["expected"]
    assert neo["contenders"]["drainer"]["edges"] == embedded["expected"]["edgesAfter"]
    assert neo["drainerOverFloor"] > 0


def test_the_drain_over_a_server_links_what_the_embedded_drain_links(
    smoke_run: tuple[list[str], dict[str, Any], set[Path]],
) -> None:
    server, embedded = smoke_run[1]["drain-server"], smoke_run[1]["drain"]
    assert server["consistent"], server["mismatches"]
    assert set(server["contenders"]) == {"drainer", "floor"}
    assert server["expected"] == embedded["expected"]
    assert server["drainerOverFloor"] > 0


def test_the_postgres_rows_drain_and_reconcile_on_the_server_with_two_drainers_alike(
    smoke_run: tuple[list[str], dict[str, Any], set[Path]],
) -> None:
    lines, report = smoke_run[0], smoke_run[1]
    postgres = report["postgres"]
    # The session's server, named by $KB_BENCH_PG_URL, runs with fsync off: the report says so.
    assert postgres["server"]["source"] == f"${postgres_bench.URL_VARIABLE}"
    assert postgres["server"]["fsync"] == "off"
    assert any(line.startswith("On PostgreSQL:") and "fsync=off" in line for line in lines)
    drain = postgres["drain"]
    assert drain["consistent"], drain["mismatches"]
    assert drain["expected"] == report["drain"]["expected"]
    assert set(drain["contenders"]) == set(postgres_bench.SMOKE_DRAIN_CONTENDERS)
    for contender in drain["contenders"].values():
        assert contender["linked"] == drain["expected"]["linked"] > 0
        assert contender["edges"] == drain["expected"]["edgesAfter"]
    # Two drainers, half the lines each, leave exactly the graph one drainer leaves.
    pair = drain["contenders"]["pair"]
    assert len(pair["drainersS"]) == 2 and all(s > 0 for s in pair["drainersS"])
    assert pair["malformed"] == drain["expected"]["malformed"] > 0
    assert drain["pairSameGraph"]
    assert drain["fingerprints"]["pair"] == drain["fingerprints"]["drainer"]
    assert drain["drainerOverFloor"] > 0 and drain["pairOverDrainer"] > 0
    reconcile = postgres["reconcile"]
    assert reconcile["consistent"], reconcile["mismatches"]
    assert set(reconcile["contenders"]) == set(postgres_bench.SMOKE_RECONCILE_CONTENDERS)
    for contender in reconcile["contenders"].values():
        assert contender["tombstoned"] == reconcile["stale"] > 0
    assert reconcile["contenders"]["floor"]["stateS"] > 0
    assert any(t["name"].startswith("drain (PostgreSQL):") for t in postgres["targets"])


def test_the_idle_daemon_is_measured_and_stops_cleanly(
    smoke_run: tuple[list[str], dict[str, Any], set[Path]],
) -> None:
    idle = smoke_run[1]["idle"]
    assert idle["exitCode"] == 0
    assert idle["jobs"] >= 1 and idle["windowS"] >= 3
    assert idle["cpuPercentOfOneCore"] >= 0


def test_every_target_is_reported_with_its_verdict(
    smoke_run: tuple[list[str], dict[str, Any], set[Path]],
) -> None:
    targets = smoke_run[1]["targets"]
    names = " ".join(t["name"] for t in targets)
    for part in ("drainer / floor", "drain (PostgreSQL)", "baseline", "reconcile dry",
                 "reconcile tombstone", "time growth", "peak RSS", "idle"):
        assert part in names
    for target in targets:
        assert {"name", "value", "limit", "kind", "met"} <= target.keys()
        assert isinstance(target["met"], bool)


def test_no_temp_data_is_left_behind(
    smoke_run: tuple[list[str], dict[str, Any], set[Path]],
) -> None:
    assert smoke_run[2] == set()


def test_the_shared_archive_benchmark_measures_both_passes() -> None:
    """`benchmarks.shared_archive_bench` (docs/beyond-one-machine.md, "Archives") at a toy
    size: both passes tombstone everything; the one with the copy spends time copying."""
    from benchmarks.shared_archive_bench import run

    figures = run([(2, 5)], repeats=1)["2x5"]
    assert figures["tombstoned"] == 10
    assert figures["copyS"] > 0 and figures["passWithCopyS"] > 0
    assert figures["passWithoutCopyS"] > 0
