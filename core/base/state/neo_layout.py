"""The graph's layout, checked when the configuration is loaded, before any store opens: the
`neoRoot` defaults applied (`core.base.config.neo_layout`), and the graph file's schema read and
held against `graphSchema` (`core.base.rules.graph_schema.choose_schema`).

Every command loads its configuration first, so a bad layout is exit 2 with one line on every
command, a daemon included, before anything is written: a `neoRoot` that is not a folder or
holds no `.neo-ai-data`, a variable that names nothing usable, a graph file of neither schema
or not the one named, `neoRoot` or `graphSchema = "neo"` beside `stateUrl` (a neo.mjs graph
is a SQLite file; PostgreSQL holds this project's schema only). Reading the schema opens the
file read-only, and a missing file is never created here.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from core.base.config.config import TABLE, LoadedConfig
from core.base.config.config_settings import StateSettings
from core.base.config.neo_layout import NeoLayoutError, neo_defaults, queue_path
from core.base.rules.errors import ConfigError
from core.base.rules.graph_schema import SCHEMA_NEO, FoundSchema, choose_schema
from core.base.state.sqlite.found_schema import read_found_schema_sync


def with_graph_layout(loaded: LoadedConfig, environ: Mapping[str, str]) -> LoadedConfig:
    """`loaded` with `neoRoot`'s defaults for the keys the file did not set, after checking
    the layout (see the module docstring); ConfigError (one line) when it cannot be used."""
    settings = loaded.settings
    state = settings.state
    where = str(settings.source) if settings.source is not None else "configuration"
    if state.url:
        if state.neo_root is not None or state.graph_schema == SCHEMA_NEO:
            key = "neoRoot" if state.neo_root is not None else 'graphSchema = "neo"'
            raise ConfigError(f"{where}: {TABLE}.stateUrl cannot go with {key}: a neo.mjs "
                              "graph is a SQLite file (its graphDbPath), and PostgreSQL holds "
                              "this project's schema only")
        return loaded
    if state.neo_root is None:
        _check_schema(state, read_found_schema_sync(state.graph_db_path), where=where)
        return loaded
    neo_root = state.neo_root
    if not neo_root.is_dir():
        raise ConfigError(f"{where}: {TABLE}.neoRoot: {neo_root}: not a folder (a neo.mjs "
                          "checkout)")
    try:
        defaults = neo_defaults(neo_root, environ)
    except NeoLayoutError as exc:
        raise ConfigError(f"{where}: {TABLE}.neoRoot: {exc}") from None
    if not defaults.data_root.is_dir():
        raise ConfigError(f"{where}: {TABLE}.neoRoot: {neo_root} holds no "
                          f"{defaults.data_root.name} folder ({defaults.data_root}): not a "
                          "neo.mjs checkout the platform has run in")
    given = loaded.given
    graph_path = state.graph_db_path if "graphDbPath" in given else defaults.graph_db_path
    found = read_found_schema_sync(graph_path)
    state = dataclasses.replace(state, graph_db_path=graph_path)
    _check_schema(state, found, where=where)
    drain, chroma = settings.drain, settings.chroma
    if "lazyEdgesQueuePath" not in given:
        era = found.neo.era if found.neo is not None else None
        drain = dataclasses.replace(drain,
                                    lazy_edges_queue_path=queue_path(neo_root, defaults, era))
    if "chromaUrl" not in given:
        chroma = dataclasses.replace(chroma, url=defaults.chroma_url)
    replaced = dataclasses.replace(settings, state=state, drain=drain, chroma=chroma)
    return dataclasses.replace(loaded, settings=replaced)


def _check_schema(state: StateSettings, found: FoundSchema, *, where: str) -> None:
    choice = choose_schema(found, state.graph_schema, path=str(state.graph_db_path),
                           neo_root=state.neo_root is not None)
    if choice.refusal is not None:
        raise ConfigError(f"{where}: {choice.refusal}")

