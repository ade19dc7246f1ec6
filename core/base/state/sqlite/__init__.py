"""The SQLite backend of the store seam: the file at `graphDbPath` (the embedded default).

`connection` holds the one aiosqlite connection and its transactions, `schema` the DDL,
`statements` the SQL text of every table-group operation.
"""

from core.base.state.graph_db import GraphDataError
from core.base.state.sqlite.connection import BUSY_TIMEOUT_MS, SqliteGraph, SqliteTransaction

__all__ = ["BUSY_TIMEOUT_MS", "GraphDataError", "SqliteGraph", "SqliteTransaction"]
