"""What `/metrics` reads from the state (`core.suite.metrics` shows it): the recorded state
served from the first scrape, every drainer's last tick, and, while the daemon runs, what other
processes record on the same state (a `--tick` pass beside it, another host's drainer), read
every FOLLOW_INTERVAL_S. Every read is read-only and best effort: a state that cannot be read
is logged and the gauges keep their values; it never stops the daemon."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import structlog

from core.base.config.config import Settings
from core.base.io.clock import now_ms
from core.base.runtime.waiting import wait_for_stop
from core.base.state.daemon_state import (
    DrainerTick,
    last_drainer_ticks,
    last_success_stamps,
    last_ticks,
)
from core.base.state.state import open_graph
from core.suite.metrics import Metrics, refresh_drainers
from core.suite.restored_metrics import RestoredMetrics, restored_metrics
from core.suite.tick import Job

log = structlog.get_logger(__name__)

#: How often a daemon serving /metrics reads what other processes recorded on its state
#: (`follow_recorded_state`): within a scrape interval of Prometheus's example (15 s).
FOLLOW_INTERVAL_S = 15.0


async def restore_drainers(metrics: Metrics, settings: Settings) -> None:
    """Before the first tick: every drainer's recorded tick, read without writing a byte (a
    store that does not exist yet has none). Best effort, as `read_restored_metrics`."""
    if not settings.state.url and not settings.state.graph_db_path.exists():
        return
    try:
        graph = await open_graph(settings.state, read_only=True)
    except Exception:
        log.warning("metrics.drainers_unread", exc_info=True)
        return
    try:
        await refresh_drainers(metrics, graph)
    finally:
        await graph.close()


async def read_restored_metrics(settings: Settings, jobs: Sequence[Job]) -> RestoredMetrics:
    """The recorded state of `jobs` to serve from the first scrape, read from SQLite without
    writing a byte (a store that does not exist yet has nothing recorded). Best effort: a
    state that cannot be read is logged and the exporter starts empty, as it would have
    before; it never stops the daemon."""
    try:
        restored, _drainers = await _read_recorded(settings, jobs)
    except Exception:
        log.warning("metrics.restore_failed", path=str(settings.state.graph_db_path), exc_info=True)
        return RestoredMetrics()
    log.info("metrics.restored", jobs=sorted(restored.last_success_s),
             tenants=len(restored.tenants))
    return restored


async def _read_recorded(settings: Settings, jobs: Sequence[Job],
                         ) -> tuple[RestoredMetrics, tuple[DrainerTick, ...]]:
    """What the state records for `jobs`, and every drainer's last tick (read-only)."""
    graph = await open_graph(settings.state, read_only=True)
    try:
        ticks = await last_ticks(graph)
        stamps = await last_success_stamps(graph)
        drainers = await last_drainer_ticks(graph)
    finally:
        await graph.close()
    return (restored_metrics((job.name for job in jobs), ticks=ticks, success_stamps_ms=stamps),
            drainers)


async def follow_recorded_state(settings: Settings, metrics: Metrics, jobs: Sequence[Job],
                                stop: asyncio.Event, *,
                                every_s: float = FOLLOW_INTERVAL_S) -> None:
    """Until `stop`: every `every_s`, what other processes recorded on the state (passes and
    ticks run with `--tick` beside the daemon, other hosts' drainers), shown by `metrics`
    (`Metrics.follow`). A read that fails is logged once per outage and retried."""
    failing = False
    while not await wait_for_stop(stop, every_s):
        if not settings.state.url and not settings.state.graph_db_path.exists():
            continue
        try:
            recorded, drainers = await _read_recorded(settings, jobs)
        except Exception as exc:
            if not failing:
                log.warning("metrics.follow_failed", error=str(exc))
            failing = True
            continue
        failing = False
        metrics.follow(recorded)
        metrics.show_drainers(drainers, now=now_ms())
