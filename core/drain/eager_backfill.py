"""The operator's eager back-fill: live-ingest every session summarized in the last N days,
then drain the lazy-edge queue (what `python -m daemons.backfill` runs).

Run before a workload that will touch many historical sessions. It reuses live ingestion
(`core.drain.live_ingest`) and the drain (`core.drain`), and adds what a one-off run over a
large window needs:

- the window is a time, not a string: summaries are read in pages and each `createdAt` is
  parsed (ISO-8601 with or without zone, epoch ms or s); rows that cannot be parsed are counted
  and named, never silently dropped;
- sessions are synced a batch at a time with progress reported after each batch;
- one bad session does not sink its batch: a batch that fails is retried one session at a time,
  and the sessions that still fail are listed (the run then ends with exit 1). When every
  session of a batch fails on a store error, the store itself is down: the run stops there
  (exit 1, nothing half-written; re-running is cheap because unchanged nodes are skipped);
- a dry run counts what would be ingested and what the queue holds, and writes nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import structlog

from core.base.chroma import CollectionMissing
from core.base.io.clock import now_ms
from core.base.rules.camel_json import omitted_when_none
from core.base.rules.errors import KbError, StoreUnavailable
from core.base.rules.timestamps import iso_from_ms
from core.base.runtime.context import Progress, TickContext
from core.drain.live_ingest import SESSIONS_PER_BATCH, sessions_created_since, sync_sessions
from core.drain.queue_drain import drain_queue
from core.drain.rules.drain_plan import DrainStats
from core.drain.rules.ingest import (
    LiveIngestFigures,
    LiveIngestReport,
    LiveIngestSkipped,
    SessionWindow,
    SyncStats,
)

log = structlog.get_logger(__name__)

DAY_MS = 86_400_000
#: Why the rest of a run was not done when a stop signal came (the run is not ok; re-running
#: it is cheap: unchanged nodes are skipped, drained lines are gone from the queue).
STOPPED = "stopped by a signal before the end; run it again to finish"
#: How many failures the figures and the log name (all are counted).
FAILURES_NAMED = 50


@dataclass(slots=True)
class EagerBackfillReport:
    """What one eager back-fill saw and did."""

    days: int
    cutoff_ms: int
    dry_run: bool
    window: SessionWindow = field(default_factory=SessionWindow)
    stats: SyncStats = field(default_factory=SyncStats)
    #: Why ingestion did not run at all (no summary collection yet); None when it ran.
    ingest_skipped: str | None = None
    #: Why ingestion stopped part-way (the memory collection is missing); None when it did not.
    ingest_error: str | None = None
    drain: DrainStats | None = None
    #: Why the drain did not run: `--skip-drain`, or the error that stopped it.
    drain_skipped: str | None = None
    drain_error: str | None = None

    @property
    def failures(self) -> list[str]:
        """Every session or row that could not be synced, as `[id] why`."""
        return self.stats.errors

    @property
    def ok(self) -> bool:
        """True when every session in the window synced and the drain (if asked for) ran."""
        return not self.failures and self.ingest_error is None and self.drain_error is None

    def figures(self) -> EagerBackfillFigures:
        """The run's summary, for the canonical log line and `--json`."""
        live: EagerIngestFigures | LiveIngestSkipped
        if self.ingest_skipped is not None:
            live = LiveIngestSkipped(self.cutoff_ms, self.ingest_skipped)
        else:
            base = LiveIngestReport(self.cutoff_ms, self.window, self.stats).figures()
            live = EagerIngestFigures(
                **asdict(base),
                summaries_without_session_id=self.window.without_session_id,
                unparseable_rows=tuple(self.window.unparseable_named),
                error=self.ingest_error)
        drain: DrainStats | DrainFailed | DrainSkipped
        if self.drain is not None:
            drain = self.drain
        elif self.drain_error is not None:
            drain = DrainFailed(self.drain_error)
        else:
            drain = DrainSkipped(self.drain_skipped or "")
        return EagerBackfillFigures(
            self.ok, self.dry_run, self.days, self.cutoff_ms, iso_from_ms(self.cutoff_ms), live,
            len(self.failures), tuple(self.failures[:FAILURES_NAMED]), drain)


@dataclass(frozen=True, slots=True)
class EagerIngestFigures(LiveIngestFigures):
    """The back-fill's ingestion figures: a live ingestion's, and what it could not use."""

    summaries_without_session_id: int = 0
    #: The first rows whose `createdAt` could not be read, named (all are counted).
    unparseable_rows: tuple[Mapping[str, Any], ...] = ()
    #: Why ingestion stopped part-way, when it did.
    error: str | None = field(default=None, metadata=omitted_when_none())


@dataclass(frozen=True, slots=True)
class DrainFailed:
    """The drain after the back-fill failed (the queue stays for the next drain)."""

    error: str


@dataclass(frozen=True, slots=True)
class DrainSkipped:
    """The drain after the back-fill did not run, and why."""

    skipped: str


