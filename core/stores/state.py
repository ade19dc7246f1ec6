"""Opening the state store a configuration names: the one way in for every layer above.

`open_graph(settings)` is the only place that chooses a backend; the callers receive the
seam's `GraphDB` (`core.stores.graph_db`) and never name a backend's class.
"""

from __future__ import annotations

from core.rules.config import Settings
from core.stores.graph_db import GraphDB
from core.stores.postgres import PostgresGraph
from core.stores.sqlite import BUSY_TIMEOUT_MS, SqliteGraph


async def open_graph(
    settings: Settings, *, read_only: bool = False, busy_timeout_ms: int = BUSY_TIMEOUT_MS
) -> GraphDB:
    """Open the state store of `settings`: the PostgreSQL database at `stateUrl` when one is
    set, else the SQLite file at `graphDbPath`.

    `read_only` is for dry runs: not one byte can change, and a store that does not exist yet
    reads as empty (it is not created). `busy_timeout_ms` bounds how long a write waits for
    another writer before the tick gives up (StoreUnavailable).
    """
    if settings.state_url:
        return await PostgresGraph.open(settings.state_url, read_only=read_only,
                                        busy_timeout_ms=busy_timeout_ms)
    return await SqliteGraph.open(settings.graph_db_path, read_only=read_only,
                                  busy_timeout_ms=busy_timeout_ms)


def state_location(settings: Settings) -> str:
    """Where the state of `settings` is, for messages: the `stateUrl` (it never holds a
    password: the configuration refuses one) or the SQLite file's path."""
    return settings.state_url or str(settings.graph_db_path)
