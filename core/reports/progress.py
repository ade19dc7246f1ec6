"""Progress of a long operator run: a bar on a terminal, throttled log lines everywhere else.

An operator who starts a back-fill of thousands of sessions by hand wants to see it move; a
systemd unit or a CI log wants a few structured lines instead of carriage returns and escape
codes. `choose_progress` picks one by whether stderr is a terminal, so the command that reports
progress never needs to know which it got: both are a `core.jobs.context.Progress`.
`render_bar` is pure (numbers in, text out), so the bar's arithmetic is tested without a
terminal.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TextIO

import structlog

log = structlog.get_logger(__name__)

#: Redraw the bar at most this often (s): a redraw per batch would flood a slow terminal.
BAR_REDRAW_INTERVAL_S = 0.1
#: Log a progress line at most this often (s) off a terminal: enough to tell a stuck run from a
#: slow one in journald without a line per batch.
LOG_INTERVAL_S = 10.0
#: Characters of the bar itself.
BAR_WIDTH = 30


def render_bar(done: int, total: int, *, label: str, elapsed_s: float,
               width: int = BAR_WIDTH) -> str:
    """One line: `label [#####.....] 400/1000  40%  12s, ~18s left` (no newline).

    The estimate appears once a tenth is done: earlier ones swing too much to be useful.
    """
    total = max(total, 0)
    done = min(max(done, 0), total) if total else 0
    fraction = done / total if total else 1.0
    filled = int(fraction * width)
    bar = "#" * filled + "." * (width - filled)
    line = f"{label} [{bar}] {done}/{total} {fraction:4.0%}  {elapsed_s:.0f}s"
    if 0.1 <= fraction < 1.0:
        remaining = elapsed_s * (1 - fraction) / fraction
        line += f", ~{remaining:.0f}s left"
    return line


class TerminalProgress:
    """A bar redrawn in place on `stream` (a terminal), throttled to BAR_REDRAW_INTERVAL_S."""

    def __init__(self, stream: TextIO, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._stream = stream
        self._clock = clock
        self._label = ""
        self._total = 0
        self._done = 0
        self._started = 0.0
        self._drawn_at = float("-inf")
        self._active = False

    def start(self, total: int, *, label: str) -> None:
        """Draw an empty bar."""
        self._label, self._total, self._done = label, total, 0
        self._started = self._clock()
        self._active = True
        self._draw(force=True)

    def advance(self, done: int) -> None:
        """Move the bar (redrawn only when the throttle allows)."""
        self._done += done
        self._draw(force=False)

    def finish(self) -> None:
        """Draw the final state and end the line, so later output starts on a fresh one."""
        if self._active:
            self._draw(force=True)
            self._stream.write("\n")
            self._stream.flush()
            self._active = False

    def _draw(self, *, force: bool) -> None:
        now = self._clock()
        if not force and now - self._drawn_at < BAR_REDRAW_INTERVAL_S:
            return
        self._drawn_at = now
        line = render_bar(self._done, self._total, label=self._label,
                          elapsed_s=now - self._started)
        # \r returns to the start of the line; \x1b[K clears what a longer line left behind.
        self._stream.write("\r" + line + "\x1b[K")
        self._stream.flush()


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
