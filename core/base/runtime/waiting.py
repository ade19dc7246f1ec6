"""Waiting, written once: when a job's first tick is due, how long repeated failures stretch
the interval, a sleep that a stop cuts short, and a store opened once it answers.

A daemon that starts while its Chroma server or its PostgreSQL is down does not die: it tries
again after 0.5, 1, 2 ... s (jittered, at most `max_s`) until the store answers or the daemon
is asked to stop, and says so once per outage (`store.unavailable`, then `store.available`).
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from typing import TypeVar

from core.base.rules.errors import StoreUnavailable
from core.base.state.outage import Outage
from core.base.state.reopening_graph import retry_delay_s

T = TypeVar("T")

#: Repeated failures stretch the wait before the next tick up to this many intervals.
MAX_BACKOFF_FACTOR = 4


def first_run_delay_ms(last_started_ms: int | None, interval_ms: int, now: int, *,
                       resume: bool = False) -> int:
    """How long to wait before a job's first tick (pure): none without a previous tick, when
    work must be resumed (the last tick did not complete, or left work in flight), or when one
    interval has passed since it started; otherwise the remainder, never more than one
    interval (a clock that went backwards must not postpone the pass indefinitely)."""
    if last_started_ms is None or resume:
        return 0
    return max(0, min(last_started_ms + interval_ms - now, interval_ms))


def backoff_delay_ms(consecutive_failures: int, interval_ms: int) -> int | None:
    """The wait before the next tick after repeated failures (pure): None for the first
    failure (the normal interval applies), then 2, 4 ... intervals up to MAX_BACKOFF_FACTOR."""
    if consecutive_failures < 2:
        return None
    factor: int = min(2 ** (consecutive_failures - 1), MAX_BACKOFF_FACTOR)
    return interval_ms * factor


async def wait_for_stop(stop: asyncio.Event, seconds: float) -> bool:
    """Sleep up to `seconds`, waking early when `stop` is set; True when it was."""
    try:
        await asyncio.wait_for(stop.wait(), seconds)
    except TimeoutError:
        return False
    return True


async def open_when_reachable(open_store: Callable[[], Awaitable[T]], *, stop: asyncio.Event,
                              what: str, max_s: float,
                              draw: Callable[[], float] = random.random) -> T | None:
    """`open_store()`, tried again while it raises StoreUnavailable; None when `stop` came
    first. Any other error (a held embedded store: LockHeld) propagates: waiting would not
    free it."""
    outage = Outage(began="store.unavailable", ended="store.available", store=what)
    while not stop.is_set():
        try:
            opened = await open_store()
        except StoreUnavailable as exc:
            outage.failed(str(exc))
            await wait_for_stop(stop, retry_delay_s(outage.failures, max_s=max_s,
                                                    draw=draw()))
            continue
        outage.recovered()
        return opened
    return None
