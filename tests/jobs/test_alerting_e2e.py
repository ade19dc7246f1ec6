"""End to end: a real reconcile pass over seeded Chroma chunks finds drift and records its
telemetry; a real alerting pass, through the same tick runner as `--tick`, turns it into
alerts. Reconciliation itself never dispatches an alert."""

from __future__ import annotations

from pathlib import Path

from structlog.testing import capture_logs

from core.alerting.alerting_pass import alerting_tick
from core.alerting.stores.alert_records import recent_alerts
from core.base.chroma import VectorStore
from core.base.runtime.context import TickContext
from core.base.state.graph_db import GraphDB
from core.base.state.tenants import set_tenant_config
from core.reconcile.run_pass import reconcile_tick
from core.suite.tick import run_tick
from tests.support import count_rows, make_settings, seed


async def test_a_reconcile_pass_with_drift_then_an_alerting_pass_fires_the_alert(
    tmp_path: Path, graph: GraphDB, vectors: VectorStore
) -> None:
    settings = make_settings(
        tmp_path,
        reconciliationEnabled=True,
        alertingEnabled=True,
        alertRules=[
            {"metric": "reconcileEvents", "threshold": 0, "severity": "warning",
             "channels": ["console"]},
            {"metric": "chunksTotal", "threshold": 2, "severity": "critical",
             "channels": ["console"], "scope": "repo"},
        ],
    )
    stores = TickContext(settings, graph, vectors)
    # t1 re-configured twice since its chunks were ingested (drift); t2 up to date (clean).
    for _ in range(2):
        await set_tenant_config(graph, "t1", repo_slug="t1-docs")
    await set_tenant_config(graph, "t2", repo_slug="t2-docs")
    await seed(vectors, settings.chroma.knowledge_base_collection, [
        *[(f"t1-{i}", {"tenantId": "t1", "repoSlug": "t1-docs", "tenantConfigVersion": 1,
                       "sourcePath": f"docs/{i}.md", "ingestedAt": 1}) for i in range(3)],
        ("t2-0", {"tenantId": "t2", "repoSlug": "t2-docs", "tenantConfigVersion": 1,
                  "sourcePath": "docs/0.md", "ingestedAt": 1}),
    ])

    with capture_logs() as reconcile_logs:
        reconciled = (await run_tick("reconcile", stores, reconcile_tick, dry_run=False)).json()
    assert reconciled["staleCount"] == 3
    assert not [e for e in reconcile_logs if e["event"] == "alert.fired"]
    assert await recent_alerts(graph) == []

    with capture_logs() as logs:
        figures = (await run_tick("alerting", stores, alerting_tick, dry_run=False)).json()
    assert [a["subject"] for a in figures["alerts"]] == [
        "[alert] warning: reconcileEvents 1 over threshold 0 (tenant t1)",
        "[alert] critical: chunksTotal 3 over threshold 2 (tenant t1, repo t1-docs)",
    ]
    assert [(e["log_level"], e["tenantId"]) for e in logs if e["event"] == "alert.fired"] == [
        ("warning", "t1"), ("error", "t1")]
    recorded = await recent_alerts(graph)
    assert [(r.alert.tenant_id, r.alert.metric, r.delivered) for r in recorded] == [
        ("t1", "chunksTotal", True), ("t1", "reconcileEvents", True)]

    # Drift persists on the next pass, but the alerts are cooling down.
    await run_tick("reconcile", stores, reconcile_tick, dry_run=False)
    again = (await run_tick("alerting", stores, alerting_tick, dry_run=False)).json()
    assert (again["fired"], again["suppressed"]) == (0, 2)
    assert await count_rows(graph, "alerts_fired") == 2
