"""Opening the state store a configuration names: the one way in for every layer above.

`open_graph(settings.state)` is the only place that chooses a backend; the callers receive
the seam's `GraphDB` (`core.base.state.graph_db`) and never name a backend's class. A SQLite
file's schema is read before anything is written to it (`core.base.rules.graph_schema`): this
project's (`core.base.state.sqlite`) or the original's neo.mjs graph (`core.base.state.neo`), as
`graphSchema` allows; anything else is refused untouched (ConfigError, exit 2).
"""

from __future__ import annotations

from core.base.config.config_settings import StateSettings
from core.base.rules.errors import ConfigError
from core.base.rules.graph_schema import NEW, SCHEMA_NEO, choose_schema
from core.base.state.graph_db import GraphDB
from core.base.state.neo import NeoGraph
from core.base.state.postgres import PostgresGraph
from core.base.state.sqlite import BUSY_TIMEOUT_MS, SqliteGraph
from core.base.state.sqlite.connection import connect_file
from core.base.state.sqlite.found_schema import read_found_schema


async def open_graph(
    state: StateSettings, *, read_only: bool = False, busy_timeout_ms: int = BUSY_TIMEOUT_MS
) -> GraphDB:
    """Open the state store `state` names: the PostgreSQL database at `stateUrl` when one is
    set, else the SQLite file at `graphDbPath`, this project's graph or a neo.mjs one.

    `read_only` is for dry runs: not one byte can change, and a store that does not exist yet
    reads as empty (it is not created). `busy_timeout_ms` bounds how long a write waits for
    another writer before the tick gives up (StoreUnavailable).
    """
    if state.url:
        if state.graph_schema == SCHEMA_NEO:
            raise ConfigError('graphSchema = "neo" needs a SQLite graphDbPath, not stateUrl')
        return await PostgresGraph.open(state.url, read_only=read_only,
                                        busy_timeout_ms=busy_timeout_ms)
    path = state.graph_db_path
    if not read_only and not path.exists() and (state.neo_root is not None
                                                or state.graph_schema == SCHEMA_NEO):
        # Never create the platform's graph: a missing one is a wrong path.
        choice = choose_schema(NEW, state.graph_schema, path=str(path),
                               neo_root=state.neo_root is not None)
        raise ConfigError(choice.refusal or f"{path}: no neo.mjs graph there")
    file = await connect_file(path, read_only=read_only, busy_timeout_ms=busy_timeout_ms)
    try:
        found = await read_found_schema(file.conn.execute_fetchall, file.path)
        choice = choose_schema(found, state.graph_schema, path=str(path),
                               neo_root=state.neo_root is not None)
        if choice.refusal is not None:
            raise ConfigError(choice.refusal)
    except BaseException:
        await file.close()
        raise
    if choice.schema == SCHEMA_NEO and found.neo is not None:
        return await NeoGraph.on_file(file, found.neo)
    return await SqliteGraph.on_file(file)


def state_location(state: StateSettings) -> str:
    """Where `state` is, for messages: the `stateUrl` (it never holds a
    password: the configuration refuses one) or the SQLite file's path."""
    return state.url or str(state.graph_db_path)
