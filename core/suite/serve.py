"""Long-running daemons in one process: signals, Chroma, supervision, systemd, metrics.

One `serve()` call runs one or more daemons in this process (`python -m daemons` runs both),
each a `core.suite.scheduler.DaemonRunner`; an embedded Chroma store is opened once and
shared (it admits one process).

What it guarantees:
- **Supervision.** A daemon whose scheduler dies is restarted with backoff; the other daemon
  in the process is unaffected. A Chroma server that is unreachable at start is retried with
  backoff; a held embedded store is fatal (waiting would not free it).
- **Graceful shutdown.** SIGTERM/SIGINT set one stop flag: the daemons stop scheduling and
  finish their running ticks (`DaemonRunner`), then the stores close in reverse order of
  opening. A second signal exits at once (EXIT_FORCED).
- **Metrics from the first scrape.** The exporter serves each job's recorded last success and
  the last pass's per-tenant figures before the first tick (`core.suite.metrics`).
- **systemd.** READY=1 once every daemon's stores are open, WATCHDOG=1 at half of
  WATCHDOG_USEC but only while the loop, the schedulers and running ticks make progress,
  STOPPING=1 on shutdown.
"""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Callable, Sequence
from functools import partial

import structlog

from core.base.chroma import VectorStore
from core.base.config.config import Settings
from core.base.io.clock import now_ms
from core.base.runtime.signals import stop_on_signals
from core.base.runtime.store_door import StoreDoor
from core.base.runtime.systemd import Notifier
from core.base.runtime.waiting import open_when_reachable, wait_for_stop
from core.suite.leadership import holder_name
from core.suite.metrics import Metrics
from core.suite.metrics_reads import (
    follow_recorded_state,
    read_restored_metrics,
    restore_drainers,
)
from core.suite.scheduler import DaemonRunner, DaemonSpec, RuntimeOptions

log = structlog.get_logger(__name__)

#: Exit code of a second signal (forced exit): the next start recovers anything in flight.
EXIT_FORCED = 1


async def _supervise(runner: DaemonRunner, stop: asyncio.Event, options: RuntimeOptions) -> None:
    """Run a daemon until `stop`, restarting it with backoff whenever it dies."""
    failures = 0
    while not stop.is_set():
        try:
            await runner.run(stop)
            return
        except Exception:
            failures += 1
            delay = min(2.0 ** (failures - 1), options.restart_backoff_max_s)
            log.error("daemon.died", daemon=runner.spec.name, restarts=failures,
                      restartInS=delay, exc_info=True)
            await wait_for_stop(stop, delay)


async def _open_vectors(
    settings: Settings, stop: asyncio.Event, options: RuntimeOptions
) -> VectorStore | None:
    """Open Chroma, retrying with backoff while a server is unreachable; None if stopped
    first. A held embedded store is fatal (LockHeld): waiting would not free it."""
    return await open_when_reachable(partial(VectorStore.open, settings.chroma, via_daemon=False),
                                     stop=stop, what="chroma",
                                     max_s=options.restart_backoff_max_s)


async def _notify_systemd(notifier: Notifier, runners: Sequence[DaemonRunner],
                         stop: asyncio.Event) -> None:
    """READY=1 once every daemon has its stores open; then ping the watchdog, but only while
    every daemon is making progress."""
    await asyncio.gather(*(r.ready.wait() for r in runners))
    notifier.send("READY=1", f"STATUS=running {', '.join(r.spec.name for r in runners)}")
    log.info("daemons.ready", daemons=[r.spec.name for r in runners], pid=os.getpid())
    interval = notifier.watchdog_interval_s
    if interval is None:
        return
    withheld: str | None = None
    while not stop.is_set():
        problem = next((p for r in runners if (p := r.health_problem()) is not None), None)
        if problem is None:
            notifier.send("WATCHDOG=1")
            if withheld is not None:
                log.info("watchdog.resumed")
        elif problem != withheld:
            log.error("watchdog.withheld", reason=problem)
        withheld = problem
        await wait_for_stop(stop, interval)


async def serve(
    settings: Settings,
    specs: Sequence[DaemonSpec],
    *,
    options: RuntimeOptions | None = None,
    notifier: Notifier | None = None,
    clock: Callable[[], int] = now_ms,
    stop: asyncio.Event | None = None,
    metrics_port: tuple[str, int] | None = None,
) -> int:
    """Run the daemons until SIGTERM/SIGINT (or until `stop` is set by an embedding caller);
    the exit code. `/metrics` is served on `metrics_port` (a daemon run alone: its own key
    and port), else on `metricsPort`; 0 is off."""
    options = options or RuntimeOptions()
    stop = stop or asyncio.Event()

    def request_stop(signum: int) -> None:
        log.info("shutdown.requested", signal=signal.Signals(signum).name,
                 graceS=options.shutdown_grace_s)
        stop.set()

    metrics = Metrics(settings)
    # Before the first scrape: the recorded state, so monitoring is not blind until a tick.
    jobs = [job for spec in specs for job in spec.jobs]
    metrics.start(jobs, await read_restored_metrics(settings, jobs))
    await restore_drainers(metrics, settings)
    if not settings.state.url:  # SQLite: one host, whose reconcile daemon (if any) leads
        for spec in (s for s in specs if s.elected):
            metrics.show_leadership(leads=True, holder=holder_name(spec.name))
    key, port = metrics_port or ("metricsPort", settings.metrics_port)
    if port:  # a taken port is a config error before any tick
        metrics.serve(port, key=key)
    try:
        with stop_on_signals(request_stop, forced_exit=lambda _signum: EXIT_FORCED):
            return await _serve_until_stopped(settings, specs, options=options,
                                              notifier=notifier or Notifier(), clock=clock,
                                              stop=stop, metrics=metrics)
    finally:
        log.info("shutdown.completed")


async def _serve_until_stopped(
    settings: Settings,
    specs: Sequence[DaemonSpec],
    *,
    options: RuntimeOptions,
    notifier: Notifier,
    clock: Callable[[], int],
    stop: asyncio.Event,
    metrics: Metrics,
) -> int:
    """Open Chroma, supervise every daemon and notify systemd until `stop`, with `metrics`
    served; then let the daemons finish and close everything, in reverse order."""
    helpers: list[asyncio.Task[None]] = []
    vectors: VectorStore | None = None
    door: StoreDoor | None = None
    try:
        vectors = await _open_vectors(settings, stop, options)
        if vectors is None:
            return 0
        if not settings.chroma.server_mode:  # the commands beside the daemon reach the store here
            door = await StoreDoor.open(vectors, settings.chroma.path)
        runners = [DaemonRunner(spec, settings=settings, vectors=vectors, options=options,
                                metrics=metrics, clock=clock) for spec in specs]
        supervised = [asyncio.create_task(_supervise(r, stop, options), name=r.spec.name)
                      for r in runners]
        helpers.append(asyncio.create_task(_notify_systemd(notifier, runners, stop)))
        if settings.metrics_port:  # other processes' passes and ticks, within a scrape
            helpers.append(asyncio.create_task(follow_recorded_state(
                settings, metrics, [job for spec in specs for job in spec.jobs], stop)))
        await stop.wait()
        notifier.send("STOPPING=1")
        await asyncio.gather(*supervised)
        return 0
    finally:
        for task in helpers:
            task.cancel()
        await asyncio.gather(*helpers, return_exceptions=True)
        metrics.close()
        if door is not None:
            await door.close()
        if vectors is not None:
            await vectors.close()
