"""By when a delete that a fencing check allowed must be sent, and the last look before it is.

A fencing check (`core.base.runtime.fencing`) renews this host's lease on the server, and no standby
may take the lead until one lease after that renewal, by the server's clock
(`core.base.state.postgres.leader_lock`). The delete the check allowed must leave before then: a
leader paused between the check and its request (SIGSTOP, a hung event loop, a suspended
machine) would otherwise send it once a standby leads. So the check sets a deadline for the
task's next delete (`allow_until`), and the Chroma adapter looks at it on its own thread, the
last step before the request is sent (`refuse_when_late`; for the compound that reads rows
before it deletes them, again after the read): a late delete is not sent
(FenceExpired). What is left is a pause landing between that look and the request's bytes
leaving, a few instructions, and a request already on the wire.

The clock is CLOCK_BOOTTIME, which runs through a stopped process and a suspended machine; it
is only compared with itself, on this host, never with another host's clock or the server's.
"""

from __future__ import annotations

import time
from contextvars import ContextVar

from core.base.rules.errors import KbError

#: The deadline of the current task's next delete (None: no fence, as on SQLite).
_deadline: ContextVar[float | None] = ContextVar("kb_delete_deadline", default=None)
_CLOCK = getattr(time, "CLOCK_BOOTTIME", time.CLOCK_MONOTONIC)


class FenceExpired(KbError):
    """A delete was not sent: the fencing check that allowed it is too old (exit 1)."""


def clock() -> float:
    """Seconds on this host's boot-time clock (runs through stops and suspends)."""
    return time.clock_gettime(_CLOCK)


def allow_until(deadline: float | None) -> None:
    """The current task's next delete must be sent before `deadline` (`clock()` seconds);
    None lifts the deadline."""
    _deadline.set(deadline)


def current_deadline() -> float | None:
    """The deadline `allow_until` set for this task, if any (read on the event loop, then
    handed to the thread that sends the request)."""
    return _deadline.get()


def refuse_when_late(deadline: float | None, action: str) -> None:
    """Raise FenceExpired when `deadline` has passed; nothing without one."""
    if deadline is None:
        return
    late = clock() - deadline
    if late > 0:
        raise FenceExpired(f"{action} not sent: this host's fencing check is {late:.1f} s "
                           "past its validity (the host was paused after it); a standby may "
                           "lead now")
