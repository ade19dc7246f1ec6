"""Which schema a SQLite graph file holds, read before anything is written to it
(`core.base.rules.graph_schema` classifies what is read): from an open file (`read_found_schema`),
or, for the configuration check every command runs before any store opens, from the path
(`read_found_schema_sync`). Reads only, never a side file (`core.base.state.sqlite.read_only`).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Awaitable, Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from core.base.rules.errors import StoreUnavailable
from core.base.rules.graph_schema import NEW, FoundSchema, SchemaObject, classify_schema
from core.base.state.sqlite.read_only import read_only_uri
from core.base.state.sqlite.waits import BUSY_TIMEOUT_MS

#: An open file's `execute_fetchall` (aiosqlite's): a statement and its parameters to rows.
FetchAll = Callable[..., Awaitable[Iterable[Any]]]

#: SQLite's result code for a file that is not a database (a text file, a truncated one).
_NOT_A_DATABASE = 26
#: A file's schema objects, SQLite's own left out (`core.base.rules.graph_schema`).
_SCHEMA_OBJECTS = ("SELECT type, name, tbl_name FROM sqlite_master "
                   "WHERE name NOT LIKE 'sqlite\\_%' ESCAPE '\\' ORDER BY type, name")
_TABLE_COLUMNS = "SELECT name FROM pragma_table_info(?) ORDER BY cid"


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _schema_versions_sql(table: str) -> str:
    """The `SchemaVersion` rows, read from the table as the file spells its name."""
    return f"SELECT id, version FROM {_quoted(table)}"


async def read_found_schema(fetch_all: FetchAll, path: Path) -> FoundSchema:
    """The schema of the file at `path`, open with `fetch_all` (`core.base.rules.graph_schema.
    classify_schema`), read from `sqlite_master`, the tables' columns and a `SchemaVersion`
    table: reads only."""
    try:
        entries = list(await fetch_all(_SCHEMA_OBJECTS))
        objects = [SchemaObject(str(t), str(n), str(tb),
                                tuple(str(c[0]) for c in await fetch_all(
                                    _TABLE_COLUMNS, (n,))) if t == "table" else ())
                   for t, n, tb in entries]
        versions = None
        version_table = _version_table(objects)
        if version_table is not None:
            versions = await _schema_versions(fetch_all, version_table)
    except sqlite3.Error as exc:
        return _unreadable(path, exc)
    return classify_schema(objects, versions)


def read_found_schema_sync(path: Path) -> FoundSchema:
    """`read_found_schema` without an event loop, for the configuration check every command
    runs before any store opens (`core.base.state.neo_layout`): the file opened `mode=ro`, never
    created; a missing file is `new`."""
    if not path.exists():
        return NEW
    # Read as a dry run reads (`core.base.state.sqlite.read_only`): no -wal/-shm created, no byte
    # changed, the WAL seen when a writer has one.
    uri, immutable = read_only_uri(path)
    try:
        conn = sqlite3.connect(uri, uri=True, timeout=BUSY_TIMEOUT_MS / 1000)
    except sqlite3.Error as exc:
        raise StoreUnavailable(f"SQLite {path}: open failed: {exc}") from exc
    try:
        entries = conn.execute(_SCHEMA_OBJECTS).fetchall()
        objects = [SchemaObject(str(t), str(n), str(tb),
                                tuple(str(c[0]) for c in conn.execute(_TABLE_COLUMNS, (n,)))
                                if t == "table" else ())
                   for t, n, tb in entries]
        table = _version_table(objects)
        versions = None
        if table is not None:
            try:
                versions = {str(r[0]): r[1]
                            for r in conn.execute(_schema_versions_sql(table)).fetchall()}
            except sqlite3.Error:
                versions = {"graph": "unreadable"}
    except sqlite3.Error as exc:
        return _unreadable(path, exc)
    finally:
        conn.close()
    if immutable is not None:
        immutable.check()
    return classify_schema(objects, versions)


def _version_table(objects: Sequence[SchemaObject]) -> str | None:
    return next((o.name for o in objects
                 if o.type == "table" and o.name.lower() == "schemaversion"), None)


async def _schema_versions(fetch: Any, table: str) -> dict[str, Any]:
    """The `SchemaVersion` rows by id; one that cannot be read reads as `unreadable` (the
    original's boot refuses such a file too)."""
    try:
        return {str(r[0]): r[1] for r in await fetch(_schema_versions_sql(table))}
    except sqlite3.Error:
        return {"graph": "unreadable"}


def _unreadable(path: Path, exc: sqlite3.Error) -> FoundSchema:
    """A file that is not a database is of no schema (a configuration error); any other
    failure to read it is an outage (StoreUnavailable: the next tick tries again)."""
    code = getattr(exc, "sqlite_errorcode", None)
    if isinstance(code, int) and code & 0xFF == _NOT_A_DATABASE:
        return FoundSchema("foreign", "a file that is not a SQLite database")
    raise StoreUnavailable(f"SQLite {path}: read failed: {exc}") from exc
