"""The benchmarks keep working: `python -m benchmarks --smoke` runs every benchmark at tiny sizes
and its report has the promised shape, with every contender having done the same work. The
sections run as two smoke runs, this module's and tests/test_benchmarks_smoke_reconcile.py's,
so that two test workers share them.

Speed is never asserted here (the machine is shared and the sizes are tiny); `make bench` runs
the full sizes and the README records those figures.
"""

from __future__ import annotations

import pytest

from benchmarks import postgres_bench
from tests.bench_smoke import SmokeRun, run_smoke
from tests.postgres_server import PostgresServer

#: This module's sections: the drain's three stores, PostgreSQL (which compares its drain with
#: the embedded one), the legacy path, the idle daemon and the commands' start-up.
DRAIN_SECTIONS = ("drain", "drain-server", "drain-neo", "postgres", "legacy", "idle", "startup")


@pytest.fixture(scope="module")
def smoke_run(
    tmp_path_factory: pytest.TempPathFactory, postgres_server: PostgresServer,
) -> SmokeRun:
    """The drain, PostgreSQL, legacy and idle sections' smoke run, shared by the tests below
    (the reconcile and scale sections run beside it: tests/test_benchmarks_smoke_reconcile.py)."""
    return run_smoke(tmp_path_factory, postgres_server, DRAIN_SECTIONS)


def test_stdout_ends_with_exactly_one_json_object(
    smoke_run: SmokeRun,
) -> None:
    lines, report, _ = smoke_run
    objects = [line for line in lines if line.startswith("{")]
    assert objects == [lines[-1]]
    assert report["mode"] == "smoke"
    assert {*DRAIN_SECTIONS, "targets", "machine"} <= report.keys()
    assert any(line.startswith("Drain:") for line in lines)
    assert any(line.startswith("Targets") for line in lines)


def test_every_drain_contender_ends_with_the_same_graph(
    smoke_run: SmokeRun,
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


def test_the_drain_on_a_neo_graph_ends_with_the_graph_its_floor_ends_with(
    smoke_run: SmokeRun,
) -> None:
    neo, embedded = smoke_run[1]["drain-neo"], smoke_run[1]["drain"]
    assert neo["consistent"], neo["mismatches"]
    assert set(neo["contenders"]) == {"drainer", "floor"}
    assert neo["expected"] == embedded["expected"]
    assert neo["contenders"]["drainer"]["edges"] == embedded["expected"]["edgesAfter"]
    assert neo["drainerOverFloor"] > 0


def test_the_drain_over_a_server_links_what_the_embedded_drain_links(
    smoke_run: SmokeRun,
) -> None:
    server, embedded = smoke_run[1]["drain-server"], smoke_run[1]["drain"]
    assert server["consistent"], server["mismatches"]
    assert set(server["contenders"]) == {"drainer", "floor"}
    assert server["expected"] == embedded["expected"]
    assert server["drainerOverFloor"] > 0


def test_the_postgres_rows_drain_and_reconcile_on_the_server_with_two_drainers_alike(
    smoke_run: SmokeRun,
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
    smoke_run: SmokeRun,
) -> None:
    idle = smoke_run[1]["idle"]
    assert idle["exitCode"] == 0
    assert idle["jobs"] >= 1 and idle["windowS"] >= 3
    assert idle["cpuPercentOfOneCore"] >= 0


def test_each_command_start_up_is_timed_against_a_bare_interpreter(
    smoke_run: SmokeRun,
) -> None:
    lines, report = smoke_run[0], smoke_run[1]
    startup = report["startup"]
    commands = startup["commands"]
    assert commands.keys() == {"bare", "status", "health", "tenants-show", "explain"}
    assert commands["bare"]["command"] == "python -c pass"
    assert commands["bare"]["overBareS"] == 0
    for row in commands.values():
        assert len(row["runsS"]) == startup["runs"] >= 1
        assert 0 < row["minS"] <= row["medianS"]
        assert row["cpuMedianS"] > 0
        assert row["overBareS"] == pytest.approx(row["medianS"] - startup["bareS"], abs=0.002)
    assert {name for name, row in commands.items() if row["targeted"]} == {
        "status", "health", "tenants-show"}
    [target] = startup["targets"]
    assert target["name"].startswith("start-up: status/tenants/health within 0.3 s")
    assert target["value"] == max(commands[name]["overBareS"]
                                  for name in ("status", "health", "tenants-show"))
    assert any(line.startswith("Start-up:") for line in lines)


def test_every_target_is_reported_with_its_verdict(
    smoke_run: SmokeRun,
) -> None:
    targets = smoke_run[1]["targets"]
    names = " ".join(t["name"] for t in targets)
    for part in ("drainer / floor", "drain (PostgreSQL)", "baseline", "idle", "start-up"):
        assert part in names
    for target in targets:
        assert {"name", "value", "limit", "kind", "met"} <= target.keys()
        assert isinstance(target["met"], bool)


def test_no_temp_data_is_left_behind(
    smoke_run: SmokeRun,
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
