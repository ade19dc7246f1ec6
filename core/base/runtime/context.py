"""What a tick works on: its settings, the stores, how it hears that the daemon stops, and
where a long run reports its progress.

Jobs receive a `TickContext`; the runtime builds it (`core.suite.tick.open_context`, or the
scheduler with its own graph connection per daemon and one shared Chroma store).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Protocol

from core.base.chroma import VectorStore
from core.base.config.config import Settings
from core.base.state.graph_db import GraphDB


class TickControl:
    """How a running tick hears that the daemon is stopping, and tells it that it is alive.

    Ticks call `progress()` after each unit of work (a batch, a page, a tenant); the runtime's
    watchdog stops pinging systemd when a tick goes quiet for too long. Ticks check `stopping`
    between units and return early, leaving the rest on disk for the next start.
    """

    def __init__(self) -> None:
        self.stopping = False
        self.last_progress = time.monotonic()

    def progress(self) -> None:
        """Record that the tick is making progress."""
        self.last_progress = time.monotonic()

    def request_stop(self) -> None:
        """Ask running ticks to finish their current unit and return."""
        self.stopping = True


@dataclass(frozen=True, slots=True)
class TickContext:
    """What a tick works on: its settings, the graph, the Chroma store, and its control."""

    settings: Settings
    graph: GraphDB
    vectors: VectorStore
    control: TickControl = field(default_factory=TickControl)


class Progress(Protocol):
    """What a long run reports: how much there is, how much is done, that it finished."""

    def start(self, total: int, *, label: str) -> None:
        """Begin a phase of `total` units (sessions, lines...)."""

    def advance(self, done: int) -> None:
        """`done` more units are finished."""

    def finish(self) -> None:
        """The phase ended (also after a failure: leaves the terminal clean)."""
