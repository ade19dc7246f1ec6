"""Fencing: a host that no longer leads deletes nothing.

With the state on PostgreSQL, reconcile, retention and alerting passes run on the host that
holds the leader lock (`core.suite.leadership`). A pass can outlive its host's leadership (the
process was paused with SIGSTOP, the network was cut, a standby took over), so checking at the
start of a pass is not enough: `ensure_still_leads` is called right before every store delete
(the hook in `core.reconcile.deletion`, before every band's delete) and asks the server,
on the lock's own session, whether this host still leads in the term the pass started in.

The runtime installs the check for the duration of a tick (`fenced`); outside one (SQLite, dry
runs, one-shot restore) there is no fence and nothing changes. A pass that ends up fenced fails
its remaining tenants with `NotLeading`, logged as `leadership.fenced` with the reason.

A check that passes is valid for `Fence.valid_for_s` from its start (half a lease: no standby
can lead before one lease after it): the delete it allows is not sent later than that
(`core.base.io.fence_deadline`), so a leader paused between its check and its request, for
longer than that, sends nothing when it resumes.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Protocol

import structlog

from core.base.io.fence_deadline import allow_until, clock
from core.base.rules.errors import KbError

log = structlog.get_logger(__name__)


class NotLeading(KbError):
    """This host no longer leads: the delete it was about to make was not made (exit 1)."""


class Fence(Protocol):
    """What a pass asks before a delete."""

    @property
    def valid_for_s(self) -> float:
        """How long after its start a check that passed allows the delete to be sent."""
        ...

    async def lost_reason(self) -> str | None:
        """None while this host still leads in the pass's term; else why it does not."""
        ...


_fence: ContextVar[Fence | None] = ContextVar("kb_fence", default=None)


@contextmanager
def fenced(fence: Fence) -> Iterator[None]:
    """Run the enclosed tick under `fence` (every delete in it checks it first)."""
    previous = _fence.set(fence)
    try:
        yield
    finally:
        _fence.reset(previous)
        allow_until(None)


async def ensure_still_leads(action: str) -> None:
    """Raise NotLeading (and log why) when the tick's fence says this host lost the lead;
    nothing when there is no fence (one host, SQLite)."""
    fence = _fence.get()
    if fence is None:
        return
    started = clock()
    reason = await fence.lost_reason()
    if reason is None:
        allow_until(started + fence.valid_for_s)
    else:
        log.error("leadership.fenced", action=action, reason=reason,
                  message="this host no longer leads: nothing deleted")
        raise NotLeading(f"{action} not made: this host no longer leads ({reason})")
