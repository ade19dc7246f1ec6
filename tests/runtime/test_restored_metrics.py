"""What the exporter restores at start: the rule over the records, the last-success stamp kept
beside the latest tick, and the series exported before the first tick."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from core.base.rules.camel_json import to_json
from core.base.state.daemon_state import TickRecord, last_success_stamps, last_ticks, record_tick
from core.base.state.sqlite import SqliteGraph
from core.reconcile.rules.reconcile_outcome import ReconcileFigures, TenantFigures
from core.suite.metrics import OUTCOMES, Metrics
from core.suite.metrics_reads import read_restored_metrics
from core.suite.restored_metrics import (
    RestoredMetrics,
    restored_metrics,
    tenant_figures_from_json,
)
from core.suite.tick import Job
from tests.support import make_settings


def tenant(name: str, *, stale: int = 1, guard: str | None = None) -> TenantFigures:
    return TenantFigures(tenant_id=name, repo_slug=None, current_version=2, scanned=5,
                         stale_count=stale, manifest_orphan_count=0, total_orphan_count=stale,
                         missing_path_count=4, actionable_count=stale, held_count=0,
                         tombstoned_count=0, guard=guard)


def one_tenant_pass(figures: TenantFigures) -> ReconcileFigures:
    """A pass's figures with this one tenant in them."""
    empty = ReconcileFigures.of([], enabled=True, auto_tombstone=True, pass_id="p",
                                spool_flushed=0, unrecorded_rows=0, stopped=False)
    return replace(empty, tenants=(figures,))


def samples(metrics: Metrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = generate_latest(metrics.registry).decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


async def noop(_context: Any, _dry_run: bool) -> Any:
    raise AssertionError("never ticked here")


async def test_the_last_success_survives_a_later_failed_tick(tmp_path: Path) -> None:
    graph = await SqliteGraph.open(tmp_path / "g.sqlite")
    try:
        await record_tick(graph, TickRecord("reconcile", 1_000, 5_000, 4_000, True,
                                            {"tenants": [to_json(tenant("acme"))]}))
        await record_tick(graph, TickRecord("reconcile", 9_000, 9_500, 500, False,
                                            {"error": "cancelled"}))
        ticks, stamps = await last_ticks(graph), await last_success_stamps(graph)
    finally:
        await graph.close()
    assert stamps == {"reconcile": 5_000}
    restored = restored_metrics(["reconcile"], ticks=ticks, success_stamps_ms=stamps)
    assert restored.last_success_s == {"reconcile": 5.0}
    assert restored.tenants == (), "a tick that raised records no tenant figures"


def test_state_from_before_the_stamp_takes_the_latest_ok_tick() -> None:
    ticks = {"drain": TickRecord("drain", 1, 7_250, 7_249, True, {})}
    assert restored_metrics(["drain"], ticks=ticks, success_stamps_ms={}).last_success_s \
        == {"drain": 7.25}


def test_a_job_that_never_succeeded_and_jobs_of_other_processes_are_not_restored() -> None:
    ticks = {"drain": TickRecord("drain", 1, 2, 1, False, {"error": "x"}),
             "reconcile": TickRecord("reconcile", 1, 3_000, 1, True,
                                     {"tenants": [to_json(tenant("acme"))]})}
    restored = restored_metrics(["drain"], ticks=ticks, success_stamps_ms={"reconcile": 3_000})
    assert restored == RestoredMetrics({}, ())


def test_tenant_figures_read_back_exactly_and_a_damaged_entry_is_skipped() -> None:
    figures = tenant("acme", stale=3, guard="stale-fraction")
    assert tenant_figures_from_json(to_json(figures)) == figures
    damaged = [{**to_json(figures), "staleCount": "3"}, {**to_json(figures), "tenantId": ""},
               {**to_json(figures), "heldCount": True}, "acme", None]
    assert [tenant_figures_from_json(d) for d in damaged] == [None] * len(damaged)
    ticks = {"reconcile": TickRecord("reconcile", 1, 2, 1, True,
                                     {"tenants": [*damaged, to_json(figures)]})}
    assert restored_metrics(["reconcile"], ticks=ticks, success_stamps_ms={}).tenants \
        == (figures,)


async def test_every_series_exists_before_the_first_tick_with_counters_at_zero(
    tmp_path: Path,
) -> None:
    settings = make_settings(tmp_path)
    metrics = Metrics(settings)
    metrics.start([Job("drain", noop, 60_000), Job("reconcile", noop, 3_600_000)],
                  RestoredMetrics({"reconcile": 12.5},
                                  (tenant("acme"), tenant("held", guard="stale-fraction"))))
    got = samples(metrics)
    for job in ("drain", "reconcile"):
        assert all(got[("kb_ticks_total", (("job", job), ("outcome", o)))] == 0
                   for o in OUTCOMES)
        assert got[("kb_tick_duration_seconds_count", (("job", job),))] == 0
        assert got[("kb_tick_in_progress", (("job", job),))] == 0
    assert got[("kb_job_interval_seconds", (("job", "drain"),))] == 60
    assert got[("kb_last_success_timestamp_seconds", (("job", "reconcile"),))] == 12.5
    assert ("kb_last_success_timestamp_seconds", (("job", "drain"),)) not in got
    assert got[("kb_missing_paths", (("tenant", "acme"),))] == 4
    assert got[("kb_tenant_held", (("guard", ""), ("tenant", "acme")))] == 0
    assert got[("kb_tenant_held", (("guard", "stale-fraction"), ("tenant", "held")))] == 1
    assert got[("kb_tombstoned_chunks_total", (("tenant", "held"),))] == 0


async def test_a_tenant_shows_only_the_guard_of_its_last_pass(tmp_path: Path) -> None:
    metrics = Metrics(make_settings(tmp_path))
    metrics.start([], RestoredMetrics({}, (tenant("t1", guard="stale-fraction"),)))
    metrics.tick_started("reconcile")
    assert samples(metrics)[("kb_tick_in_progress", (("job", "reconcile"),))] == 1
    metrics.observe_tick("reconcile", outcome="ok", duration_s=1.0,
                         figures=one_tenant_pass(tenant("t1")), finished_ts=20.0)
    held = {k: v for k, v in samples(metrics).items() if k[0] == "kb_tenant_held"}
    assert held == {("kb_tenant_held", (("guard", ""), ("tenant", "t1"))): 0}
    assert samples(metrics)[("kb_tick_in_progress", (("job", "reconcile"),))] == 0


async def test_a_store_that_does_not_exist_restores_nothing_and_creates_nothing(
    tmp_path: Path,
) -> None:
    settings = make_settings(tmp_path)
    restored = await read_restored_metrics(settings, [Job("drain", noop, 1_000)])
    assert restored == RestoredMetrics()
    assert not settings.state.graph_db_path.exists() and not settings.data_dir.exists()
