"""One active reconciler, standbys: leader election through PostgreSQL's advisory lock.

With `stateUrl` set, the jobs of an elected daemon (`DaemonSpec.elected`: reconcile, retention,
alerting) run on one host at a time: the host whose `Leadership` holds the leader lock
(`core.base.state.postgres.leader_lock`) on a session of its own. Every host runs the same daemon;
the others are standbys, whose ticks are skipped (`tick.skipped reason="standby..."`).

- Election: every `heartbeat_s` (a third of the lease) the leader renews its lease and a
  standby tries for the lock; a leader that died or went silent loses it within one lease plus
  one heartbeat (how: `core.base.state.postgres.leader_lock`). The new leader carries on the
  shared schedule (`DaemonRunner._carry_on_schedule`).
- Fencing: a tick runs under a fence of its term (`core.base.runtime.fencing`): before each
  delete it renews the lease, so a leader that was paused, or lost the lock and took it again
  mid-pass, deletes nothing.
- An unreachable database is logged once per outage (`leadership.unreachable`, then
  `leadership.reachable`); each heartbeat tries again.

With SQLite (no `stateUrl`) or a dry run there is no election.
"""

from __future__ import annotations

import asyncio
import os
import socket
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from contextlib import asynccontextmanager, suppress
from dataclasses import replace
from typing import Protocol

import structlog

from core.base.rules.camel_json import Figures
from core.base.rules.errors import LockHeld
from core.base.runtime.context import TickContext
from core.base.runtime.fencing import fenced
from core.base.state.outage import Outage
from core.base.state.postgres.leader_lock import TAKEOVER_HINT, InsufficientPrivilege, LeaderLock
from core.suite.tick import Job

log = structlog.get_logger(__name__)

#: The lease: how long a silent leader keeps the lock. A third of the shortest elected
#: interval, within [LEASE_MIN_MS, LEASE_MAX_MS] (shorter would take the lead from a host
#: whose event loop is merely busy).
LEASE_MIN_MS = 1_000
LEASE_MAX_MS = 30_000
#: Why a leader lost the lead when its own session answers no more.
_SESSION_ENDED = ("its lock session ended (a standby ended it after its lease ran out, or it "
                  "was cut off, or the database restarted)")


