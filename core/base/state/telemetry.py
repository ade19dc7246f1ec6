"""Telemetry statements: one `kb_ingestion_metrics` row per event, and rollups over a window.

For ingestion, recording is a best-effort side channel: a telemetry failure is logged and
never fails the ingestion that reported it (`record_ingestion_metric`). A reconciliation pass
is different (CONTRACT: a pass whose deletions are not recorded has not succeeded): it writes
with `insert_metric_rows`, and a row SQLite refuses goes to the spool
(`core.base.state.telemetry_spool`) until a later pass writes it.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from typing import Any

import structlog

from core.base.io.clock import now_ms
from core.base.rules.telemetry import (
    EVENT_RECONCILE,
    MetricRow,
    MetricWindow,
    RollupScope,
    StaleReport,
    build_metric_row,
    rollup_row,
    tenant_or_default,
)
from core.base.state.graph_db import GraphDB

log = structlog.get_logger(__name__)



def new_metric_row(*, timestamp_ms: int | None = None, **fields: Any) -> MetricRow:
    """A telemetry row with a fresh id, stamped now unless `timestamp_ms` says when."""
    return build_metric_row(row_id=str(uuid.uuid4()), timestamp_ms=timestamp_ms or now_ms(),
                            **fields)


async def insert_metric_rows(graph: GraphDB, rows: Sequence[MetricRow]) -> None:
    """Insert rows in one transaction (StoreUnavailable when refused); an id already there is
    left as it is, so writing a spooled row twice is harmless."""
    if not rows:
        return
    async with graph.write() as tx:
        await tx.executemany(tx.sql.insert_metric, [r.params() for r in rows])


async def record_ingestion_metric(graph: GraphDB, **fields: Any) -> str | None:
    """Append one telemetry event and return its id; on any failure log it and return None
    (best effort: see the module docstring)."""
    row: MetricRow | None = None
    try:
        row = new_metric_row(**fields)
        await insert_metric_rows(graph, [row])
    except Exception:
        log.error("telemetry.record_failed", tenant=row.tenant_id if row else None,
                  eventType=fields.get("event_type"), exc_info=True)
        return None
    return row.id


async def ingestion_rollup(
    graph: GraphDB,
    window: MetricWindow,
    *,
    per: RollupScope = "repo",
    tenant_id: str | None = None,
) -> list[dict[str, Any]]:
    """Aggregate the events of `window`, one dict per (tenant, repo) or per tenant
    (`rollup_row`). A failing read raises: an alerting pass that cannot see the telemetry
    must fail visibly, not report that all is quiet."""
    tenant = tenant_or_default(tenant_id) if tenant_id is not None else None
    statement = graph.sql.rollup_by_repo if per == "repo" else graph.sql.rollup_by_tenant
    rows = await graph.query(statement, (window.since_ms, window.until_ms, tenant, tenant))
    if per == "repo":
        return [rollup_row(r[0], r[1], tuple(r[2:])) for r in rows]
    return [rollup_row(r[0], None, tuple(r[1:])) for r in rows]


async def last_stale_counts(graph: GraphDB) -> dict[str, StaleReport]:
    """Each tenant's latest `reconcile` event, by tenant id (a clean tenant writes none, so an
    older report than the last completed tick means the tenant was clean on it)."""
    rows = await graph.query(graph.sql.last_reconcile, (EVENT_RECONCILE, EVENT_RECONCILE))
    reports: dict[str, StaleReport] = {}
    for tenant, repo, timestamp, total, deleted, detail in rows:
        try:
            parsed = json.loads(detail) if detail else {}
        except ValueError:
            parsed = {}
        reports[tenant] = StaleReport(
            tenant_id=tenant,
            repo_slug=repo,
            timestamp_ms=int(timestamp),
            stale_count=int(total or 0),
            tombstoned_count=int(deleted or 0),
            detail=parsed if isinstance(parsed, dict) else {},
        )
    return reports


async def recorded_repos(graph: GraphDB) -> dict[str, str]:
    """Each tenant's smallest repo among its recorded events, by tenant id: the repo the
    original's reconciler names the tenant's telemetry by."""
    rows = await graph.query(graph.sql.first_repo_by_tenant)
    return {str(tenant): str(repo) for tenant, repo in rows if repo is not None}
