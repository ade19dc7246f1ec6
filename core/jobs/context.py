"""Opening and closing the two stores a daemon works on, in one place and in a fixed order.

The graph opens first (cheap, local) and Chroma second; they close in reverse. A dry run opens
the graph read-only, so not one byte of it can change.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

from core.rules.config import Settings
from core.stores.chroma import VectorStore
from core.stores.sqlite import GraphDB


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
class Stores:
    """What a tick works on: its settings, the graph, the Chroma store, and its control."""

    settings: Settings
    graph: GraphDB
    vectors: VectorStore
    control: TickControl = field(default_factory=TickControl)


@asynccontextmanager
async def open_stores(
    settings: Settings,
    *,
    dry_run: bool = False,
    vectors: VectorStore | None = None,
    control: TickControl | None = None,
) -> AsyncIterator[Stores]:
    """Open the graph (read-only for a dry run) and Chroma; close both on the way out.

    `vectors`, when given, is an already open store shared between daemons in one process (an
    embedded store admits one opener per process); it is not closed here.
    """
    graph = await GraphDB.open(settings.graph_db_path, read_only=dry_run)
    try:
        own_vectors = vectors is None
        store = vectors if vectors is not None else await VectorStore.open(settings)
        try:
            yield Stores(settings, graph, store, control or TickControl())
        finally:
            if own_vectors:
                await store.close()
    finally:
        await graph.close()
