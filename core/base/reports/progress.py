"""Progress of a long operator run: a bar on a terminal, throttled log lines everywhere else.

An operator who starts a back-fill of thousands of sessions by hand wants to see it move; a
systemd unit or a CI log wants a few structured lines instead of carriage returns and escape
codes. `choose_progress` picks one by whether stderr is a terminal, so the command that reports
progress never needs to know which it got: both are a `core.base.runtime.context.Progress`. The bar
is rich's (the library that draws chromadb's own output).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TextIO

import structlog
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TaskProgressColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

log = structlog.get_logger(__name__)

#: Log a progress line at most this often (s) off a terminal: enough to tell a stuck run from a
#: slow one in journald without a line per batch.
LOG_INTERVAL_S = 10.0
#: Redraws of the bar per second: a redraw per batch would flood a slow terminal.
BAR_REFRESH_PER_S = 10.0


class TerminalProgress:
    """rich's progress bar on `stream` (a terminal): the phase, a bar, done/total, the
    percentage, the time spent and an estimate of the time left; cleared of nothing when it
    ends, so the final state stays on screen above the summary."""

    def __init__(self, stream: TextIO) -> None:
        self._console = Console(file=stream, highlight=False)
        self._progress: Progress | None = None
        self._task: TaskID | None = None

    def start(self, total: int, *, label: str) -> None:
        """Draw an empty bar for a phase of `total` units."""
        self.finish()
        self._progress = Progress(
            TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
            TaskProgressColumn(), TimeElapsedColumn(), TimeRemainingColumn(),
            console=self._console, refresh_per_second=BAR_REFRESH_PER_S, transient=False)
        self._task = self._progress.add_task(label, total=max(total, 0))
        self._progress.start()

    def advance(self, done: int) -> None:
        """Move the bar (rich redraws at most BAR_REFRESH_PER_S times a second)."""
        if self._progress is not None and self._task is not None:
            self._progress.advance(self._task, done)

    def finish(self) -> None:
        """Draw the final state and leave the line, so later output starts on a fresh one."""
        if self._progress is not None:
            self._progress.stop()
            self._progress, self._task = None, None


class LogProgress:
    """Structured `progress` log lines, at most one per LOG_INTERVAL_S, plus one at the end."""

    def __init__(self, *, event: str = "progress", interval_s: float = LOG_INTERVAL_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._event = event
        self._interval_s = interval_s
        self._clock = clock
        self._label = ""
        self._total = 0
        self._done = 0
        self._logged_at = 0.0
        self._active = False

    def start(self, total: int, *, label: str) -> None:
        """Remember the phase; the first line comes after one interval (short runs stay quiet)."""
        self._label, self._total, self._done = label, total, 0
        self._logged_at = self._clock()
        self._active = True

    def advance(self, done: int) -> None:
        """Count; log when an interval has passed since the last line."""
        self._done += done
        if self._clock() - self._logged_at >= self._interval_s:
            self._log()

    def finish(self) -> None:
        """Log the final count once (nothing for an empty phase: there was no wait to explain)."""
        if self._active and self._total > 0:
            self._log()
        self._active = False

    def _log(self) -> None:
        self._logged_at = self._clock()
        log.info(self._event, phase=self._label, done=self._done, total=self._total)


def choose_progress(stream: TextIO, *, event: str = "progress"
                    ) -> TerminalProgress | LogProgress:
    """A bar when `stream` is a terminal, log lines otherwise (journald, pipes, files)."""
    if hasattr(stream, "isatty") and stream.isatty():
        return TerminalProgress(stream)
    return LogProgress(event=event)
