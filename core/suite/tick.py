"""One tick, written once: the same path for the scheduler and for one-shot runs.

A tick is a coroutine `tick(context, dry_run) -> figures`, run every `interval_ms` as a `Job`.
`run_tick` binds `daemon` and `tick` into the log context, times it, logs one canonical
`tick.completed` line with its figures (or `tick.failed`: one line with the reason for a
refusal (`KbError`), the traceback without locals for anything unexpected; or `tick.skipped`
when another process holds the work's lock), and records the tick in SQLite unless it was a
dry run. `open_context` opens the stores a tick works on, in a fixed order.

A tick that returned is not necessarily complete: a drain stopped after its current batch
(`.draining` left for the next tick), a reconcile pass stopped between tenants, or a pass whose
figures say it did not succeed (a failed tenant, telemetry rows not in SQLite) is recorded with
`ok = false` and `incomplete` saying why, exactly as a tick that raised or was cancelled. The
scheduler runs a job whose last tick is not ok at once on the next start.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from typing import Any, Generic, TypeVar

import structlog

from core.base.chroma import VectorStore
from core.base.config.config import Settings
from core.base.io.clock import now_ms
from core.base.rules.camel_json import Figures, to_json
from core.base.rules.errors import LOGGED_NOTE, KbError, LockHeld, StoreUnavailable
from core.base.runtime.context import TickContext, TickControl
from core.base.runtime.logs import scrub_shown
from core.base.state.daemon_state import DrainerQueue, TickRecord, record_tick
from core.base.state.state import open_graph
from core.drain.rem_tick import RemTickFigures
from core.reconcile.rules.reconcile_outcome import ReconcileFigures

log = structlog.get_logger(__name__)

F = TypeVar("F", bound=Figures)
#: A tick: its context and whether it is a dry run in, its figures out.
TickFn = Callable[[TickContext, bool], Awaitable[Figures]]

#: A tick may run at most max(its interval, this) before it is cancelled.
MIN_TICK_TIMEOUT_S = 300.0


@dataclass(frozen=True, slots=True)
class Job:
    """A tick function run every `interval_ms` (plus up to `jitter_s` of random delay), and
    bounded in time the same way whether the scheduler or a one-shot run starts it."""

    name: str
    tick: TickFn
    interval_ms: int
    jitter_s: float = 0.0
    timeout_s: float | None = None
    #: Whether work was left in flight by an earlier run (a `.draining` file): then the first
    #: tick after a start runs at once.
    work_left: Callable[[Settings], bool] | None = None
    #: A drain job's drainer and queue figures, recorded with each of its ticks
    #: (`core.drain.stores.drainer_queue.read_drainer_queue`); None for every other job.
    drainer: Callable[[Settings], DrainerQueue | None] | None = None

    @property
    def effective_timeout_s(self) -> float:
        """The tick body's time limit: its own, else max(interval, MIN_TICK_TIMEOUT_S)."""
        if self.timeout_s is not None:
            return self.timeout_s
        return max(self.interval_ms / 1000, MIN_TICK_TIMEOUT_S)


@asynccontextmanager
async def open_context(
    settings: Settings,
    *,
    dry_run: bool = False,
    vectors: VectorStore | None = None,
    control: TickControl | None = None,
) -> AsyncIterator[TickContext]:
    """Open the graph (first: it is cheap and local) and Chroma, both as a dry run opens them
    when `dry_run`; close both on the way out, in reverse order. `vectors`, when given, is the
    process's shared store, and is not closed here.
    """
    graph = await open_graph(settings.state, read_only=dry_run)
    try:
        own_vectors = vectors is None
        opener = VectorStore.open_for_dry_run if dry_run else VectorStore.open
        store = vectors if vectors is not None else await opener(settings.chroma)
        try:
            yield TickContext(settings, graph, store, control or TickControl())
        finally:
            if own_vectors:
                await store.close()
    finally:
        await graph.close()


def incomplete_reason(figures: Figures) -> str | None:
    """Why a tick that returned did not finish its work, or None when it did (pure)."""
    if isinstance(figures, RemTickFigures) and figures.drain.interrupted:
        return "stopped mid-drain: the rest of the queue is left in .draining"
    if isinstance(figures, ReconcileFigures):
        if figures.stopped:
            return "stopped between tenants"
        if figures.unrecorded_rows:
            return f"{figures.unrecorded_rows} telemetry rows not recorded (kept in the spool)"
        if figures.failed_tenants:
            return f"{figures.failed_tenants} tenants failed"
    return None


