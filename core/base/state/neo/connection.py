"""A neo.mjs graph file as the daemons' state store: the SQLite connection of
`core.base.state.sqlite`, with the neo statements, the graph model, and the daemons' own tables.

Opening it creates the daemons' own tables (`core.base.state.neo.schema.OWN_DDL`) and, only when
the file has none, the original's `kb_ingestion_metrics`; nothing else of the file is touched:
no DDL on the original's tables, no index, no trigger, no `SchemaVersion` row. A dry run
(`read_only`) creates nothing in the file: what is missing is stood in for by TEMP tables of
the same names on its own connection (reads find them empty).

The original's boot may run while the daemons hold the file open (an E2 boot adds `user_id`
to an E1 graph): every write transaction first compares the file's schema cookie with the one
the layout was read at, and reads the layout again when it moved, inside the transaction, so
a write never uses a column list the file no longer has.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from core.base.rules.errors import StoreUnavailable
from core.base.rules.graph_schema import NeoLayout
from core.base.state.graph_db import GraphModel
from core.base.state.neo.model import NeoGraphModel
from core.base.state.neo.schema import NEO_TELEMETRY_DDL, OWN_DDL, OWN_PREFIX, own_statements
from core.base.state.neo.statements import NEO
from core.base.state.sqlite.connection import SqliteFile, SqliteGraph, SqliteTransaction
from core.base.state.sqlite.found_schema import read_found_schema
from core.base.state.statements import Statements

#: The file's schema cookie (SQLite raises it on every DDL, whoever runs it).
_SCHEMA_COOKIE = "PRAGMA schema_version"
_MAIN_TABLES = "SELECT name FROM sqlite_master WHERE type = 'table'"


class NeoTransaction(SqliteTransaction):
    """A write transaction on a neo.mjs graph file (its statements and its graph model)."""

    sql: Statements = NEO

    def __init__(self, conn: Any, model: NeoGraphModel) -> None:
        super().__init__(conn)
        self.model: GraphModel | None = model


class NeoGraph(SqliteGraph):
    """The state store on a neo.mjs graph file (see the module docstring)."""

    sql: Statements = NEO

    def __init__(self, file: SqliteFile, layout: NeoLayout, cookie: int) -> None:
        super().__init__(file.conn, file.path, read_only=file.read_only,
                         in_memory=file.in_memory, immutable=file.immutable)
        self._file = file
        self._model = NeoGraphModel(layout)
        #: The original's graph (`core.base.state.neo.model`).
        self.model: GraphModel | None = self._model
        self._cookie = cookie

    @property
    def layout(self) -> NeoLayout:
        """What the file holds, as last read (its era, its `user_id` columns)."""
        return self._model.layout

    @classmethod
    async def on_file(cls, file: SqliteFile, layout: NeoLayout) -> NeoGraph:  # type: ignore[override]
        """The state store on an open neo.mjs graph file (its schema already read): the
        daemons' own tables created (TEMP stand-ins for a dry run), and the original's
        telemetry table when it has none."""
        existing = {str(r[0]) for r in await file.rows(_MAIN_TABLES)}
        script = list(OWN_DDL)
        if not layout.telemetry_table:
            script.append(NEO_TELEMETRY_DDL)
        if file.read_only:
            # Stand-ins on this connection only, for the tables the file lacks (one the file
            # has must not be shadowed): a dry run finds them empty, and the file is never
            # written (its TEMP schema lives in memory).
            script = ["PRAGMA temp_store = MEMORY;",
                      *(_temporary(sql) for table, sql in own_statements()
                        if table not in existing)]
            if not layout.telemetry_table:
                script.append(_temporary(NEO_TELEMETRY_DDL))
        await file.prepare(script)
        cookie = int((await file.rows(_SCHEMA_COOKIE))[0][0])
        return cls(file, layout, cookie)

    def _transaction_on(self, conn: Any) -> NeoTransaction:
        return NeoTransaction(conn, self._model)

    @asynccontextmanager
    async def write(self) -> AsyncIterator[NeoTransaction]:
        """`SqliteGraph.write()`, with the layout read again first when the file's schema
        changed since it was read (see the module docstring)."""
        async with super().write() as tx:
            await self._follow_schema(tx)
            assert isinstance(tx, NeoTransaction)
            yield tx

    async def _follow_schema(self, tx: SqliteTransaction) -> None:
        cookie = int((await tx.query(_SCHEMA_COOKIE))[0][0])
        if cookie == self._cookie:
            return
        found = await read_found_schema(self._file.conn.execute_fetchall, self._file.path)
        if found.neo is None:
            raise StoreUnavailable(f"SQLite {self.path}: the file no longer holds a neo.mjs "
                                   f"graph: found {found.found}")
        self._model.layout = found.neo
        self._cookie = cookie

    async def table_names(self) -> set[str]:
        """The file's tables by the names this project's modules know them by: `nodes` and
        `edges` for the original's graph, the own tables without their prefix, the original's
        other tables (`GraphLog`, ...) as they are; TEMP stand-ins of a dry run left out."""
        names = {str(r[0]) for r in await self.query(_MAIN_TABLES)}
        shown = {n.removeprefix(OWN_PREFIX) if n.startswith(OWN_PREFIX) else n for n in names}
        layout = self.layout
        shown -= {layout.nodes_table, layout.edges_table}
        return shown | {"nodes", "edges"}


def _temporary(ddl: str) -> str:
    """`ddl` creating TEMP tables (an index on a TEMP table is TEMP too)."""
    return ddl.replace("CREATE TABLE IF NOT EXISTS", "CREATE TEMP TABLE IF NOT EXISTS")

