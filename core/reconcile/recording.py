"""A pass's telemetry: one row per drifted or failed tenant, a group's rows in one
transaction. A pass whose rows SQLite refuses (a lock held past busy_timeout) spools them to
`<dataDir>/telemetry-spool.jsonl`, reports `unrecordedRows` and is not ok (exit 1); the next
pass writes them first.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import structlog

from core.base.rules.camel_json import to_json
from core.base.rules.telemetry import EVENT_ERROR, EVENT_RECONCILE, MetricRow
from core.base.state.telemetry import insert_metric_rows, new_metric_row
from core.base.state.telemetry_spool import MetricSpool
from core.reconcile.rules.reconcile import ReconcilePolicy
from core.reconcile.rules.reconcile_outcome import Phase, TenantOutcome

if TYPE_CHECKING:
    from core.base.runtime.context import TickContext

log = structlog.get_logger(__name__)


class TelemetryRecorder:
    """Writes each tenant's telemetry row, spooling what SQLite refuses (see MetricSpool)."""

    def __init__(self, context: TickContext, spool: MetricSpool) -> None:
        self.graph = context.graph
        self.spool = spool
        #: Rows from earlier passes written by this one.
        self.flushed = 0
        #: Rows neither written nor spooled (both SQLite and the disk refused): logged whole.
        self.lost = 0

    async def flush_spool(self) -> None:
        """Write what earlier passes could not; a failure keeps the spool for the next."""
        try:
            self.flushed = await self.spool.flush(self.graph)
        except Exception:
            log.error("reconcile.spool_flush_failed", path=str(self.spool.path),
                      pending=self.spool.pending(), exc_info=True)

    async def record(self, outcomes: Sequence[TenantOutcome], policy: ReconcilePolicy) -> None:
        """One `reconcile` row per tenant with drift (stale or orphaned chunks, or missing
        paths; none for a clean one) and an `error` row per tenant that failed before its
        counts were known, a group's rows in ONE transaction; what SQLite refuses goes to the
        spool."""
        rows = [row for o in outcomes if (row := telemetry_row(o, policy)) is not None]
        if not rows:
            return
        try:
            await insert_metric_rows(self.graph, rows)
            return
        except Exception as exc:
            log.error("reconcile.telemetry_unrecorded", path=str(self.spool.path),
                      rows=len(rows), error=str(exc), message="kept in the spool; the next "
                      "pass writes them, and this pass does not count as done")
        try:
            await self.spool.append(rows)
        except Exception:
            self.lost += len(rows)
            for row in rows:
                log.error("reconcile.telemetry_lost", row=row.as_json(), exc_info=True)


def telemetry_row(outcome: TenantOutcome, policy: ReconcilePolicy) -> MetricRow | None:
    """The tenant's telemetry row, or None for a clean tenant; it names the repo as the
    tenant's data names it (`TenantOutcome.telemetry_repo`), never the placeholder where the
    data names one."""
    failure = outcome.failure
    error_code = f"reconcile-{failure.phase}-failed" if failure else None
    if outcome.drifted and not (failure and failure.phase == Phase.SCAN):
        return new_metric_row(
            tenant_id=outcome.tenant_id, repo_slug=outcome.telemetry_repo,
            event_type=EVENT_RECONCILE, chunks_total=outcome.scan.total_orphan_count,
            chunks_deleted=outcome.tombstone.tombstoned_count, error_code=error_code,
            detail=to_json(outcome.telemetry_detail(policy)),
        )
    if outcome.failed:
        return new_metric_row(
            tenant_id=outcome.tenant_id, repo_slug=outcome.telemetry_repo,
            event_type=EVENT_ERROR, error_code=error_code,
            detail=to_json(outcome.telemetry_detail(policy)),
        )
    return None