@dataclass(frozen=True, slots=True)
class TickResult(Generic[F]):
    """A tick that returned: its figures (a frozen dataclass), how long it took, and why it
    is not complete (None when it is)."""

    figures: F
    duration_ms: int
    incomplete: str | None = None

    def json(self) -> dict[str, Any]:
        """The figures' JSON plus `durationMs` (and `incomplete` when it is): the `--json`
        object, the canonical log line's fields, and what `daemon_ticks` records."""
        shown = {**to_json(self.figures), "durationMs": self.duration_ms}
        if self.incomplete is not None:
            shown["incomplete"] = self.incomplete
        return shown


async def run_tick(
    daemon: str,
    context: TickContext,
    tick: Callable[[TickContext, bool], Awaitable[F]],
    *,
    dry_run: bool,
    tick_number: int = 1,
    drainer: Callable[[Settings], DrainerQueue | None] | None = None,
) -> TickResult[F]:
    """Run one tick and return its figures and duration; re-raises the tick's error after
    logging and recording it (with `drainer`'s figures: a drain job's `Job.drainer`)."""
    started_ms = now_ms()
    started = time.monotonic()
    context.control.progress()
    with structlog.contextvars.bound_contextvars(daemon=daemon, tick=tick_number):
        try:
            figures = await tick(context, dry_run)
        except LockHeld as exc:
            # Not a failure of this daemon: another process is doing the same work.
            log.warning("tick.skipped", reason=str(exc))
            raise
        except asyncio.CancelledError:
            # Cancelled (its time bound, or a stop whose grace ran out): not a completed tick,
            # so the next start runs it at once. Shielded: the cancel must not stop the record.
            duration_ms = int((time.monotonic() - started) * 1000)
            log.warning("tick.cancelled", durationMs=duration_ms, dryRun=dry_run)
            if not dry_run:
                await asyncio.shield(_record(context, TickRecord(
                    daemon, started_ms, now_ms(), duration_ms, False, {"error": "cancelled"}),
                    drainer))
            raise
        except Exception as exc:
            duration_ms = int((time.monotonic() - started) * 1000)
            if isinstance(exc, KbError):
                # A refusal (a symlinked queue, a store that is down): expected and explained
                # by its message, so one line; a traceback would bury the reason.
                log.error("tick.failed", durationMs=duration_ms, dryRun=dry_run,
                          error=str(exc), errorType=type(exc).__name__)
            else:
                # Unexpected: the traceback (frames and message, never locals: see logs).
                log.error("tick.failed", durationMs=duration_ms, dryRun=dry_run, exc_info=True)
                exc.add_note(LOGGED_NOTE)
            if not dry_run:
                await _record(context, TickRecord(daemon, started_ms, now_ms(), duration_ms,
                                                 False, {"error": str(exc)}), drainer)
            raise
        result = TickResult(figures, int((time.monotonic() - started) * 1000),
                            incomplete_reason(figures))
        shown = result.json()
        log.info("tick.completed", **{"dryRun": dry_run, **shown})
        if not dry_run:
            await _record(context, TickRecord(daemon, started_ms, now_ms(), result.duration_ms,
                                             result.incomplete is None, shown), drainer)
    return result


async def _record(context: TickContext, record: TickRecord,
                  drainer: Callable[[Settings], DrainerQueue | None] | None) -> None:
    """Remember the tick (its figures scrubbed: an error text may quote a secret) and, for a
    drain job, its drainer's queue figures; a failure here is logged, never masks the tick."""
    queue = None
    if drainer is not None:
        try:
            queue = await asyncio.to_thread(drainer, context.settings)
        except Exception:
            # An unreadable id file or queue: the tick is still recorded, without its row.
            log.warning("tick.drainer_unread", exc_info=True)
    try:
        await record_tick(context.graph, replace(record, figures=scrub_shown(record.figures)),
                          drainer=queue)
    except StoreUnavailable as exc:  # an outage, already told by the tick's own line
        log.warning("tick.record_failed", error=str(exc))
    except Exception:
        log.warning("tick.record_failed", exc_info=True)
