"""One daemon's schedule: its jobs' ticks on an APScheduler, their timing, their supervision
and their graceful stop (`DaemonRunner`); the process around the daemons is
`core.suite.serve`.

Each daemon has its own `AsyncIOScheduler`, started inside the running loop, and its own state
connection, kept open and replaced when lost (`core.base.state.reopening_graph`); an embedded
Chroma store is opened once per process and shared.

What it guarantees:
- **No lost first pass, no doubled pass.** A job's first run is due one interval after the
  start of its last recorded tick (kept in SQLite): at once when that is past, otherwise after
  the remainder. A restart neither skips nor doubles a pass. A last tick that did not complete
  (stopped, cancelled, failed, or unsuccessful by its own figures) or work left in flight (a
  `.draining` file) makes the first run due at once.
- **Supervision.** A tick that raises is logged with its traceback and the next one still
  runs; repeated failures back off (logged once, and again on recovery). A daemon whose
  scheduler dies is restarted by `core.suite.serve`.
- **Recovery.** A state that does not answer at start is waited for; a state connection lost
  under a tick (a database restart, a failover, a cut network, a SQLite I/O error) fails that
  tick as store unavailable, nothing lost, and is replaced before the next one.
- **Graceful shutdown.** A stop asks running ticks to return after their current batch
  (APScheduler's own shutdown would cancel them mid-batch, so ticks run in tasks of ours,
  shielded from it). After SHUTDOWN_GRACE_S a tick still running is cancelled; its
  transaction rolls back and its lines stay on disk.
- **Health.** `DaemonRunner.health_problem` says when a scheduler died or a tick stalled, so
  the systemd watchdog (`core.suite.serve`) stops pinging only when progress has stopped.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any

import structlog

from core.base.chroma import VectorStore
from core.base.config.config import Settings
from core.base.io.clock import now_ms
from core.base.rules.camel_json import Figures
from core.base.rules.errors import LockHeld
from core.base.rules.timestamps import iso_from_ms, span_in_words
from core.base.runtime.context import TickContext, TickControl
from core.base.runtime.waiting import (
    backoff_delay_ms,
    first_run_delay_ms,
    open_when_reachable,
    wait_for_stop,
)
from core.base.state.daemon_state import TickRecord, last_drainer_ticks, last_ticks
from core.base.state.graph_db import GraphDB
from core.base.state.reopening_graph import ReopeningGraph, open_reopening
from core.base.state.state import open_graph
from core.drain.stores.drainer_queue import local_drainer
from core.suite.leadership import Leadership, holder_name, lease_ms_for, needs_election
from core.suite.metrics import Metrics, refresh_drainers
from core.suite.tick import Job, TickFn, run_tick

log = structlog.get_logger(__name__)

#: How long running ticks get to finish their current batch after SIGTERM (below the units'
#: TimeoutStopSec, closing the stores included).
SHUTDOWN_GRACE_S = 30.0
#: A running tick that reports no progress for this long is hung: the watchdog stops pinging
#: and systemd restarts the process (ticks report progress every batch or page).
STALL_LIMIT_S = 120.0
#: A daemon that fails to start, a store that does not answer at start, and a lost state
#: connection are retried after 0.5, 1, 2 ... s (jittered), up to this.
RESTART_BACKOFF_MAX_S = 60.0
#: How often each daemon checks its scheduler is alive.
HEALTH_CHECK_S = 1.0


@dataclass(frozen=True, slots=True)
class DaemonSpec:
    """A daemon: a name and the jobs its scheduler runs."""

    name: str
    jobs: tuple[Job, ...]
    #: Its jobs run on one host at a time when the state is shared (`core.suite.leadership`).
    elected: bool = False


@dataclass(frozen=True, slots=True)
class RuntimeOptions:
    """Knobs of the runtime; the defaults are the production values (tests shorten them)."""

    dry_run: bool = False
    shutdown_grace_s: float = SHUTDOWN_GRACE_S
    stall_limit_s: float = STALL_LIMIT_S
    restart_backoff_max_s: float = RESTART_BACKOFF_MAX_S
    health_check_s: float = HEALTH_CHECK_S


@dataclass(slots=True)
class _JobState:
    control: TickControl = field(default_factory=TickControl)
    number: int = 0
    failures: int = 0
    backing_off: bool = False
    running_since: float | None = None


class DaemonRunner:
    """One daemon: its scheduler, its SQLite connection, its running ticks."""

    def __init__(
        self,
        spec: DaemonSpec,
        *,
        settings: Settings,
        vectors: VectorStore,
        options: RuntimeOptions,
        metrics: Metrics,
        clock: Callable[[], int] = now_ms,
    ) -> None:
        self.spec = spec
        self.settings = settings
        self.vectors = vectors
        self.options = options
        self.metrics = metrics
        self.clock = clock
        self.ready = asyncio.Event()
        self.scheduler: Any = None
        self._context: TickContext | None = None
        self._graph: ReopeningGraph | None = None
        self._states = {job.name: _JobState() for job in spec.jobs}
        self._running: dict[str, asyncio.Task[None]] = {}

    async def run(self, stop: asyncio.Event) -> None:
        """Open the graph, schedule the jobs, and run until `stop`; raise if the scheduler
        dies (the supervisor restarts this daemon)."""
        from apscheduler.events import EVENT_JOB_MAX_INSTANCES, EVENT_JOB_MISSED
        from apscheduler.schedulers.asyncio import AsyncIOScheduler

        graph = await open_when_reachable(
            partial(open_reopening, partial(open_graph, self.settings.state,
                                            read_only=self.options.dry_run),
                    retry_max_s=self.options.restart_backoff_max_s),
            stop=stop, what=f"{self.spec.name} state", max_s=self.options.restart_backoff_max_s)
        if graph is None:
            return  # stopped before the state could be opened
        leadership, jobs = self._elected_jobs()
        heartbeat, stop_heartbeat = None, asyncio.Event()
        try:
            self._graph = graph
            self._context = TickContext(self.settings, graph, self.vectors)
            previous = await last_ticks(graph)
            scheduler = AsyncIOScheduler(timezone=UTC)
            for job in jobs:
                await self._schedule(scheduler, job, graph, previous.get(job.name))
            scheduler.add_listener(self._on_scheduler_event,
                                   EVENT_JOB_MAX_INSTANCES | EVENT_JOB_MISSED)
            scheduler.start()
            self.scheduler = scheduler
            if leadership is not None:  # after the scheduler: taking the lead reschedules
                heartbeat = asyncio.create_task(leadership.run(stop_heartbeat))
            self.ready.set()
            while not stop.is_set():
                await wait_for_stop(stop, self.options.health_check_s)
                if not scheduler.running:
                    raise RuntimeError(f"the {self.spec.name} scheduler stopped")
        finally:
            self.ready.clear()
            for state in self._states.values():
                state.control.request_stop()
            if self.scheduler is not None:
                self.scheduler.shutdown(wait=False)  # our ticks are shielded from its cancel
                self.scheduler = None
            await self._finish_running_ticks()
            stop_heartbeat.set()  # after the ticks: a clean stop hands the lead over
            await asyncio.gather(*[t for t in (heartbeat,) if t], return_exceptions=True)
            await graph.close()

    async def _schedule(self, scheduler: Any, job: Job, graph: GraphDB,
                        recorded: TickRecord | None) -> None:
        """Add `job` to `scheduler`, its first tick placed by its last recorded one (see the
        module docstring), then every interval, one at a time, coalesced."""
        self._states[job.name].control = TickControl()
        last = (await self._own_drainer_tick(graph, recorded)
                if job.drainer is not None else recorded)
        left = job.work_left is not None and job.work_left(self.settings)
        resume = left or (last is not None and not last.ok)
        delay_ms = first_run_delay_ms(last.started_at if last else None,
                                      job.interval_ms, self.clock(), resume=resume)
        scheduler.add_job(
            self._fire,
            trigger="interval",
            seconds=job.interval_ms / 1000,
            jitter=job.jitter_s or None,
            args=(job,),
            id=job.name,
            name=f"{self.spec.name}:{job.name}",
            next_run_time=datetime.now(UTC) + timedelta(milliseconds=delay_ms),
            max_instances=1,
            coalesce=True,
            # A tick that could not start on time still runs within one interval.
            misfire_grace_time=max(1, int(job.interval_ms / 1000)),
        )
        first_at = iso_from_ms(self.clock() + delay_ms)
        log.info("job.scheduled", daemon=self.spec.name, job=job.name, firstTickAt=first_at,
                 intervalS=job.interval_ms / 1000, firstTickInS=delay_ms / 1000,
                 lastTickStartedAt=last.started_at if last else None, resuming=resume,
                 message=f"first tick in {span_in_words(delay_ms / 1000)} (at {first_at})")

    async def _own_drainer_tick(self, graph: GraphDB, shared: TickRecord | None
                                ) -> TickRecord | None:
        """The last tick of this host's drainer: the shared `drain` row is any drainer's, and
        another host's tick says nothing of this host's queue. Without a row of its own, the
        shared row is this drainer's (a SQLite file); a drainer with no id never ticked here."""
        local = await asyncio.to_thread(local_drainer, self.settings)
        if local is None:
            return None
        for recorded in await last_drainer_ticks(graph):
            if recorded.queue.drainer == local:
                return recorded.tick
        return shared

    def _elected_jobs(self) -> tuple[Leadership | None, tuple[Job, ...]]:
        """The jobs as this host runs them: gated by a `Leadership` when the daemon is
        elected on a shared state."""
        if not needs_election(self.settings.state.url, elected=self.spec.elected,
                              dry_run=self.options.dry_run):
            return None, self.spec.jobs
        leadership = Leadership(
            self.settings.state.url, holder=holder_name(self.spec.name),
            lease_ms=lease_ms_for(j.interval_ms for j in self.spec.jobs),
            on_acquired=self._carry_on_schedule, on_heartbeat=self.metrics.show_leadership)
        return leadership, tuple(leadership.elected(job) for job in self.spec.jobs)

    async def _carry_on_schedule(self) -> None:
        """This host just took the lead: each job's next tick is placed by the last recorded
        one, whichever host ran it, so no pass is missed or doubled."""
        if self.scheduler is None:
            return
        # A connection of its own: the runner's may be in use by a tick right now.
        graph = await open_graph(self.settings.state, read_only=True)
        try:
            previous = await last_ticks(graph)
        finally:
            await graph.close()
        for job in self.spec.jobs:
            last = previous.get(job.name)
            delay_ms = first_run_delay_ms(last.started_at if last else None, job.interval_ms,
                                          self.clock(), resume=last is not None and not last.ok)
            self.scheduler.modify_job(
                job.name, next_run_time=datetime.now(UTC) + timedelta(milliseconds=delay_ms))
            log.info("job.rescheduled", daemon=self.spec.name, job=job.name,
                     reason="took the lead", nextTickInS=delay_ms / 1000)

    async def _fire(self, job: Job) -> None:
        """APScheduler's job: run the tick in a task of ours, shielded from the scheduler's
        shutdown (see the module docstring)."""
        state = self._states[job.name]
        if state.control.stopping:
            return
        task = asyncio.create_task(self._run_job(job), name=f"{self.spec.name}:{job.name}")
        self._running[job.name] = task
        try:
            await asyncio.shield(task)
        except asyncio.CancelledError:
            # The scheduler's shutdown cancels its job; the tick itself runs on, finishing its
            # batch under our shutdown grace. Only a cancel from anywhere else propagates.
            if not state.control.stopping:
                raise
        finally:
            if task.done():
                self._running.pop(job.name, None)
            else:  # the scheduler cancelled us: forget the task once it ends on its own
                task.add_done_callback(partial(self._forget, job.name))

    def _forget(self, name: str, _task: asyncio.Task[None]) -> None:
        self._running.pop(name, None)

    async def _run_job(self, job: Job) -> None:
        state = self._states[job.name]
        assert self._context is not None
        context = replace(self._context, control=state.control)
        state.number += 1
        state.running_since = time.monotonic()
        self.metrics.tick_started(job.name)
        outcome, figures = "failed", None
        try:
            async with asyncio.timeout(job.effective_timeout_s) as deadline:
                result = await run_tick(job.name, context, self._reconnected(job.tick),
                                        dry_run=self.options.dry_run, drainer=job.drainer,
                                        tick_number=state.number)
            outcome = "ok" if result.incomplete is None else "incomplete"
            figures = result.figures
        except LockHeld:
            outcome = "skipped"
        except TimeoutError:
            if deadline.expired():
                outcome = "timeout"
                log.error("tick.timed_out", daemon=self.spec.name, job=job.name,
                          timeoutS=job.effective_timeout_s)
        except Exception:
            outcome = "failed"  # run_tick logged it with its traceback
        finally:
            duration = time.monotonic() - state.running_since
            state.running_since = None
        self.metrics.observe_tick(job.name, outcome=outcome, duration_s=duration,
                                  figures=figures, finished_ts=time.time())
        # Every drainer of the state, this one's tick included.
        await refresh_drainers(self.metrics, context.graph)
        self._after_tick(job, state, outcome)

    def _reconnected(self, tick: TickFn) -> TickFn:
        """`tick`, run on a state connection checked first: a lost one is replaced here, the
        one place (`ReopeningGraph.reconnect`)."""
        graph = self._graph
        assert graph is not None

        async def reconnected(context: TickContext, dry_run: bool) -> Figures:
            await graph.reconnect()
            return await tick(context, dry_run)

        return reconnected

    def _after_tick(self, job: Job, state: _JobState, outcome: str) -> None:
        """Back off after repeated failures; say so once, and again on recovery."""
        if outcome == "ok":
            if state.backing_off:
                log.info("tick.recovered", daemon=self.spec.name, job=job.name,
                         afterFailures=state.failures)
            state.failures, state.backing_off = 0, False
            return
        if outcome in ("skipped", "incomplete"):
            # Another process did the work, or the tick did it but not all of it (stopped,
            # or a tenant failed): neither is a failure of this daemon to back off from.
            return
        state.failures += 1
        delay_ms = backoff_delay_ms(state.failures, job.interval_ms)
        if delay_ms is None or self.scheduler is None or state.control.stopping:
            return
        self.scheduler.modify_job(
            job.name, next_run_time=datetime.now(UTC) + timedelta(milliseconds=delay_ms))
        if not state.backing_off:
            state.backing_off = True
            log.warning("tick.backing_off", daemon=self.spec.name, job=job.name,
                        failures=state.failures, nextTickInS=delay_ms / 1000)

    def _on_scheduler_event(self, event: Any) -> None:
        from apscheduler.events import EVENT_JOB_MAX_INSTANCES

        if event.code == EVENT_JOB_MAX_INSTANCES:
            log.warning("tick.overlap_skipped", daemon=self.spec.name, job=event.job_id,
                        reason="the previous tick is still running")
        else:
            log.warning("tick.missed", daemon=self.spec.name, job=event.job_id)

    async def _finish_running_ticks(self) -> None:
        """Give running ticks the grace to finish their batch; then cancel what remains."""
        running = list(self._running.values())
        if not running:
            return
        log.info("shutdown.waiting_for_ticks", daemon=self.spec.name,
                 ticks=[t.get_name() for t in running], graceS=self.options.shutdown_grace_s)
        _, pending = await asyncio.wait(running, timeout=self.options.shutdown_grace_s)
        for task in pending:
            log.warning("shutdown.tick_cancelled", daemon=self.spec.name, tick=task.get_name())
            task.cancel()
        if pending:
            await asyncio.wait(pending, timeout=5)

    def health_problem(self) -> str | None:
        """Why this daemon is not making progress, or None when it is.

        A daemon waiting to be restarted by its supervisor is not hung: it is handled.
        """
        scheduler = self.scheduler
        if scheduler is None:
            return None
        if not scheduler.running:
            return f"{self.spec.name}: scheduler stopped"
        now = datetime.now(UTC)
        for job in self.spec.jobs:
            state = self._states[job.name]
            if state.running_since is not None:
                quiet = time.monotonic() - state.control.last_progress
                if quiet > self.options.stall_limit_s:
                    return f"{self.spec.name}:{job.name}: tick quiet for {quiet:.0f} s"
                continue
            scheduled = scheduler.get_job(job.name)
            due = getattr(scheduled, "next_run_time", None)
            late = job.interval_ms / 1000 + max(1.0, job.jitter_s) + self.options.stall_limit_s
            if due is not None and (now - due).total_seconds() > late:
                return f"{self.spec.name}:{job.name}: tick overdue since {due.isoformat()}"
        return None
