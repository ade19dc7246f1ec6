"""The drain daemon's tick, the REM tick: live ingestion of the sessions summarized since the
previous tick, then draining the lazy-edge queue (`core.drain`).

The live-ingestion watermark moves only when an ingestion completed (never in a dry run), so a
failed or skipped ingestion is retried, with the overlap, by the next tick; a missing summary
collection skips ingestion with its reason and still drains.
"""

from __future__ import annotations

from dataclasses import dataclass

import structlog

from core.base.chroma import CollectionMissing
from core.base.io.clock import now_ms
from core.base.runtime.context import TickContext
from core.base.state.daemon_state import LIVE_INGEST_WATERMARK, get_value, set_value
from core.drain.live_ingest import live_ingest_since
from core.drain.queue_drain import drain_queue
from core.drain.rules.drain_plan import DrainStats
from core.drain.rules.ingest import LiveIngestFigures, LiveIngestSkipped

log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class RemTickFigures:
    """A REM tick's figures: its live ingestion's, then its drain's."""

    live_ingest: LiveIngestFigures | LiveIngestSkipped
    drain: DrainStats


async def rem_tick(context: TickContext, dry_run: bool) -> RemTickFigures:
    """One REM tick: live-ingest the sessions summarized since the previous tick (minus the
    overlap), then drain the queue. The watermark is the start of the last tick whose live
    ingestion completed; the first tick looks back the overlap from now."""
    settings = context.settings
    started = now_ms()
    watermark = await get_value(context.graph, LIVE_INGEST_WATERMARK)
    since = int(watermark) if watermark and watermark.isdigit() else started
    cutoff = since - settings.drain.rem_live_ingest_overlap_ms
    try:
        report = await live_ingest_since(context.graph, context.vectors, settings, cutoff,
                                         dry_run=dry_run)
        live: LiveIngestFigures | LiveIngestSkipped = report.figures()
        if not dry_run:  # only a completed ingestion moves the watermark
            await set_value(context.graph, LIVE_INGEST_WATERMARK, str(started), now_ms=now_ms())
    except CollectionMissing as exc:
        log.warning("ingest.skipped", reason=str(exc))
        live = LiveIngestSkipped(cutoff, str(exc))
    return RemTickFigures(live, await drain_queue(context, dry_run=dry_run))