@dataclass(frozen=True, slots=True)
class EagerBackfillFigures:
    """What `daemons.backfill --json` prints (and its tick records)."""

    ok: bool
    dry_run: bool
    days: int
    cutoff_ms: int
    cutoff: str
    live_ingest: EagerIngestFigures | LiveIngestSkipped
    failure_count: int
    #: The first FAILURES_NAMED failures, as `[id] why` (all are counted and logged).
    failures: tuple[str, ...]
    drain: DrainStats | DrainFailed | DrainSkipped


def cutoff_for_days(days: int, *, now: int) -> int:
    """The start of a window of `days` days ending at `now` (epoch ms), never before 1970."""
    if days < 1:
        raise ValueError(f"days must be >= 1, got {days}")
    return max(0, now - days * DAY_MS)


async def eager_backfill(
    context: TickContext,
    *,
    days: int,
    dry_run: bool,
    skip_drain: bool,
    progress: Progress,
    clock: Callable[[], int] = now_ms,
) -> EagerBackfillReport:
    """Live-ingest the sessions summarized in the last `days` days, then drain unless
    `skip_drain`. Per-session problems are in the report; raises StoreUnavailable only when
    the store is down. When stopping, returns after the batch in hand and does not drain."""
    report = EagerBackfillReport(days, cutoff_for_days(days, now=clock()), dry_run)
    await _find_window(context, report)
    await _ingest_window(context, report, progress=progress)
    if skip_drain:
        report.drain_skipped = "--skip-drain"
    elif context.control.stopping:
        report.drain_skipped = STOPPED
    else:
        try:
            report.drain = await drain_queue(context, dry_run=dry_run)
        except KbError as exc:
            # The ingestion above stands; the queue stays for the next drain (nothing lost).
            report.drain_error = str(exc)
            log.error("backfill.drain_failed", error=str(exc))
    return report


async def _find_window(context: TickContext, report: EagerBackfillReport) -> None:
    """The sessions summarized since the report's cutoff."""
    try:
        report.window = await sessions_created_since(context.vectors, context.settings,
                                                     report.cutoff_ms)
    except CollectionMissing as exc:
        report.ingest_skipped = str(exc)
        log.warning("backfill.ingest_skipped", reason=str(exc))
    log.info("backfill.window", days=report.days, cutoff=iso_from_ms(report.cutoff_ms),
             summariesScanned=report.window.summaries_scanned,
             sessionsFound=len(report.window.session_ids),
             unparseableCreatedAt=report.window.unparseable, dryRun=report.dry_run)


async def _ingest_window(
    context: TickContext, report: EagerBackfillReport, *, progress: Progress
) -> None:
    """Sync the window's sessions a batch at a time, with progress after each batch; a stop
    request ends the loop between batches."""
    session_ids = report.window.session_ids
    progress.start(len(session_ids), label="sessions")
    try:
        for start in range(0, len(session_ids), SESSIONS_PER_BATCH):
            if context.control.stopping:
                report.ingest_error = STOPPED
                log.info("backfill.stopping", sessionsLeft=len(session_ids) - start)
                break
            batch = session_ids[start : start + SESSIONS_PER_BATCH]
            report.stats.add(await _sync_batch_isolating_failures(context, batch,
                                                                  dry_run=report.dry_run))
            progress.advance(len(batch))
    except CollectionMissing as exc:
        # Summaries without a memory collection: no session can be synced, so none is tried.
        report.ingest_error = str(exc)
        log.error("backfill.ingest_stopped", error=str(exc))
    finally:
        progress.finish()
    if report.failures:
        log.error("backfill.sessions_failed", count=len(report.failures),
                  failures=report.failures[:FAILURES_NAMED])


async def _sync_batch_isolating_failures(
    context: TickContext, batch: Sequence[str], *, dry_run: bool
) -> SyncStats:
    """Sync a batch; when it fails, sync its sessions one by one so that one bad session costs
    only itself. Raises StoreUnavailable when every session failed on a store error, and
    CollectionMissing at once."""
    try:
        return await sync_sessions(context.graph, context.vectors, context.settings, batch,
                                   dry_run=dry_run)
    except CollectionMissing:
        raise  # the same for every session: retrying them one by one cannot help
    except Exception as exc:
        log.warning("backfill.batch_failed", sessions=len(batch), error=_describe(exc),
                    message="retrying the batch one session at a time")
    stats = SyncStats()
    store_failures: list[StoreUnavailable] = []
    for session_id in batch:
        try:
            stats.add(await sync_sessions(context.graph, context.vectors, context.settings,
                                          [session_id], dry_run=dry_run))
        except Exception as exc:
            log.error("backfill.session_failed", session_id=session_id, error=_describe(exc),
                      exc_info=True)
            stats.errors.append(f"[{session_id}] {_describe(exc)}")
            if isinstance(exc, StoreUnavailable):
                store_failures.append(exc)
    if len(batch) > 1 and len(store_failures) == len(batch):
        raise StoreUnavailable(
            f"every session of a batch of {len(batch)} failed on the store; "
            f"last error: {store_failures[-1]}"
        ) from store_failures[-1]
    return stats


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"