def lease_ms_for(intervals_ms: Iterable[int]) -> int:
    """The lease for jobs of these intervals (pure)."""
    return max(LEASE_MIN_MS, min(LEASE_MAX_MS, min(intervals_ms) // 3))


def holder_name(daemon: str) -> str:
    """How this host shows as the leader: `kb-reconcile@host:pid`."""
    return f"kb-{daemon}@{socket.gethostname()}:{os.getpid()}"


class HeartbeatObserver(Protocol):
    """Told after each heartbeat whether this host leads and who does."""

    def __call__(self, *, leads: bool, holder: str | None) -> None: ...


class Leadership:
    """This host's side of the election: whether it leads, and in which term."""

    def __init__(self, url: str, *, holder: str, lease_ms: int,
                 on_acquired: Callable[[], Awaitable[None]] | None = None,
                 on_heartbeat: HeartbeatObserver | None = None) -> None:
        self.url = url
        self.holder = holder
        self.lease_ms = lease_ms
        self.heartbeat_s = lease_ms / 3000
        self.on_acquired = on_acquired
        #: Told after each heartbeat `leads=` and `holder=` (who leads as this host saw it:
        #: itself, the session holding the lock, or None when nobody held it or the database
        #: could not be asked): what /metrics shows (`Metrics.show_leadership`).
        self.on_heartbeat = on_heartbeat
        self.leads = False
        #: Increases each time this host takes the lock: a fence belongs to one term.
        self.term = 0
        self._lock: LeaderLock | None = None
        self._outage = Outage(began="leadership.unreachable", ended="leadership.reachable",
                              holder=holder)
        self._refused = False

    async def step(self) -> None:
        """One heartbeat: the leader checks its lock; a standby tries for it; then says who
        leads (`on_heartbeat`)."""
        await self._contend()
        if self.on_heartbeat is not None:
            holder = self.holder if self.leads else (
                await self._lock.holder() if self._lock is not None else None)
            self.on_heartbeat(leads=self.leads, holder=holder)

    async def _contend(self) -> None:
        if self.leads:
            if not await self._holds():
                await self._lose(_SESSION_ENDED)
            return
        try:
            if self._lock is None:
                self._lock = await LeaderLock.open(self.url, holder=self.holder,
                                                   lease_ms=self.lease_ms)
            acquired = await self._lock.try_acquire() or await self._take_over(self._lock)
        except Exception as exc:
            self._outage.failed(f"{type(exc).__name__}: {exc}")
            await self._drop_session()  # a lock taken by a failed statement goes with it
            return
        self._outage.recovered()
        if acquired:
            self.leads, self.term = True, self.term + 1
            log.info("leadership.acquired", holder=self.holder, term=self.term,
                     leaseMs=self.lease_ms)
            if self.on_acquired is not None:
                await self.on_acquired()

    async def _take_over(self, lock: LeaderLock) -> bool:
        """End the holder's session when its lease ran out, then try for the lock again;
        whether this host took it. A role that may not end that session waits (said once)."""
        try:
            ended = await lock.end_silent_holder()
        except InsufficientPrivilege as exc:
            if not self._refused:
                self._refused = True
                log.error("leadership.takeover_refused", error=str(exc), hint=TAKEOVER_HINT)
            return False
        if ended is None:
            return False
        log.warning("leadership.holder_ended", holder=ended.holder, pid=ended.pid,
                    silentMs=ended.silent_ms, leaseMs=self.lease_ms, ended=ended.ended)
        return await lock.try_acquire()

    @property
    def unreachable(self) -> str | None:
        """Why the last heartbeat could not reach the database (None when it did)."""
        return self._outage.last_error if self._outage.ongoing else None

    async def _holds(self) -> bool:
        return self._lock is not None and await self._lock.renew()

    async def _lose(self, reason: str) -> None:
        if self.leads:
            log.warning("leadership.lost", holder=self.holder, term=self.term, reason=reason)
        self.leads = False
        await self._drop_session()

    async def _drop_session(self) -> None:
        lock, self._lock = self._lock, None
        if lock is not None:
            await lock.close()

    async def lost_reason_in(self, term: int) -> str | None:
        """None while this host holds the lock in `term` (asked of the server now)."""
        if not self.leads or self.term != term:
            return f"the lead was lost after term {term} began"
        if not await self._holds():
            await self._lose(_SESSION_ENDED)
            return _SESSION_ENDED
        return None

    async def run(self, stop: asyncio.Event) -> None:
        """Heartbeat until `stop`, then release the lock (a clean stop hands over at once)."""
        try:
            while not stop.is_set():
                try:
                    await self.step()
                except Exception:
                    log.error("leadership.step_failed", exc_info=True)
                with suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), self.heartbeat_s)
        finally:
            self.leads = False
            await self._drop_session()

    @asynccontextmanager
    async def running(self) -> AsyncIterator[Leadership]:
        """The heartbeat in a task of its own for the enclosed block (its first step done
        before the block starts); stopped and the lock released on the way out."""
        await self.step()
        stop = asyncio.Event()
        task = asyncio.create_task(self.run(stop), name=f"leadership:{self.holder}")
        try:
            yield self
        finally:
            stop.set()
            await asyncio.gather(task, return_exceptions=True)

    def elected(self, job: Job) -> Job:
        """`job` run only while this host leads, each tick under a fence of its term."""
        tick = job.tick

        async def elected_tick(context: TickContext, dry_run: bool) -> Figures:
            if dry_run:  # deletes nothing: any host may look
                return await tick(context, dry_run)
            if not self.leads:
                raise LockHeld(f"standby: another host leads the {job.name} passes")
            term = self.term

            class _TermFence:
                #: Half a lease: no standby ends this host's session before one lease after
                #: the renewal the check makes.
                valid_for_s = self.lease_ms / 2000

                async def lost_reason(_self) -> str | None:
                    return await self.lost_reason_in(term)

            with fenced(_TermFence()):
                return await tick(context, dry_run)

        return replace(job, tick=elected_tick)


def needs_election(settings_state_url: str, *, elected: bool, dry_run: bool) -> bool:
    """Whether a daemon's jobs go through the election (pure): only an elected daemon, on
    a shared state (PostgreSQL), and not a dry run (which deletes nothing)."""
    return elected and bool(settings_state_url) and not dry_run
