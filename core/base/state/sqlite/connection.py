"""The SQLite file at `graphDbPath`: one aiosqlite connection, short write transactions.

Every write happens in a `BEGIN IMMEDIATE` transaction (`GraphDB.write()`), so a writer learns
about a competing writer at the start, within `busy_timeout`, rather than half-way through.
WAL lets `status` and other readers run beside a daemon's writes. A dry run (and `status`)
opens the file read-only so that not one byte of it, nor of its `-wal` and `-shm`, changes and
no side file is created (how: `core.base.state.sqlite.read_only`). A file this module creates is
owner-only (`core.base.config.private_data`); its `-wal` and `-shm` take its mode.

`SqliteGraph` and `SqliteTransaction` implement the store seam (`core.base.state.graph_db`).
A connection that hit an I/O error, or whose file was replaced or removed under it, says so in
`lost`; a daemon's graph is then reopened on its next use (`core.base.state.reopening_graph`).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sqlite3
import time
from collections.abc import AsyncIterator, Iterable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiosqlite
import structlog

from core.base.io.files import create_private_file, make_private_dirs
from core.base.rules.errors import ConfigError, ConnectionLost, KbError, StoreUnavailable
from core.base.state.graph_db import ConnectionTurn, GraphDataError, GraphModel
from core.base.state.sqlite.found_schema import read_found_schema
from core.base.state.sqlite.read_only import ImmutableRead, read_only_uri
from core.base.state.sqlite.schema import ALL_DDL
from core.base.state.sqlite.statements import SQLITE
from core.base.state.sqlite.waits import BUSY_TIMEOUT_MS as BUSY_TIMEOUT_MS
from core.base.state.sqlite.waits import WAL_RETRY_S
from core.base.state.statements import Statements

log = structlog.get_logger(__name__)

#: SQLite primary result codes that say the database cannot be used right now (permission,
#: abort, busy, locked, out of memory, read-only, interrupted, I/O error, corrupt, full, cannot
#: open, protocol, schema changed, auth, not a database): an outage, retried on a later tick;
#: any other code is a statement the data made fail.
_OUTAGE_CODES = frozenset({3, 4, 5, 6, 7, 8, 9, 10, 11, 13, 14, 15, 17, 23, 26})


#: Primary codes after which this connection is not trusted again (read-only, as when the file
#: moved under a WAL connection; I/O error, corrupt, cannot open, not a database).
_LOST_CODES = frozenset({8, 10, 11, 14, 26})


def _store_error(path: Path, action: str, exc: BaseException) -> KbError:
    """StoreUnavailable for an outage (an error without a code counts as one, to be safe),
    ConnectionLost when the connection is suspect (_LOST_CODES), GraphDataError otherwise."""
    code = getattr(exc, "sqlite_errorcode", None)
    if isinstance(code, int) and code & 0xFF not in _OUTAGE_CODES:
        return GraphDataError(f"SQLite {path}: {action} failed: {exc}")
    if isinstance(code, int) and code & 0xFF in _LOST_CODES:
        return ConnectionLost(f"SQLite {path}: {action} failed: store unavailable, nothing "
                              f"lost (connection lost: {exc})")
    return StoreUnavailable(f"SQLite {path}: {action} failed: {exc}")


def _file_identity(path: Path) -> tuple[int, int] | None:
    """The (device, inode) of the file at `path`, or None when there is none."""
    try:
        found = os.stat(path)
    except OSError:
        return None
    return found.st_dev, found.st_ino



class SqliteFile:
    """An open graph file whose schema is not chosen yet: `open_graph` reads it, then hands it
    to the backend that owns that schema."""

    def __init__(self, conn: aiosqlite.Connection, path: Path, *, read_only: bool,
                 in_memory: bool, immutable: ImmutableRead | None = None,
                 busy_timeout_ms: int = BUSY_TIMEOUT_MS) -> None:
        self.conn = conn
        self.busy_timeout_ms = busy_timeout_ms
        self.path = path
        self.read_only = read_only
        #: A dry run on a file that does not exist: an empty in-memory graph stands in.
        self.in_memory = in_memory
        #: A read of the file alone (`core.base.state.sqlite.read_only`): checked after each read.
        self.immutable = immutable

    async def rows(self, sql: str, params: Sequence[Any] = ()) -> list[sqlite3.Row]:
        """Every row of one read; StoreUnavailable when the file cannot be read."""
        try:
            rows = list(await self.conn.execute_fetchall(sql, params))
        except sqlite3.Error as exc:
            raise StoreUnavailable(f"SQLite {self.path}: read failed: {exc}") from exc
        if self.immutable is not None:
            self.immutable.check()
        return rows

    async def prepare(self, ddl: Sequence[str]) -> None:
        """WAL and `synchronous=FULL` when writable, `ddl`, foreign keys on; the connection is
        closed when any of it fails (StoreUnavailable).

        Two openers of a new file at once must both succeed: SQLite refuses the DDL and the
        switch to WAL at once, busy timeout or not, while the other writes, so both wait and
        try again (`_create_schema`, `_switch_to_wal`)."""
        try:
            if not self.read_only:
                await self._switch_to_wal()
                # FULL: a commit survives power loss, so deleting the queue file after it is safe.
                await self.conn.execute("PRAGMA synchronous=FULL")
            if ddl:
                await self._create_schema("".join(ddl))
            await self.conn.execute("PRAGMA foreign_keys=ON")
        except BaseException as exc:
            await self.conn.close()
            if isinstance(exc, sqlite3.Error):
                raise StoreUnavailable(f"SQLite {self.path}: open failed: {exc}") from exc
            raise

    async def _create_schema(self, script: str) -> None:
        """The idempotent DDL in autocommit (no write lock on a complete schema); when refused
        as busy, again in one `BEGIN IMMEDIATE` transaction, which waits."""
        try:
            await self.conn.executescript(script)
        except sqlite3.OperationalError as exc:
            if not _is_busy(exc):
                raise
            await self.conn.executescript("BEGIN IMMEDIATE;" + script + "COMMIT;")

    async def _switch_to_wal(self) -> None:
        """`journal_mode=WAL`, tried again while busy until `busy_timeout` has passed."""
        deadline = time.monotonic() + self.busy_timeout_ms / 1000
        while True:
            try:
                await self.conn.execute("PRAGMA journal_mode=WAL")
                return
            except sqlite3.OperationalError as exc:
                if not _is_busy(exc) or time.monotonic() >= deadline:
                    raise
            await asyncio.sleep(WAL_RETRY_S)

    async def close(self) -> None:
        """Close the connection (idempotent)."""
        await self.conn.close()


def _is_busy(exc: sqlite3.Error) -> bool:
    """Whether SQLite refused for another connection's lock (SQLITE_BUSY / SQLITE_LOCKED)."""
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None:
        return code & 0xFF in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)
    return "locked" in str(exc) or "busy" in str(exc)


