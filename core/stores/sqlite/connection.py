"""The SQLite file at `graphDbPath`: one aiosqlite connection, short write transactions.

Every write happens in a `BEGIN IMMEDIATE` transaction (`GraphDB.write()`), so a writer learns
about a competing writer at the start, within `busy_timeout`, rather than half-way through.
WAL lets `status` and other readers run beside a daemon's writes. A dry run (and `status`)
opens the file read-only so that not one byte of it, nor of its `-wal` and `-shm`, changes and
no side file is created (how: `core.stores.sqlite.read_only`).

This is SQLite's implementation of the store seam (`core.stores.graph_db`): `SqliteGraph`
and `SqliteTransaction` satisfy its `GraphDB` and `Transaction`; their `sql` is SQLite's
statements (`core.stores.sqlite.statements`). `query`, `execute` and `executemany` are for the
modules of `core.stores` only (a test walks the source and fails on SQL text or a call of these
anywhere else).
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from collections.abc import AsyncIterator, Iterable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiosqlite
import structlog

from core.rules.errors import KbError, StoreUnavailable
from core.stores.files import create_private_file, make_private_dirs
from core.stores.graph_db import ConnectionTurn, GraphDataError
from core.stores.sqlite.read_only import ImmutableRead, read_only_uri
from core.stores.sqlite.schema import ALL_DDL
from core.stores.sqlite.statements import SQLITE
from core.stores.statements import Statements

log = structlog.get_logger(__name__)

#: How long a write waits for another writer before the tick gives up (ms). Long enough to ride
#: out a neighbour's batch commit (tens of ms), short enough that a stuck writer fails the tick
#: instead of hanging it.
BUSY_TIMEOUT_MS = 5_000
#: SQLite primary result codes that say the database cannot be used right now (permission,
#: abort, busy, locked, out of memory, read-only, interrupted, I/O error, corrupt, full, cannot
#: open, protocol, schema changed, auth, not a database): an outage, retried on a later tick.
#: Every other code (SQLITE_ERROR such as "malformed JSON", constraint, too big, mismatch...)
#: is a statement the data made fail.
_OUTAGE_CODES = frozenset({3, 4, 5, 6, 7, 8, 9, 10, 11, 13, 14, 15, 17, 23, 26})


def _store_error(path: Path, action: str, exc: BaseException) -> KbError:
    """StoreUnavailable for an outage (see _OUTAGE_CODES; an error without a code counts as
    one, to be safe: an outage spends no line's attempts), GraphDataError otherwise."""
    code = getattr(exc, "sqlite_errorcode", None)
    if isinstance(code, int) and code & 0xFF not in _OUTAGE_CODES:
        return GraphDataError(f"SQLite {path}: {action} failed: {exc}")
    return StoreUnavailable(f"SQLite {path}: {action} failed: {exc}")


def _create_private(path: Path) -> None:
    """Create the state file owner-only when it does not exist (SQLite would create it with
    0644 less the umask; its -wal and -shm take the database file's mode, so they follow)."""
    make_private_dirs(path.parent)
    with contextlib.suppress(FileExistsError):
        os.close(create_private_file(path, os.O_WRONLY | os.O_EXCL))


class SqliteTransaction:
    """A write transaction (`SqliteGraph.write()`): statements run in it commit or roll back
    together. For `core.stores` modules only."""

    sql: Statements = SQLITE

    def __init__(self, conn: aiosqlite.Connection) -> None:
        self._conn = conn

    async def execute(self, sql: str, params: Sequence[Any] = ()) -> None:
        """Run one statement."""
        await self._conn.execute(sql, params)

    async def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        """Run one statement for each row of parameters (one call, however many rows)."""
        await self._conn.executemany(sql, rows)

    async def query(self, sql: str, params: Sequence[Any] = ()) -> list[sqlite3.Row]:
        """Rows of a read inside the transaction (it sees the transaction's own writes), in
        one trip to the connection's thread (execute, fetch and close together)."""
        return list(await self._conn.execute_fetchall(sql, params))


class SqliteGraph:
    """One aiosqlite connection to the graph file, with the project's schema applied.

    A daemon's jobs share it, and the connection holds one transaction at a time, so write
    transactions take it in turn (`ConnectionTurn`); reads need no turn (one connection sees
    its own writes, and a read never starts a transaction)."""

    sql: Statements = SQLITE

    def __init__(self, conn: aiosqlite.Connection, path: Path, *, read_only: bool,
                 immutable: ImmutableRead | None = None) -> None:
        self._conn = conn
        self.path = path
        self.read_only = read_only
        #: For a read of the file alone: checked after every query (a writer may change it).
        self._immutable = immutable
        self._turn = ConnectionTurn()

    @property
    def location(self) -> str:
        """Where the state is, for messages: the file's path."""
        return str(self.path)

    @classmethod
    async def open(
        cls, path: Path, *, read_only: bool = False, busy_timeout_ms: int = BUSY_TIMEOUT_MS
    ) -> SqliteGraph:
        """Open (creating when writable) the SQLite file with WAL, busy_timeout and foreign keys.

        `read_only` is for dry runs: the file is opened so that not one byte of it or of its
        side files can change and none is created (`core.stores.sqlite.read_only`); when it
        does not exist yet, an empty in-memory graph stands in for it.
        """
        timeout = busy_timeout_ms / 1000
        in_memory = read_only and not path.exists()
        immutable: ImmutableRead | None = None
        try:
            if in_memory:
                conn = await aiosqlite.connect(":memory:", isolation_level=None)
            elif read_only:
                uri, immutable = read_only_uri(path)
                conn = await aiosqlite.connect(uri, uri=True, isolation_level=None,
                                               timeout=timeout)
            else:
                _create_private(path)
                conn = await aiosqlite.connect(str(path), isolation_level=None, timeout=timeout)
        except (sqlite3.Error, OSError) as exc:
            raise StoreUnavailable(f"SQLite {path}: open failed: {exc}") from exc
        try:
            if not read_only:
                await conn.execute("PRAGMA journal_mode=WAL")
                # FULL: a commit survives power loss, so deleting the queue file after it is safe.
                await conn.execute("PRAGMA synchronous=FULL")
            if not read_only or in_memory:
                await conn.executescript("".join(ALL_DDL))
            await conn.execute("PRAGMA foreign_keys=ON")
        except BaseException as exc:
            await conn.close()
            if isinstance(exc, sqlite3.Error):
                raise StoreUnavailable(f"SQLite {path}: open failed: {exc}") from exc
            raise
        return cls(conn, path, read_only=read_only, immutable=immutable)

    async def close(self) -> None:
        """Close the connection (idempotent)."""
        await self._conn.close()

    @asynccontextmanager
    async def write(self) -> AsyncIterator[SqliteTransaction]:
        """A `BEGIN IMMEDIATE` transaction, committed on success and rolled back on any error.

        Lock contention past busy_timeout and disk errors surface as StoreUnavailable: the
        caller's tick fails cleanly and nothing half-written remains. A statement the data made
        fail (malformed JSON, a constraint) surfaces as GraphDataError, also fully rolled back.
        """
        if self.read_only:
            raise RuntimeError("write on a read-only graph (dry run)")
        async with self._turn.exclusive(), self._transaction() as tx:
            yield tx

    @asynccontextmanager
    async def _transaction(self) -> AsyncIterator[SqliteTransaction]:
        try:
            await self._conn.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            raise StoreUnavailable(f"SQLite {self.path}: begin write failed: {exc}") from exc
        try:
            yield SqliteTransaction(self._conn)
            await self._conn.execute("COMMIT")
        except BaseException as exc:
            try:
                await self._conn.execute("ROLLBACK")
            except sqlite3.Error:
                log.warning("graph.rollback_failed", path=str(self.path), exc_info=True)
            if isinstance(exc, sqlite3.Error) and not isinstance(exc, sqlite3.IntegrityError):
                raise _store_error(self.path, "write", exc) from exc
            raise

    async def query(self, sql: str, params: Sequence[Any] = ()) -> list[sqlite3.Row]:
        """Every row of one read, in one trip to the connection's thread (a trip per execute,
        fetch and close cost a thread hand-off each). For `core.stores` modules only. On a
        read of the file alone, StoreUnavailable instead when a writer changed the file
        under the read (`core.stores.sqlite.read_only`)."""
        try:
            rows = list(await self._conn.execute_fetchall(sql, params))
        except sqlite3.Error as exc:
            if self._immutable is not None:
                self._immutable.check()  # a writer under the read explains the error
            raise _store_error(self.path, "read", exc) from exc
        if self._immutable is not None:
            self._immutable.check()
        return rows

    async def table_names(self) -> set[str]:
        """The tables in the file (a read-only open of an older file may lack some)."""
        rows = await self.query(SQLITE.table_names)
        return {str(r[0]) for r in rows}
