"""The alerting pass over a real SQLite graph: rollup scopes, the persistent cooldown, the
record `status` reads, dry runs, the disabled switch and the console channel."""

from __future__ import annotations

from collections.abc import MutableMapping, Sequence
from pathlib import Path
from typing import Any

from structlog.testing import capture_logs

from core.alerting.alerting_pass import alerting_tick
from core.alerting.stores.alert_records import load_cooldowns, recent_alerts
from core.base.chroma import VectorStore
from core.base.config.alert_rules import ALL_REPOS
from core.base.config.config import Settings, resolve_config
from core.base.rules.camel_json import to_json
from core.base.rules.telemetry import EVENT_RECONCILE
from core.base.runtime.context import TickContext
from core.base.state.graph_db import GraphDB
from core.base.state.state import open_graph
from core.base.state.telemetry import record_ingestion_metric
from core.suite.status import RecentAlert
from core.suite.tick import open_context
from tests.support import count_rows, make_settings

NOW = 1_700_000_000_000
MINUTE_MS = 60_000
HOUR_MS = 60 * MINUTE_MS


def drift_rule(**overrides: Any) -> dict[str, Any]:
    rule: dict[str, Any] = {"metric": "reconcileEvents", "threshold": 0, "severity": "warning",
                            "channels": ["console"]}
    return {**rule, **overrides}


def alert_settings(tmp_path: Path, *rules: dict[str, Any], **overrides: Any) -> Settings:
    """Alerting on, with `rules`, rooted where the `graph` fixture's file is."""
    table: dict[str, Any] = {"alertingEnabled": True, "alertRules": list(rules), **overrides}
    return make_settings(tmp_path, **table)


async def record_drift(
    graph: GraphDB, tenant: str, repo: str, *, at: int = NOW - MINUTE_MS, stale: int = 3
) -> None:
    """A `reconcile` telemetry row, as a reconcile pass writes for a drifting tenant."""
    await record_ingestion_metric(graph, tenant_id=tenant, repo_slug=repo,
                                  event_type=EVENT_RECONCILE, chunks_total=stale,
                                  timestamp_ms=at)


async def tick(settings: Settings, graph: GraphDB, vectors: VectorStore, *, at: int = NOW,
               dry_run: bool = False) -> dict[str, Any]:
    figures: dict[str, Any] = to_json(await alerting_tick(
        TickContext(settings, graph, vectors), dry_run, clock=lambda: at))
    return figures


def fired_events(logs: Sequence[MutableMapping[str, Any]]) -> list[MutableMapping[str, Any]]:
    return [e for e in logs if e["event"] == "alert.fired"]


async def test_two_repos_of_one_tenant_both_alert_under_repo_scope(
    tmp_path: Path, graph: GraphDB, vectors: VectorStore
) -> None:
    settings = alert_settings(tmp_path, drift_rule(scope="repo"))
    await record_drift(graph, "t1", "repo-a")
    await record_drift(graph, "t1", "repo-b")
    figures = await tick(settings, graph, vectors)
    assert figures["fired"] == figures["delivered"] == 2
    assert [(a["repoSlug"], a["value"]) for a in figures["alerts"]] == [
        ("repo-a", 1), ("repo-b", 1)]
    assert len(await load_cooldowns(graph, since_ms=0)) == 2


async def test_a_tenant_scope_rule_adds_up_the_tenants_repos(
    tmp_path: Path, graph: GraphDB, vectors: VectorStore
) -> None:
    settings = alert_settings(tmp_path, drift_rule(threshold=1))
    await record_drift(graph, "t1", "repo-a")
    await record_drift(graph, "t1", "repo-b")
    await record_drift(graph, "t2", "repo-c")
    figures = await tick(settings, graph, vectors)
    assert [(a["tenantId"], a["repoSlug"], a["value"]) for a in figures["alerts"]] == [
        ("t1", ALL_REPOS, 2)]
    assert figures["alerts"][0]["subject"] == \
        "[alert] warning: reconcileEvents 2 over threshold 1 (tenant t1)"


