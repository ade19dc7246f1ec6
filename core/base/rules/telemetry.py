"""Telemetry (pure): the `kb_ingestion_metrics` row, its `detail`, and the rollup's figures.

The table is event-shaped: writing is one cheap INSERT and aggregation is the reader's job
(`core.base.state.telemetry`). `KNOWN_METRICS` is the one list of rollup figures an alert rule may
name; the rollup query produces them in this order, and `rollup_row` adds `errorRate`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from core.base.rules.numbers import is_whole_number
from core.base.rules.tenants import normalize_tenant_id

EVENT_INGEST = "ingest"
EVENT_TOMBSTONE = "tombstone"
EVENT_RECONCILE = "reconcile"
EVENT_ERROR = "error"
EVENT_TYPES: tuple[str, ...] = (EVENT_INGEST, EVENT_TOMBSTONE, EVENT_RECONCILE, EVENT_ERROR)
DEFAULT_EVENT_TYPE = EVENT_INGEST

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
    #: The largest `missingPathCount` a `reconcile` row reported in the window (a level, not
    #: an event count: hourly passes reporting the same 3 missing paths are 3, not 3 a pass).
    "missingPaths",
    "errorRate",
)

RollupScope = Literal["repo", "tenant"]

#: The tenant and repo of an event that does not say (the platform's recorder's defaults).
DEFAULT_TENANT_ID = "neo-shared"
DEFAULT_REPO_SLUG = "neo"

def smallest_repo(names: Iterable[Any]) -> str | None:
    """The repo a tenant's telemetry row names when its config names none (pure): the
    alphabetically smallest of the non-empty strings in `names` (the repos the tenant's data
    names: its `tenantRepos`, its manifests, its chunks read by the pass); None when there is
    none, and the row then takes the recorder's default, DEFAULT_REPO_SLUG.

    The smallest, because that is the repo the original's reconciler names (the first row of
    its telemetry rollup, `ORDER BY tenant_id, repo_slug`, whose rows name the repos the
    chunks of the tenant were ingested from): a multi-repo tenant's rows, ours and the
    original's, land on one repo of the health view's (tenant, repo) rows, pass after pass."""
    found: str | None = None
    for name in names:
        if isinstance(name, str) and name and (found is None or name < found):
            found = name
    return found


#: Stored instead of a `detail` that cannot be written as JSON (the platform's wording).
UNSERIALIZABLE_DETAIL: Mapping[str, str] = {"error": "Unserializable Value"}


def serialize_detail(detail: Any) -> str | None:
    """`detail` as compact JSON; None stays NULL; anything JSON cannot hold (an object, a
    cycle, NaN) becomes `{"error":"Unserializable Value"}` rather than failing the event."""
    if detail is None:
        return None
    try:
        return json.dumps(detail, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError):
        return json.dumps(dict(UNSERIALIZABLE_DETAIL), separators=(",", ":"))


def tenant_or_default(tenant_id: str | None) -> str:
    """A tenant id normalized, or the default tenant when it is missing or empty."""
    try:
        return normalize_tenant_id(tenant_id) if tenant_id else DEFAULT_TENANT_ID
    except ValueError:
        return DEFAULT_TENANT_ID


@dataclass(frozen=True, slots=True)
class MetricRow:
    """One `kb_ingestion_metrics` row, ready to insert (or to spool when it cannot be)."""

    id: str
    timestamp: int
    tenant_id: str
    repo_slug: str
    origin_agent: str | None
    event_type: str
    chunks_total: int
    chunks_embedded: int
    chunks_deleted: int
    duration_ms: int | None
    error_code: str | None
    #: `detail` already serialized (see `serialize_detail`).
    detail: str | None

    def params(self) -> tuple[Any, ...]:
        """The INSERT parameters, in column order."""
        return (self.id, self.timestamp, self.tenant_id, self.repo_slug, self.origin_agent,
                self.event_type, self.chunks_total, self.chunks_embedded, self.chunks_deleted,
                self.duration_ms, self.error_code, self.detail)

    def as_json(self) -> dict[str, Any]:
        """The spool line's object (field names as the columns)."""
        return dict(zip(_COLUMNS, self.params(), strict=True))

    @classmethod
    def from_json(cls, value: Any) -> MetricRow:
        """A row from a spool line's object; ValueError when it is not one."""
        if not isinstance(value, dict) or set(value) != set(_COLUMNS):
            raise ValueError("not a spooled telemetry row")
        row = cls(*(value[c] for c in _COLUMNS))
        texts = (row.id, row.tenant_id, row.repo_slug, row.event_type)
        counts = (row.timestamp, row.chunks_total, row.chunks_embedded, row.chunks_deleted)
        if not all(isinstance(t, str) and t for t in texts) or not all(
            is_whole_number(n) for n in counts
        ):
            raise ValueError("a spooled telemetry row with a missing or mistyped field")
        return row


_COLUMNS: tuple[str, ...] = (
    "id", "timestamp", "tenant_id", "repo_slug", "origin_agent", "event_type", "chunks_total",
    "chunks_embedded", "chunks_deleted", "duration_ms", "error_code", "detail",
)


def build_metric_row(
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
    row_id: str,
    timestamp_ms: int,
) -> MetricRow:
    """A telemetry row with the recorder's defaults for what the event does not say (tenant
    `neo-shared`, repo `neo`, event `ingest`)."""
    return MetricRow(
        id=row_id,
        timestamp=timestamp_ms,
        tenant_id=tenant_or_default(tenant_id),
        repo_slug=repo_slug or DEFAULT_REPO_SLUG,
        origin_agent=origin_agent or None,
        event_type=event_type or DEFAULT_EVENT_TYPE,
        chunks_total=int(chunks_total),
        chunks_embedded=int(chunks_embedded),
        chunks_deleted=int(chunks_deleted),
        duration_ms=None if duration_ms is None else int(duration_ms),
        error_code=error_code or None,
        detail=serialize_detail(detail),
    )


@dataclass(frozen=True, slots=True)
class MetricWindow:
    """A half-open telemetry window `[since_ms, until_ms)` in epoch ms."""

    since_ms: int
    until_ms: int

    @classmethod
    def ending_at(cls, until_ms: int, *, length_ms: int) -> MetricWindow:
        """The `length_ms` before `until_ms` (for example `alertWindowMs` before now)."""
        return cls(until_ms - length_ms, until_ms)


def rollup_row(tenant_id: str, repo_slug: str | None, figures: tuple[Any, ...]) -> dict[str, Any]:
    """A rollup dict from the SQL figures (pure): integer counts plus errorRate."""
    counts = [int(x or 0) for x in figures]
    row: dict[str, Any] = {"tenantId": tenant_id}
    if repo_slug is not None:
        row["repoSlug"] = repo_slug
    row.update(zip(KNOWN_METRICS[:-1], counts, strict=True))
    row["errorRate"] = row["errorEvents"] / row["eventCount"] if row["eventCount"] else 0.0
    return row


@dataclass(frozen=True, slots=True)
class StaleReport:
    """A tenant's most recent `reconcile` event: the drift it found and what went."""

    tenant_id: str
    repo_slug: str
    timestamp_ms: int
    stale_count: int
    tombstoned_count: int
    detail: Mapping[str, Any]


