"""The reconcile and scale benchmarks keep working: their sections of `python -m benchmarks
--smoke`, in a smoke run of their own beside tests/test_benchmarks_smoke.py's (the same
promises: every contender did the same work; speed is never asserted here)."""

from __future__ import annotations

import pytest

from benchmarks import reconcile_bench
from tests.bench_smoke import SmokeRun, run_smoke
from tests.postgres_server import PostgresServer

RECONCILE_SECTIONS = ("reconcile", "scale")


@pytest.fixture(scope="module")
def smoke_run(
    tmp_path_factory: pytest.TempPathFactory, postgres_server: PostgresServer,
) -> SmokeRun:
    """The reconcile and scale sections' smoke run, shared by the tests below."""
    return run_smoke(tmp_path_factory, postgres_server, RECONCILE_SECTIONS)


def test_the_report_holds_both_sections_and_their_targets(smoke_run: SmokeRun) -> None:
    lines, report, _ = smoke_run
    assert [line for line in lines if line.startswith("{")] == [lines[-1]]
    assert {*RECONCILE_SECTIONS, "targets", "machine"} <= report.keys()
    names = " ".join(t["name"] for t in report["targets"])
    for part in ("reconcile dry", "reconcile tombstone", "time growth", "peak RSS"):
        assert part in names


def test_every_reconcile_contender_finds_and_deletes_the_stale_chunks(
    smoke_run: SmokeRun,
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
    smoke_run: SmokeRun,
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


def test_no_temp_data_is_left_behind(smoke_run: SmokeRun) -> None:
    assert smoke_run[2] == set()