def _create_private(path: Path) -> None:
    """Create the state file owner-only when it does not exist (SQLite would create it with
    0644 less the umask; its -wal and -shm take the database file's mode, so they follow)."""
    make_private_dirs(path.parent)
    with contextlib.suppress(FileExistsError):
        os.close(create_private_file(path, os.O_WRONLY | os.O_EXCL))


async def connect_file(path: Path, *, read_only: bool,
                       busy_timeout_ms: int = BUSY_TIMEOUT_MS) -> SqliteFile:
    """Connect to the graph file, nothing written yet: read-only for a dry run (an absent file
    is an in-memory stand-in, never created), else created owner-only if absent."""
    timeout = busy_timeout_ms / 1000
    in_memory = read_only and not path.exists()
    immutable: ImmutableRead | None = None
    try:
        if in_memory:
            conn = await aiosqlite.connect(":memory:", isolation_level=None)
        elif read_only:
            uri, immutable = read_only_uri(path)
            conn = await aiosqlite.connect(uri, uri=True, isolation_level=None, timeout=timeout)
        else:
            _create_private(path)
            conn = await aiosqlite.connect(str(path), isolation_level=None, timeout=timeout)
    except (sqlite3.Error, OSError) as exc:
        raise StoreUnavailable(f"SQLite {path}: open failed: store unavailable, nothing "
                               f"lost ({exc})") from exc
    return SqliteFile(conn, path, read_only=read_only, in_memory=in_memory,
                      immutable=immutable, busy_timeout_ms=busy_timeout_ms)


class SqliteTransaction:
    """A write transaction (`SqliteGraph.write()`), for the stores only."""

    sql: Statements = SQLITE
    #: The graph's writes are this project's statements (`core.base.state.graph`): no model.
    model: GraphModel | None = None

    def __init__(self, conn: aiosqlite.Connection) -> None:
        self._conn = conn

    async def execute(self, sql: str, params: Sequence[Any] = ()) -> None:
        """Run one statement."""
        await self._conn.execute(sql, params)

    async def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        """Run one statement for each row of parameters."""
        await self._conn.executemany(sql, rows)

    async def query(self, sql: str, params: Sequence[Any] = ()) -> list[sqlite3.Row]:
        """Rows of a read inside the transaction (it sees its own writes)."""
        return list(await self._conn.execute_fetchall(sql, params))


