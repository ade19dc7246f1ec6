"""Ingestion telemetry: one `kb_ingestion_metrics` row per event, and rollups over a window.

The table is event-shaped, as in the original recorder: writing is one cheap INSERT and
aggregation is the reader's job. For ingestion, recording is a best-effort side channel: a
telemetry failure is logged and never fails the ingestion that reported it. A reconciliation
pass is different (CONTRACT: a pass whose deletions are not recorded has not succeeded): a row
SQLite refuses goes to `MetricSpool`, the pass says it failed, and a later pass writes it.

The rollup adds `chunksTotal` to the original's figures (the original left it out, so drift
volume, the stale-chunk count a reconcile row carries, could not be alerted on). The alerting
engine imports `KNOWN_METRICS` from here; it is the one list of rollup metric names.
"""

from __future__ import annotations

import asyncio
import fcntl
import json
import os
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import orjson
import structlog

from core.rules.telemetry import (
    DEFAULT_EVENT_TYPE,
    EVENT_ERROR,
    EVENT_INGEST,
    EVENT_RECONCILE,
    EVENT_TOMBSTONE,
    KNOWN_METRICS,
    RollupScope,
)
from core.stores.clock import now_ms
from core.stores.tenants import normalize_tenant_id

if TYPE_CHECKING:
    from core.stores.sqlite import GraphDB

log = structlog.get_logger(__name__)

#: The original recorder's defaults for an event that does not say.
DEFAULT_TENANT_ID = "neo-shared"
DEFAULT_REPO_SLUG = "neo"


#: How much of an unreadable spool line is quoted in the error log.
SPOOL_LINE_SHOWN = 2_000

#: Stored instead of a `detail` that cannot be written as JSON (the original's wording).
UNSERIALIZABLE_DETAIL: Mapping[str, str] = {"error": "Unserializable Value"}


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
            isinstance(n, int) and not isinstance(n, bool) for n in counts
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
    timestamp_ms: int | None = None,
) -> MetricRow:
    """A telemetry row with the original recorder's defaults (tenant `neo-shared`, repo
    `neo`, event `ingest`, timestamp now) and a fresh id."""
    return MetricRow(
        id=str(uuid.uuid4()),
        timestamp=timestamp_ms or now_ms(),
        tenant_id=_tenant_or_default(tenant_id),
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


async def insert_metric_rows(graph: GraphDB, rows: Sequence[MetricRow]) -> None:
    """Insert rows in one transaction; raises (StoreUnavailable) when SQLite refuses. A row
    whose id is already there is left as it is, so writing a spooled row twice is harmless."""
    if not rows:
        return
    async with graph.write() as tx:
        await tx.conn.executemany(_INSERT_METRIC, [r.params() for r in rows])


async def record_ingestion_metric(graph: GraphDB, **fields: Any) -> str | None:
    """Append one telemetry event (fields as `build_metric_row`) and return its id; on any
    failure log it and return None.

    Never raises into its caller: telemetry must not be the reason an ingestion fails. A
    caller whose work is not done until it is recorded (a reconciliation pass) uses
    `insert_metric_rows` and the spool instead.
    """
    row: MetricRow | None = None
    try:
        row = build_metric_row(**fields)
        await insert_metric_rows(graph, [row])
    except Exception:
        log.error("telemetry.record_failed", tenant=row.tenant_id if row else None,
                  eventType=fields.get("event_type"), exc_info=True)
        return None
    return row.id


class MetricSpool:
    """Telemetry rows that SQLite refused, kept in a small JSON-lines file until a later pass
    writes them (`<dataDir>/telemetry-spool.jsonl`).

    A file, not a table: the rows are here exactly because the SQLite file could not be
    written. Appends are whole lines, fsynced; every read and write happens under an
    exclusive `flock` of `<spool>.lock`, so two processes sharing a data folder cannot lose
    each other's rows. Flushing inserts every row (ids make a repeat harmless) and only then
    removes the file, so a crash in between writes nothing twice and loses nothing.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.lock_path = path.with_name(path.name + ".lock")

    def _lock(self) -> IO[str]:
        """Open the lock file and take the exclusive lock (blocking: call in a thread)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        handle = self.lock_path.open("a")
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        return handle

    @staticmethod
    def _unlock(handle: IO[str]) -> None:
        fcntl.flock(handle.fileno(), fcntl.LOCK_UN)
        handle.close()

    async def append(self, rows: Sequence[MetricRow]) -> None:
        """Keep rows for a later pass, durably; raises OSError when even that fails."""
        if not rows:
            return
        data = b"".join(orjson.dumps(r.as_json()) + b"\n" for r in rows)
        lock = await asyncio.to_thread(self._lock)
        try:
            await asyncio.to_thread(self._append_durably, data)
        finally:
            await asyncio.to_thread(self._unlock, lock)

    def _append_durably(self, data: bytes) -> None:
        with self.path.open("ab") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())

    def pending(self) -> int:
        """Rows waiting (lines in the file); 0 when there is no spool. Never creates it."""
        try:
            with self.path.open("rb") as handle:
                return sum(1 for line in handle if line.strip())
        except FileNotFoundError:
            return 0

    async def flush(self, graph: GraphDB) -> int:
        """Write every spooled row to SQLite, then remove the spool; returns how many rows
        were written. Raises (and keeps the spool) when SQLite still refuses. A line that is
        not a row (a crash cut it short) is logged with its text and dropped."""
        if not self.path.exists():
            return 0
        lock = await asyncio.to_thread(self._lock)
        try:
            rows = await asyncio.to_thread(self._read_rows)
            await insert_metric_rows(graph, rows)
            await asyncio.to_thread(self.path.unlink, missing_ok=True)
        finally:
            await asyncio.to_thread(self._unlock, lock)
        if rows:
            log.info("telemetry.spool_flushed", rows=len(rows), path=str(self.path))
        return len(rows)

    def _read_rows(self) -> list[MetricRow]:
        try:
            raw_lines = self.path.read_bytes().splitlines()
        except FileNotFoundError:
            return []
        rows: list[MetricRow] = []
        for number, raw in enumerate(raw_lines, start=1):
            if not raw.strip():
                continue
            try:
                rows.append(MetricRow.from_json(orjson.loads(raw)))
            except (ValueError, TypeError) as exc:
                log.error("telemetry.spool_line_unreadable", path=str(self.path), line=number,
                          error=str(exc), text=raw[:SPOOL_LINE_SHOWN].decode("utf-8", "replace"))
        return rows


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
