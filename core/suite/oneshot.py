"""One way to run work once, outside the scheduler: `--tick`, `backfill`, `demo` and `restore`.

A one-shot run takes the scheduler's path: the same jobs (`Job`), run by the same `run_tick`,
under the same time bound (`Job.effective_timeout_s`), and stopped the same way. SIGINT and
SIGTERM set the stop flag that ticks check between units of work (a batch, a page, a tenant,
an archive batch), so Ctrl-C never interrupts a batch half-way: the tick returns early, says so
in its figures, and everything not done stays on disk for the next run. The run then ends with
128 + the signal's number (130 for Ctrl-C), as a shell expects of an interrupted command. A
second signal exits at once; the next start recovers anything in flight.

The runtime does not parse flags or map errors to exit codes: `daemons/` does.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import AsyncIterator, Awaitable, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from typing import TypeVar

import structlog

from core.base.config.config import Settings
from core.base.rules.camel_json import Figures
from core.base.rules.errors import KbError, LockHeld, StoreUnavailable
from core.base.runtime.context import TickContext, TickControl
from core.base.runtime.signals import stop_on_signals
from core.suite.leadership import Leadership, holder_name, lease_ms_for, needs_election
from core.suite.tick import Job, TickResult, open_context, run_tick

log = structlog.get_logger(__name__)

T = TypeVar("T")



class TimedOut(KbError):
    """A one-shot run took longer than its job's time bound and was cancelled: exit 1. Its
    transaction rolled back; what it had committed stays, and nothing is lost."""


@dataclass(slots=True)
class OneShot:
    """A run in progress: its stop flag and the stop signal it received, if any."""

    control: TickControl = field(default_factory=TickControl)
    signal_number: int | None = None

    @property
    def stopped_exit_code(self) -> int | None:
        """128 + the signal's number when a stop signal came (130 for Ctrl-C), else None."""
        return None if self.signal_number is None else 128 + self.signal_number


@contextmanager
def graceful_stop(run: OneShot) -> Iterator[OneShot]:
    """While inside: the first SIGINT/SIGTERM sets the run's stop flag; a second one exits the
    process at once (128 + its number)."""

    def request_stop(signum: int) -> None:
        run.signal_number = signum
        log.info("shutdown.requested", signal=signal.Signals(signum).name,
                 message="finishing the current unit of work; a second signal exits now")
        run.control.request_stop()

    with stop_on_signals(request_stop, forced_exit=lambda signum: 128 + signum):
        yield run


async def within(awaitable: Awaitable[T], *, timeout_s: float, what: str) -> T:
    """`awaitable`, cancelled after `timeout_s` (TimedOut, logged as `tick.timed_out`)."""
    try:
        async with asyncio.timeout(timeout_s) as deadline:
            return await awaitable
    except TimeoutError:
        if not deadline.expired():
            raise
        log.error("tick.timed_out", job=what, timeoutS=timeout_s)
        raise TimedOut(f"{what} took longer than {timeout_s:g} s and was stopped; "
                       "re-run it: nothing it did not finish was lost") from None


async def run_job(context: TickContext, job: Job, *, dry_run: bool) -> TickResult[Figures]:
    """One tick of `job`, exactly as the scheduler runs it (`run_tick`), bounded by the
    job's timeout."""
    return await within(run_tick(job.name, context, job.tick, dry_run=dry_run,
                                 drainer=job.drainer),
                        timeout_s=job.effective_timeout_s, what=f"the {job.name} tick")


@asynccontextmanager
async def one_shot(settings: Settings, *, dry_run: bool = False
                   ) -> AsyncIterator[tuple[TickContext, OneShot]]:
    """Open the stores for a run outside the scheduler, with stop signals turned into the
    run's stop flag; close them (in reverse order) on the way out."""
    run = OneShot()
    with graceful_stop(run):
        async with open_context(settings, dry_run=dry_run, control=run.control) as context:
            yield context, run


@dataclass(frozen=True, slots=True)
class JobsRun:
    """What a one-shot run of some jobs did: each job's figures, by job name, in order."""

    figures: Mapping[str, TickResult[Figures]]
    run: OneShot


async def run_jobs_once(settings: Settings, jobs: Sequence[Job], *, dry_run: bool,
                        elected: str | None = None) -> JobsRun:
    """Run each job's tick once, in order, on one set of stores; a job after a stop signal
    is not started. Raises what a tick raises (after it was logged and recorded).

    `elected` names a daemon whose jobs run on one host at a time: with the state on
    PostgreSQL the run takes the leader lock for its duration, and is refused (LockHeld,
    exit 1) while another host leads.
    """
    if elected is not None and needs_election(settings.state.url, elected=True,
                                              dry_run=dry_run):
        leadership = Leadership(settings.state.url, holder=holder_name(elected),
                                lease_ms=lease_ms_for(j.interval_ms for j in jobs))
        async with leadership.running():
            if leadership.unreachable is not None:
                raise StoreUnavailable(f"PostgreSQL {settings.state.url}: store unavailable, "
                                       f"nothing lost ({leadership.unreachable})")
            if not leadership.leads:
                raise LockHeld(f"another host leads the {elected} passes; this run would "
                               "be a second one (stop that daemon, or run --dry-run)")
            return await run_jobs_once(settings, [leadership.elected(j) for j in jobs],
                                       dry_run=dry_run)
    figures: dict[str, TickResult[Figures]] = {}
    async with one_shot(settings, dry_run=dry_run) as (context, run):
        for job in jobs:
            if run.control.stopping:
                log.info("oneshot.skipped", job=job.name, reason="stop requested")
                break
            figures[job.name] = await run_job(context, job, dry_run=dry_run)
    return JobsRun(figures, run)