async def test_a_restart_inside_the_cooldown_does_not_fire_again(
    tmp_path: Path, graph: GraphDB, vectors: VectorStore
) -> None:
    settings = alert_settings(tmp_path, drift_rule())
    await record_drift(graph, "t1", "neo")
    assert (await tick(settings, graph, vectors))["fired"] == 1
    # A new process: a fresh connection to the same file, nothing carried over in memory.
    restarted = await open_graph(settings.state)
    try:
        later = NOW + 10 * MINUTE_MS
        await record_drift(restarted, "t1", "neo", at=later - MINUTE_MS)
        again = await tick(settings, restarted, vectors, at=later)
        assert (again["fired"], again["suppressed"]) == (0, 1)
        released = await tick(settings, restarted, vectors, at=NOW + HOUR_MS)
        assert released["fired"] == 1
    finally:
        await restarted.close()
    assert await count_rows(graph, "alerts_fired") == 2


async def test_every_fired_alert_is_recorded_for_status_newest_first(
    tmp_path: Path, graph: GraphDB, vectors: VectorStore
) -> None:
    settings = alert_settings(tmp_path, drift_rule(), drift_rule(severity="critical",
                                                                 metric="chunksTotal",
                                                                 threshold=2))
    await record_drift(graph, "t1", "neo", stale=5)
    await tick(settings, graph, vectors)
    await record_drift(graph, "t2", "docs", at=NOW + MINUTE_MS, stale=1)
    await tick(settings, graph, vectors, at=NOW + 2 * MINUTE_MS)
    recorded = await recent_alerts(graph, 10)
    # Newest first; alerts of one pass in reverse order of firing.
    assert [(r.alert.tenant_id, r.alert.metric) for r in recorded] == [
        ("t2", "reconcileEvents"), ("t1", "chunksTotal"), ("t1", "reconcileEvents")]
    assert {k: v for k, v in to_json(RecentAlert.of(recorded[1])).items() if k != "firedAtIso"} == {
        "firedAt": NOW, "tenantId": "t1", "repoSlug": ALL_REPOS, "metric": "chunksTotal",
        "value": 5.0, "threshold": 2.0, "severity": "critical", "channel": "console",
        "subject": "[alert] critical: chunksTotal 5 over threshold 2 (tenant t1)",
        "delivered": True, "error": None,
    }
    assert len(await recent_alerts(graph, 1)) == 1


async def test_a_dry_run_reports_what_would_fire_and_writes_nothing(
    tmp_path: Path, graph: GraphDB, vectors: VectorStore
) -> None:
    # Alerting is off: a dry run still evaluates, so an operator can try rules first.
    settings = alert_settings(tmp_path, drift_rule(), alertingEnabled=False)
    await record_drift(graph, "t1", "neo")
    # The -shm file is a readers' index that any reader touches; the data is the rest.
    files = [f for f in settings.state.graph_db_path.parent.glob("graph.sqlite*")
             if not f.name.endswith("-shm")]
    before = {f.name: f.read_bytes() for f in files}
    with capture_logs() as logs:
        async with open_context(settings, dry_run=True, vectors=vectors) as dry:
            figures = to_json(await alerting_tick(dry, True, clock=lambda: NOW))
    assert (figures["fired"], figures["delivered"]) == (1, 0)
    assert figures["alerts"][0]["subject"].startswith("[alert] warning: reconcileEvents 1")
    assert fired_events(logs) == [], "a dry run sends nothing"
    assert {f.name: f.read_bytes() for f in files} == before
    assert await count_rows(graph, "alerts_fired") == 0
    assert await load_cooldowns(graph, since_ms=0) == {}


