"""Running one tick of a daemon: the same path for `--tick` and for the scheduler.

A tick is a coroutine `tick(stores, dry_run) -> figures`. `run_tick` binds `daemon` and `tick`
into the log context, times it, logs one canonical `tick.completed` line with its figures (or
`tick.failed` with the traceback, or `tick.skipped` when another process holds the work's
lock), and records the tick in SQLite unless it was a dry run.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import structlog

from core.jobs.context import Stores
from core.rules.errors import LockHeld
from core.stores.clock import now_ms
from core.stores.daemon_state import TickRecord, record_tick

log = structlog.get_logger(__name__)

TickFn = Callable[[Stores, bool], Awaitable[Mapping[str, Any]]]


async def run_tick(
    daemon: str, stores: Stores, tick: TickFn, *, dry_run: bool, tick_number: int = 1
) -> dict[str, Any]:
    """Run one tick and return its figures plus `durationMs`; re-raises the tick's error
    after logging and recording it."""
    started_ms = now_ms()
    started = time.monotonic()
    stores.control.progress()
    with structlog.contextvars.bound_contextvars(daemon=daemon, tick=tick_number):
        try:
            figures = dict(await tick(stores, dry_run))
        except LockHeld as exc:
            # Not a failure of this daemon: another process is doing the same work.
            log.warning("tick.skipped", reason=str(exc))
            raise
        except Exception as exc:
            duration_ms = int((time.monotonic() - started) * 1000)
            log.error("tick.failed", durationMs=duration_ms, dryRun=dry_run, exc_info=True)
            if not dry_run:
                await _record(stores, TickRecord(daemon, started_ms, now_ms(), duration_ms,
                                                 False, {"error": str(exc)}))
            raise
        duration_ms = int((time.monotonic() - started) * 1000)
        figures["durationMs"] = duration_ms
        log.info("tick.completed", **{"dryRun": dry_run, **figures})
        if not dry_run:
            await _record(stores, TickRecord(daemon, started_ms, now_ms(), duration_ms, True,
                                             figures))
    return figures


async def _record(stores: Stores, record: TickRecord) -> None:
    """Remember the tick; a failure here is logged, never allowed to mask the tick's outcome."""
    try:
        await record_tick(stores.graph, record)
    except Exception:
        log.warning("tick.record_failed", exc_info=True)
