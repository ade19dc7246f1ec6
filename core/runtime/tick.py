"""One tick, written once: the same path for the scheduler and for one-shot runs.

A tick is a coroutine `tick(context, dry_run) -> figures`, run every `interval_ms` as a `Job`.
`run_tick` binds `daemon` and `tick` into the log context, times it, logs one canonical
`tick.completed` line with its figures (or `tick.failed` with the traceback, or `tick.skipped`
when another process holds the work's lock), and records the tick in SQLite unless it was a
dry run. `open_context` opens the stores a tick works on, in a fixed order.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import structlog

from core.jobs.context import TickContext, TickControl
from core.rules.config import Settings
from core.rules.errors import LockHeld
from core.rules.figures import Figures, to_json
from core.stores.chroma import VectorStore
from core.stores.clock import now_ms
from core.stores.daemon_state import TickRecord, record_tick
from core.stores.sqlite import GraphDB

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
    """Open the graph (read-only for a dry run, so not one byte of it can change) and Chroma;
    close both on the way out, in reverse order. The graph opens first: it is cheap and local.

    `vectors`, when given, is an already open store shared between daemons in one process (an
    embedded store admits one opener per process); it is not closed here.
    """
    graph = await GraphDB.open(settings.graph_db_path, read_only=dry_run)
    try:
        own_vectors = vectors is None
        store = vectors if vectors is not None else await VectorStore.open(settings)
        try:
            yield TickContext(settings, graph, store, control or TickControl())
        finally:
            if own_vectors:
                await store.close()
    finally:
        await graph.close()


@dataclass(frozen=True, slots=True)
class TickResult(Generic[F]):
    """A completed tick: its figures (a frozen dataclass) and how long it took."""

    figures: F
    duration_ms: int

    def json(self) -> dict[str, Any]:
        """The figures' JSON plus `durationMs`: the `--json` object, the canonical log line's
        fields, and what `daemon_ticks` records."""
        return {**to_json(self.figures), "durationMs": self.duration_ms}


async def run_tick(
    daemon: str,
    context: TickContext,
    tick: Callable[[TickContext, bool], Awaitable[F]],
    *,
    dry_run: bool,
    tick_number: int = 1,
) -> TickResult[F]:
    """Run one tick and return its figures and duration; re-raises the tick's error after
    logging and recording it."""
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
        except Exception as exc:
            duration_ms = int((time.monotonic() - started) * 1000)
            log.error("tick.failed", durationMs=duration_ms, dryRun=dry_run, exc_info=True)
            if not dry_run:
                await _record(context, TickRecord(daemon, started_ms, now_ms(), duration_ms,
                                                 False, {"error": str(exc)}))
            raise
        result = TickResult(figures, int((time.monotonic() - started) * 1000))
        shown = result.json()
        log.info("tick.completed", **{"dryRun": dry_run, **shown})
        if not dry_run:
            await _record(context, TickRecord(daemon, started_ms, now_ms(), result.duration_ms,
                                             True, shown))
    return result


async def _record(context: TickContext, record: TickRecord) -> None:
    """Remember the tick; a failure here is logged, never allowed to mask the tick's outcome."""
    try:
        await record_tick(context.graph, record)
    except Exception:
        log.warning("tick.record_failed", exc_info=True)
