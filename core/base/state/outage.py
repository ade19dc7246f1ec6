"""An outage of one store, said twice: when it begins and when it ends, never once per try.

A daemon that cannot reach its state (or its leader lock's session) tries again on every tick
or heartbeat; logging each try would bury the one line that matters. `Outage` logs the first
failure as a warning with its reason, each later one at debug level, and the recovery once with
how long it lasted and how many failures it counted.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import structlog

log = structlog.get_logger(__name__)


class Outage:
    """The state of one store's reachability, as its logs tell it."""

    def __init__(self, *, began: str, ended: str, clock: Callable[[], float] = time.monotonic,
                 **fields: Any) -> None:
        self.began = began
        self.ended = ended
        self.fields = fields
        self._clock = clock
        self._since: float | None = None
        self.failures = 0
        #: The last failure's reason (kept after a recovery, for messages).
        self.last_error = ""

    @property
    def ongoing(self) -> bool:
        """Whether a failure was seen since the last recovery."""
        return self._since is not None

    def failed(self, error: str) -> None:
        """One more failed try: the first of an outage is a warning, the others debug lines."""
        self.failures += 1
        self.last_error = error
        if self._since is None:
            self._since = self._clock()
            log.warning(self.began, error=error, **self.fields)
        else:
            log.debug(self.began, error=error, failures=self.failures, **self.fields)

    def recovered(self) -> None:
        """The store answers again: said once, with the outage's length and failed tries."""
        if self._since is None:
            return
        log.info(self.ended, downS=round(self._clock() - self._since, 3),
                 failures=self.failures, **self.fields)
        self._since, self.failures = None, 0
