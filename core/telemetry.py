"""Ingestion telemetry: one `kb_ingestion_metrics` row per event, and rollups over a window.

The table is event-shaped, as in the original recorder: writing is one cheap INSERT and
aggregation is the reader's job. Recording is a best-effort side channel: a telemetry failure
is logged and never allowed to fail the ingestion or reconciliation that reported it.

The rollup adds `chunksTotal` to the original's figures (the original left it out, so drift
volume, the stale-chunk count a reconcile row carries, could not be alerted on). The alerting
engine imports `KNOWN_METRICS` from here; it is the one list of rollup metric names.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import structlog

from core.clock import now_ms
from core.tenants import normalize_tenant_id

if TYPE_CHECKING:
    from core.graph import GraphDB

log = structlog.get_logger(__name__)

#: The original recorder's defaults for an event that does not say.
DEFAULT_TENANT_ID = "neo-shared"
DEFAULT_REPO_SLUG = "neo"

EVENT_INGEST = "ingest"
EVENT_TOMBSTONE = "tombstone"
EVENT_RECONCILE = "reconcile"
EVENT_ERROR = "error"
EVENT_TYPES: tuple[str, ...] = (EVENT_INGEST, EVENT_TOMBSTONE, EVENT_RECONCILE, EVENT_ERROR)
DEFAULT_EVENT_TYPE = EVENT_INGEST

#: Stored instead of a `detail` that cannot be written as JSON (the original's wording).
UNSERIALIZABLE_DETAIL: Mapping[str, str] = {"error": "Unserializable Value"}

#: Every figure a rollup row carries, in the order the alerting rules and docs list them.
#: The single list of metric names an alert rule may refer to.
KNOWN_METRICS: tuple[str, ...] = (
    "eventCount",
    "ingestEvents",
    "tombstoneEvents",
    "reconcileEvents",
    "errorEvents",
    "chunksEmbedded",
    "chunksDeleted",
    "chunksTotal",
    "errorRate",
)

RollupScope = Literal["repo", "tenant"]

_INSERT_METRIC = """
INSERT INTO kb_ingestion_metrics(
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
    COALESCE(SUM(chunks_total), 0)
"""


def serialize_detail(detail: Any) -> str | None:
    """`detail` as compact JSON; None stays NULL; anything JSON cannot hold (an object, a
    cycle, NaN) becomes `{"error":"Unserializable Value"}` rather than failing the event."""
    if detail is None:
        return None
    try:
        return json.dumps(detail, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError):
        return json.dumps(dict(UNSERIALIZABLE_DETAIL), separators=(",", ":"))


def _tenant_or_default(tenant_id: str | None) -> str:
    try:
        return normalize_tenant_id(tenant_id) if tenant_id else DEFAULT_TENANT_ID
    except ValueError:
        return DEFAULT_TENANT_ID


async def record_ingestion_metric(
    graph: GraphDB,
    *,
    tenant_id: str | None = None,
    repo_slug: str | None = None,
    event_type: str | None = None,
    origin_agent: str | None = None,
    chunks_total: int = 0,
    chunks_embedded: int = 0,
    chunks_deleted: int = 0,
    duration_ms: int | None = None,
    error_code: str | None = None,
    detail: Any = None,
    timestamp_ms: int | None = None,
) -> str | None:
    """Append one telemetry event and return its id; on any failure log it and return None.

    Never raises into its caller: telemetry must not be the reason an ingestion or a
    reconciliation pass fails. Defaults are the original's (tenant `neo-shared`, repo `neo`,
    event `ingest`, timestamp now).
    """
    metric_id = str(uuid.uuid4())
    tenant = _tenant_or_default(tenant_id)
    try:
        row = (
            metric_id,
            timestamp_ms or now_ms(),
            tenant,
            repo_slug or DEFAULT_REPO_SLUG,
            origin_agent or None,
            event_type or DEFAULT_EVENT_TYPE,
            int(chunks_total),
            int(chunks_embedded),
            int(chunks_deleted),
            None if duration_ms is None else int(duration_ms),
            error_code or None,
            serialize_detail(detail),
        )
        async with graph.write() as tx:
            await tx.conn.execute(_INSERT_METRIC, row)
    except Exception:
        log.error("telemetry.record_failed", tenant=tenant, eventType=event_type,
                  exc_info=True)
        return None
    return metric_id


@dataclass(frozen=True, slots=True)
class MetricWindow:
    """A half-open telemetry window `[since_ms, until_ms)` in epoch ms."""

    since_ms: int
    until_ms: int

    @classmethod
    def ending_at(cls, until_ms: int, *, length_ms: int) -> MetricWindow:
        """The `length_ms` before `until_ms` (for example `alertWindowMs` before now)."""
        return cls(until_ms - length_ms, until_ms)


def _rollup_row(tenant_id: str, repo_slug: str | None, figures: tuple[Any, ...]) -> dict[str, Any]:
    """A rollup dict from the SQL figures (pure): integer counts plus errorRate."""
    counts = [int(x or 0) for x in figures]
    row: dict[str, Any] = {"tenantId": tenant_id}
    if repo_slug is not None:
        row["repoSlug"] = repo_slug
    row.update(zip(KNOWN_METRICS[:-1], counts, strict=True))
    row["errorRate"] = row["errorEvents"] / row["eventCount"] if row["eventCount"] else 0.0
    return row


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
        params.append(_tenant_or_default(tenant_id))
    rows = await graph.fetch_all(
        f"SELECT {group}, {_ROLLUP_COLUMNS} FROM kb_ingestion_metrics "
        f"WHERE {' AND '.join(conditions)} GROUP BY {group} ORDER BY {group}",
        params,
    )
    if per == "repo":
        return [_rollup_row(r[0], r[1], tuple(r[2:])) for r in rows]
    return [_rollup_row(r[0], None, tuple(r[1:])) for r in rows]


@dataclass(frozen=True, slots=True)
class StaleReport:
    """A tenant's most recent `reconcile` event: the drift it found and what went."""

    tenant_id: str
    repo_slug: str
    timestamp_ms: int
    stale_count: int
    tombstoned_count: int
    detail: Mapping[str, Any]

    def as_dict(self) -> dict[str, Any]:
        """The JSON shape `status --json` shows."""
        return {
            "tenantId": self.tenant_id,
            "repoSlug": self.repo_slug,
            "timestamp": self.timestamp_ms,
            "staleCount": self.stale_count,
            "tombstonedCount": self.tombstoned_count,
            "detail": dict(self.detail),
        }


async def last_stale_counts(graph: GraphDB) -> dict[str, StaleReport]:
    """Each tenant's latest `reconcile` event, by tenant id.

    A clean tenant writes no event, so a report older than the reconcile daemon's last
    completed tick (see `core.state.last_ticks`) means the tenant was clean on that tick.
    """
    rows = await graph.fetch_all(
        "SELECT tenant_id, repo_slug, timestamp, chunks_total, chunks_deleted, detail "
        "FROM kb_ingestion_metrics AS m WHERE event_type = ? AND id = ("
        "  SELECT id FROM kb_ingestion_metrics WHERE event_type = ? AND tenant_id = m.tenant_id"
        "  ORDER BY timestamp DESC, rowid DESC LIMIT 1"
        ") ORDER BY tenant_id",
        (EVENT_RECONCILE, EVENT_RECONCILE),
    )
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
