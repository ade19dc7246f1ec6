"""SIGINT and SIGTERM, for the daemons and for one-shot runs alike: the first asks for a
graceful stop, a second exits at once (the next start recovers anything in flight)."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import structlog

log = structlog.get_logger(__name__)

#: The signals that stop a daemon or a one-shot run.
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


@contextmanager
def stop_on_signals(
    on_stop: Callable[[int], None], *, forced_exit: Callable[[int], int]
) -> Iterator[None]:
    """While inside (on the running loop): the first SIGINT/SIGTERM calls `on_stop(signum)`,
    which asks the work to finish its current unit; a second one logs `shutdown.forced` and
    exits the process at once with `forced_exit(signum)`."""
    loop = asyncio.get_running_loop()
    seen = 0

    def on_signal(signum: int) -> None:
        nonlocal seen
        seen += 1
        if seen == 1:
            on_stop(signum)
            return
        log.warning("shutdown.forced", signal=signal.Signals(signum).name)
        sys.stderr.flush()
        os._exit(forced_exit(signum))

    for signum in STOP_SIGNALS:
        loop.add_signal_handler(signum, on_signal, signum)
    try:
        yield
    finally:
        for signum in STOP_SIGNALS:
            loop.remove_signal_handler(signum)
