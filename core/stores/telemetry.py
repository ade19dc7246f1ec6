"""Telemetry statements: one `kb_ingestion_metrics` row per event, and rollups over a window.

For ingestion, recording is a best-effort side channel: a telemetry failure is logged and
never fails the ingestion that reported it (`record_ingestion_metric`). A reconciliation pass
is different (CONTRACT: a pass whose deletions are not recorded has not succeeded): it writes
with `insert_metric_rows`, and a row SQLite refuses goes to the spool
(`core.stores.telemetry_spool`) until a later pass writes it.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from typing import Any

import structlog

from core.rules.telemetry import (
    EVENT_ERROR,
    EVENT_INGEST,
    EVENT_RECONCILE,
    EVENT_TOMBSTONE,
    MetricRow,
    MetricWindow,
    RollupScope,
    StaleReport,
    build_metric_row,
    rollup_row,
    tenant_or_default,
)
from core.stores.clock import now_ms
from core.stores.sqlite import GraphDB

log = structlog.get_logger(__name__)

_INSERT_METRIC = """
INSERT OR IGNORE INTO kb_ingestion_metrics(
    id, timestamp, tenant_id, repo_slug, origin_agent, event_type,
    chunks_total, chunks_embedded, chunks_deleted, duration_ms, error_code, detail
) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
"""

# The figures in KNOWN_METRICS order except errorRate, which is computed from two of them.
_ROLLUP_COLUMNS = f"""
    COUNT(*),
    SUM(event_type = '{EVENT_INGEST}'),
    SUM(event_type = '{EVENT_TOMBSTONE}'),
    SUM(event_type = '{EVENT_RECONCILE}'),
    SUM(event_type = '{EVENT_ERROR}'),
    COALESCE(SUM(chunks_embedded), 0),
    COALESCE(SUM(chunks_deleted), 0),
    COALESCE(SUM(chunks_total), 0),
    COALESCE(MAX(CASE WHEN event_type = '{EVENT_RECONCILE}' AND json_valid(detail)
                      THEN CAST(json_extract(detail, '$.missingPathCount') AS INTEGER) END), 0)
"""
_LAST_RECONCILE = (
    "SELECT tenant_id, repo_slug, timestamp, chunks_total, chunks_deleted, detail "
    "FROM kb_ingestion_metrics AS m WHERE event_type = ? AND id = ("
    "  SELECT id FROM kb_ingestion_metrics WHERE event_type = ? AND tenant_id = m.tenant_id"
    "  ORDER BY timestamp DESC, rowid DESC LIMIT 1"
    ") ORDER BY tenant_id"
)


def new_metric_row(*, timestamp_ms: int | None = None, **fields: Any) -> MetricRow:
    """A telemetry row with a fresh id, stamped now unless `timestamp_ms` says when (fields
    as `build_metric_row`)."""
    return build_metric_row(row_id=str(uuid.uuid4()), timestamp_ms=timestamp_ms or now_ms(),
                            **fields)


async def insert_metric_rows(graph: GraphDB, rows: Sequence[MetricRow]) -> None:
    """Insert rows in one transaction; raises (StoreUnavailable) when SQLite refuses. A row
    whose id is already there is left as it is, so writing a spooled row twice is harmless."""
    if not rows:
        return
    async with graph.write() as tx:
        await tx.executemany(_INSERT_METRIC, [r.params() for r in rows])


async def record_ingestion_metric(graph: GraphDB, **fields: Any) -> str | None:
    """Append one telemetry event (fields as `new_metric_row`) and return its id; on any
    failure log it and return None.

    Never raises into its caller: telemetry must not be the reason an ingestion fails. A
    caller whose work is not done until it is recorded (a reconciliation pass) uses
    `insert_metric_rows` and the spool instead.
    """
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
    """Aggregate the events of `window`, one dict per (tenant, repo) or per tenant.

    Each dict has `tenantId`, `repoSlug` (only when `per="repo"`) and every KNOWN_METRICS
    figure; `errorRate` is errorEvents / eventCount, 0 for no events. Unlike recording, a
    failing read raises (StoreUnavailable): an alerting pass that cannot see the telemetry
    must fail visibly, not report that all is quiet.
    """
    group = "tenant_id, repo_slug" if per == "repo" else "tenant_id"
    conditions = ["timestamp >= ?", "timestamp < ?"]
    params: list[Any] = [window.since_ms, window.until_ms]
    if tenant_id is not None:
        conditions.append("tenant_id = ?")
        params.append(tenant_or_default(tenant_id))
    rows = await graph.query(
        f"SELECT {group}, {_ROLLUP_COLUMNS} FROM kb_ingestion_metrics "
        f"WHERE {' AND '.join(conditions)} GROUP BY {group} ORDER BY {group}",
        params,
    )
    if per == "repo":
        return [rollup_row(r[0], r[1], tuple(r[2:])) for r in rows]
    return [rollup_row(r[0], None, tuple(r[1:])) for r in rows]


async def last_stale_counts(graph: GraphDB) -> dict[str, StaleReport]:
    """Each tenant's latest `reconcile` event, by tenant id.

    A clean tenant writes no event, so a report older than the reconcile daemon's last
    completed tick (see `core.stores.daemon_state.last_ticks`) means the tenant was clean on
    that tick.
    """
    rows = await graph.query(_LAST_RECONCILE, (EVENT_RECONCILE, EVENT_RECONCILE))
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
