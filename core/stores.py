"""Opening and closing the two stores a daemon works on, in one place and in a fixed order.

The graph opens first (cheap, local) and Chroma second; they close in reverse. A dry run opens
the graph read-only, so not one byte of it can change.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

from core.config import Settings
from core.graph import GraphDB
from core.vectors import VectorStore


@dataclass(frozen=True, slots=True)
class Stores:
    """What a tick works on: its settings, the graph and the Chroma store."""

    settings: Settings
    graph: GraphDB
    vectors: VectorStore


@asynccontextmanager
async def open_stores(
    settings: Settings, *, dry_run: bool = False, vectors: VectorStore | None = None
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
            yield Stores(settings, graph, store)
        finally:
            if own_vectors:
                await store.close()
    finally:
        await graph.close()