class SqliteGraph:
    """One aiosqlite connection to the graph file, with the project's schema applied.

    A daemon's jobs share it, and the connection holds one transaction at a time, so write
    transactions take it in turn (`ConnectionTurn`); reads need no turn (one connection sees
    its own writes, and a read never starts a transaction)."""

    sql: Statements = SQLITE
    model: GraphModel | None = None

    def __init__(self, conn: aiosqlite.Connection, path: Path, *, read_only: bool,
                 in_memory: bool = False, immutable: ImmutableRead | None = None) -> None:
        self._conn = conn
        self.path = path
        self.read_only = read_only
        #: For a read of the file alone: checked after every query (a writer may change it).
        self._immutable = immutable
        self._turn = ConnectionTurn()
        self._lost: str | None = None
        #: The file this connection opened (None for a dry run's in-memory stand-in).
        self._identity = None if in_memory else _file_identity(path)
        self._closed = False

    @property
    def lost(self) -> str | None:
        """Why this connection can no longer be used (None while it can): an I/O-class error,
        or the path names another file than the one opened. One `stat` per look."""
        if self._lost is None and self._identity is not None:
            now = _file_identity(self.path)
            if now != self._identity:
                self._lost = (f"the file {self.path} was removed" if now is None
                              else f"the file {self.path} was replaced")
        return self._lost

    def _failed(self, action: str, exc: sqlite3.Error) -> KbError:
        """The project's error for a call that raised `exc`; remembers a suspect connection."""
        error = _store_error(self.path, action, exc)
        if isinstance(error, ConnectionLost) and self._lost is None:
            self._lost = f"{action} failed: {exc}"
        return error

    @property
    def location(self) -> str:
        """Where the state is, for messages: the file's path."""
        return str(self.path)

    @classmethod
    async def open(
        cls, path: Path, *, read_only: bool = False, busy_timeout_ms: int = BUSY_TIMEOUT_MS
    ) -> SqliteGraph:
        """Open (creating when writable) the SQLite file with WAL, busy_timeout and foreign keys.

        `read_only` is for dry runs. A file whose schema is not this project's is refused
        untouched (ConfigError); `core.base.state.state.open_graph` chooses the backend.
        """
        file = await connect_file(path, read_only=read_only, busy_timeout_ms=busy_timeout_ms)
        try:
            found = await read_found_schema(file.conn.execute_fetchall, file.path)
            if found.kind not in ("kb", "new"):
                raise ConfigError(f"{path}: not this project's graph schema: found {found.found}")
        except BaseException:
            await file.close()
            raise
        return await cls.on_file(file)

    @classmethod
    async def on_file(cls, file: SqliteFile) -> SqliteGraph:
        """The graph on an open file whose schema is this project's (or that has none yet)."""
        await file.prepare(ALL_DDL if not file.read_only or file.in_memory else ())
        return cls(file.conn, file.path, read_only=file.read_only,
                   in_memory=file.in_memory, immutable=file.immutable)

    async def close(self) -> None:
        """Close the connection (idempotent). When the file was replaced or removed under a
        writable connection, its `-wal` is first checkpointed and emptied: left, it would
        overlay the new file at that path for every opener. StoreUnavailable (still open)
        when that cannot be done."""
        if self._closed:
            return
        moved = self._identity is not None and _file_identity(self.path) != self._identity
        if moved and not self.read_only:
            await self._empty_moved_log()
        await self._conn.close()
        self._closed = True

    async def _empty_moved_log(self) -> None:
        try:
            rows = list(await self._conn.execute_fetchall("PRAGMA wal_checkpoint(TRUNCATE)"))
            refused: object = rows[0][0] if rows else 0  # 1: another connection was busy
        except sqlite3.Error as exc:
            refused = exc
        if refused:
            raise StoreUnavailable(
                f"SQLite {self.path}: the file was replaced while this daemon had it open, "
                f"and its old write-ahead log could not be emptied ({refused}); stop every "
                f"process using it, then remove {self.path}-wal and {self.path}-shm (they "
                "belong to the old file) before starting again")

    @asynccontextmanager
    async def write(self) -> AsyncIterator[SqliteTransaction]:
        """A `BEGIN IMMEDIATE` transaction, committed on success and rolled back on any error:
        StoreUnavailable for contention or disk errors, GraphDataError for a statement the
        data made fail."""
        if self.read_only:
            raise RuntimeError("write on a read-only graph (dry run)")
        async with self._turn.exclusive(), self._transaction() as tx:
            yield tx

    @asynccontextmanager
    async def _transaction(self) -> AsyncIterator[SqliteTransaction]:
        try:
            await self._conn.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            error = self._failed("begin write", exc)
            if isinstance(error, GraphDataError):  # BEGIN carries no data: an outage
                error = StoreUnavailable(str(error))
            raise error from exc
        try:
            yield self._transaction_on(self._conn)
            await self._conn.execute("COMMIT")
        except BaseException as exc:
            try:
                await self._conn.execute("ROLLBACK")
            except sqlite3.Error:
                log.warning("graph.rollback_failed", path=str(self.path), exc_info=True)
            if isinstance(exc, sqlite3.Error) and not isinstance(exc, sqlite3.IntegrityError):
                raise self._failed("write", exc) from exc
            raise

    def _transaction_on(self, conn: aiosqlite.Connection) -> SqliteTransaction:
        """The transaction object a backend on this file runs its statements through."""
        return SqliteTransaction(conn)

    async def query(self, sql: str, params: Sequence[Any] = ()) -> list[sqlite3.Row]:
        """Every row of one read, in one trip to the connection's thread. For the stores only."""
        try:
            rows = list(await self._conn.execute_fetchall(sql, params))
        except sqlite3.Error as exc:
            if self._immutable is not None:
                self._immutable.check()  # a writer under the read explains the error
            raise self._failed("read", exc) from exc
        if self._immutable is not None:
            self._immutable.check()
        return rows

    async def table_names(self) -> set[str]:
        """The tables in the file (a read-only open of an older file may lack some)."""
        rows = await self.query(SQLITE.table_names)
        return {str(r[0]) for r in rows}