async def test_disabled_alerting_logs_so_and_does_nothing(
    tmp_path: Path, graph: GraphDB, vectors: VectorStore
) -> None:
    settings = alert_settings(tmp_path, drift_rule(), alertingEnabled=False)
    await record_drift(graph, "t1", "neo")
    with capture_logs() as logs:
        figures = await tick(settings, graph, vectors)
    assert figures == {"enabled": False, "fired": 0}
    assert [e["message"] for e in logs if e["event"] == "alerting.disabled"] == [
        "alerting disabled (set alertingEnabled = true to run passes)"]
    assert await count_rows(graph, "alerts_fired") == 0


async def test_each_invalid_rule_is_warned_once_at_load_and_the_valid_ones_still_fire(
    tmp_path: Path, graph: GraphDB, vectors: VectorStore
) -> None:
    table = {"dataDir": str(tmp_path / "data"), "alertingEnabled": True,
             "alertRules": [drift_rule(channels=["a2a:ops"]), drift_rule(metric="driftEvents"),
                            drift_rule(scop="repo")]}
    loaded = resolve_config({"knowledgeBase": table}, base_dir=tmp_path)
    warned = [(w.key, *w.message.split(" ")[:2]) for w in loaded.warnings]
    assert warned == [("alertRules", "knowledgeBase.alertRules[0]", "skipped:"),
                      ("alertRules", "knowledgeBase.alertRules[1]", "skipped:"),
                      ("alertRules", "knowledgeBase.alertRules[2]", "unknown")]
    assert "scop" in loaded.warnings[2].message
    await record_drift(graph, "t1", "neo")
    for at in (NOW, NOW + MINUTE_MS):
        with capture_logs() as logs:
            figures = await tick(loaded.settings, graph, vectors, at=at)
        assert not [e for e in logs if "rule" in e["event"]], "never again on each pass"
        assert (figures["rules"], figures["invalidRules"]) == (3, 2)
    assert await count_rows(graph, "alerts_fired") == 1


async def test_telemetry_older_than_the_window_is_not_counted(
    tmp_path: Path, graph: GraphDB, vectors: VectorStore
) -> None:
    settings = alert_settings(tmp_path, drift_rule(), alertWindowMs=HOUR_MS)
    await record_drift(graph, "t1", "neo", at=NOW - HOUR_MS - 1)
    assert (await tick(settings, graph, vectors))["fired"] == 0
    await record_drift(graph, "t1", "neo", at=NOW - HOUR_MS)
    assert (await tick(settings, graph, vectors))["fired"] == 1


async def test_no_valid_rule_reads_no_telemetry_and_fires_nothing(
    tmp_path: Path, graph: GraphDB, vectors: VectorStore
) -> None:
    settings = alert_settings(tmp_path)
    await record_drift(graph, "t1", "neo")
    figures = await tick(settings, graph, vectors)
    assert (figures["rules"], figures["rowsEvaluated"], figures["fired"]) == (0, 0, 0)


async def test_the_console_channel_logs_critical_at_error_and_warning_at_warning(
    tmp_path: Path, graph: GraphDB, vectors: VectorStore
) -> None:
    settings = alert_settings(tmp_path, drift_rule(), drift_rule(severity="critical"))
    await record_drift(graph, "t1", "neo")
    with capture_logs() as logs:
        await tick(settings, graph, vectors)
    events = fired_events(logs)
    assert [(e["log_level"], e["severity"]) for e in events] == [
        ("warning", "warning"), ("error", "critical")]
    assert events[1]["subject"] == \
        "[alert] critical: reconcileEvents 1 over threshold 0 (tenant t1)"
    assert {k: events[1][k] for k in ("tenantId", "repoSlug", "metric", "value", "threshold",
                                      "channel", "deliveryMode")} == {
        "tenantId": "t1", "repoSlug": ALL_REPOS, "metric": "reconcileEvents", "value": 1,
        "threshold": 0, "channel": "console", "deliveryMode": "wake"}
