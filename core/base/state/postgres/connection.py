"""The state in PostgreSQL (`stateUrl`): one asyncpg connection, short write transactions.

`PostgresGraph` and `PostgresTransaction` implement the store seam (`core.base.state.graph_db`).

Every write transaction first takes one transaction-scoped advisory lock (`WRITE_LOCK_KEY`), so
writers run one at a time, as SQLite's `BEGIN IMMEDIATE` makes them: a read-then-write (a
tenant's next version) sees no competing write, and writers never deadlock. The password comes
from libpq's own sources (`PGPASSWORD`, `PGPASSFILE`; asyncpg reads both), TLS from `sslmode`
in the URL; the URL never holds a password (the configuration refuses one).

A connection that broke under a call (`connection_lost`, or a statement cancelled before its
answer came) says so in `lost` and is never used again: a daemon's graph is reopened on its next
use (`core.base.state.reopening_graph`).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable, Sequence
from contextlib import asynccontextmanager
from typing import Any

import asyncpg
import structlog

from core.base.rules.errors import ConnectionLost, KbError, StoreUnavailable, WriteConflict
from core.base.state.graph_db import ConnectionTurn, GraphDataError, GraphModel
from core.base.state.postgres.schema import MIGRATIONS, SCHEMA_LOCK_KEY, VERSION_TABLE
from core.base.state.postgres.statements import POSTGRES
from core.base.state.statements import Statements

log = structlog.get_logger(__name__)

#: The advisory lock every write transaction takes first (see the module docstring).
WRITE_LOCK_KEY = 0x6B625F7772697465  # "kb_write"
#: SQLSTATE classes of a statement its data made fail: data exception, integrity.
_DATA_CLASSES = ("22", "23")
#: How long a clean close may wait for the server before the connection is dropped (s).
CLOSE_TIMEOUT_S = 5.0
#: serialization_failure, deadlock_detected: the transaction lost to a concurrent one.
_CONFLICT_STATES = ("40001", "40P01")


#: The server shut down, crashed or is starting (57P01-57P03); a write refused by a server
#: that is now a standby (25006: the primary failed over, this connection stayed behind).
#: Class 08 (connection exception) counts as well.
_LOST_STATES = ("57P01", "57P02", "57P03", "25006")


def connection_lost(exc: BaseException) -> bool:
    """Whether `exc` says the connection itself can no longer be trusted (pure); a statement
    the server refused (a lock timeout, the data) leaves the connection usable."""
    if isinstance(exc, (asyncpg.InterfaceError, asyncpg.exceptions.InternalClientError,
                        OSError, TimeoutError)):
        return True
    state = getattr(exc, "sqlstate", None)
    return isinstance(state, str) and (state[:2] == "08" or state in _LOST_STATES)


def store_error(where: str, action: str, exc: BaseException) -> KbError:
    """GraphDataError for a statement the data made fail, WriteConflict for a lost race (tried
    again), ConnectionLost when the connection broke, StoreUnavailable for anything else."""
    state = getattr(exc, "sqlstate", None)
    if isinstance(state, str) and state[:2] in _DATA_CLASSES:
        return GraphDataError(f"PostgreSQL {where}: {action} failed: {exc}")
    if state in _CONFLICT_STATES:
        return WriteConflict(f"PostgreSQL {where}: {action} failed: {exc}")
    if connection_lost(exc):
        return ConnectionLost(f"PostgreSQL {where}: {action} failed: store unavailable, "
                              f"nothing lost (connection lost: {exc or type(exc).__name__})")
    return StoreUnavailable(f"PostgreSQL {where}: {action} failed: {exc}")


#: What a PostgreSQL call raises when the server, the network or the data refused it (the
#: backend catches these and nothing broader); InternalClientError is asyncpg's when the
#: connection died under a call in progress.
CONNECTION_ERRORS = (asyncpg.PostgresError, asyncpg.InterfaceError,
                     asyncpg.exceptions.InternalClientError, OSError, TimeoutError)


class PostgresTransaction:
    """A write transaction (`PostgresGraph.write()`). For the stores only."""

    sql: Statements = POSTGRES
    #: The graph's writes are this project's statements (`core.base.state.graph`): no model.
    model: GraphModel | None = None

    def __init__(self, conn: asyncpg.Connection) -> None:
        self._conn = conn

    async def execute(self, sql: str, params: Sequence[Any] = ()) -> None:
        """Run one statement."""
        await self._conn.execute(sql, *params)

    async def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        """Run one statement for each row of parameters, in their order."""
        await self._conn.executemany(sql, list(rows))

    async def query(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        """Rows of a read inside the transaction (it sees the transaction's own writes)."""
        return list(await self._conn.fetch(sql, *params))


class PostgresGraph:
    """One asyncpg connection to the state database, its schema at the latest version.

    asyncpg runs one operation at a time while a process's jobs share the connection, so
    every read and write transaction takes it in turn (`ConnectionTurn`); a read by the task
    holding an open write transaction runs inside it.
    """

    sql: Statements = POSTGRES
    #: The graph's writes are this project's statements (`core.base.state.graph`): no model.
    model: GraphModel | None = None

    def __init__(self, conn: asyncpg.Connection, url: str, *, read_only: bool) -> None:
        self._conn = conn
        self.url = url
        self.read_only = read_only
        self._turn = ConnectionTurn()
        self._lost: str | None = None

    @property
    def lost(self) -> str | None:
        """Why this connection can no longer be used (None while it can)."""
        if self._lost is None and self._conn.is_closed():
            self._lost = "the server closed the connection"
        return self._lost

    def _failed(self, action: str, exc: BaseException) -> KbError:
        """The project's error for a call that raised `exc`; remembers a broken connection."""
        if connection_lost(exc) and self._lost is None:
            self._lost = f"{action} failed: {exc or type(exc).__name__}"
        return store_error(self.url, action, exc)

    def _cancelled_in_flight(self) -> None:
        # The answer may still come, or never: this connection's protocol state is unknown.
        if self._lost is None:
            self._lost = "a statement was cancelled before its answer came"

    @property
    def location(self) -> str:
        """Where the state is, for messages: the URL (it holds no password)."""
        return self.url

    @classmethod
    async def open(cls, url: str, *, read_only: bool = False,
                   busy_timeout_ms: int = 5_000) -> PostgresGraph:
        """Connect and, unless `read_only` (every transaction read-only: dry runs), bring the
        schema to the latest version; `busy_timeout_ms` bounds a statement's lock wait."""
        settings = {"lock_timeout": str(busy_timeout_ms)}
        if read_only:
            settings["default_transaction_read_only"] = "on"
        try:
            conn = await asyncpg.connect(url, server_settings=settings,
                                         timeout=busy_timeout_ms / 1000)
        except (*CONNECTION_ERRORS, ValueError) as exc:
            raise StoreUnavailable(f"PostgreSQL {url}: open failed: store unavailable, nothing "
                                   f"lost ({exc or type(exc).__name__})") from exc
        try:
            if not read_only:
                await apply_schema(conn)
        except BaseException as exc:
            await conn.close()
            if isinstance(exc, CONNECTION_ERRORS):
                raise StoreUnavailable(f"PostgreSQL {url}: schema failed: {exc}") from exc
            raise
        return cls(conn, url, read_only=read_only)

    async def close(self) -> None:
        """Close the connection (idempotent); a lost one, or one that does not close within
        the open's time bound, is dropped at once (a cut network never answers Terminate)."""
        if self._conn.is_closed():
            return
        if self._lost is not None:
            self._conn.terminate()
            return
        try:
            await asyncio.wait_for(self._conn.close(), CLOSE_TIMEOUT_S)
        except CONNECTION_ERRORS:
            self._conn.terminate()

    @asynccontextmanager
    async def write(self) -> AsyncIterator[PostgresTransaction]:
        """A transaction that takes the write lock first; committed on success, rolled back
        on any error (StoreUnavailable for an outage, GraphDataError for the data's fault)."""
        if self.read_only:
            raise RuntimeError("write on a read-only graph (dry run)")
        async with self._turn.exclusive():
            transaction = self._conn.transaction()
            try:
                await transaction.start()
                await self._conn.execute("SELECT pg_advisory_xact_lock($1)", WRITE_LOCK_KEY)
            except CONNECTION_ERRORS as exc:
                await _rollback(transaction, self._conn, self.url)
                raise self._failed("begin write", exc) from exc
            except asyncio.CancelledError:
                self._cancelled_in_flight()
                raise
            try:
                yield PostgresTransaction(self._conn)
                await transaction.commit()
            except BaseException as exc:
                if isinstance(exc, asyncio.CancelledError):
                    self._cancelled_in_flight()
                await _rollback(transaction, self._conn, self.url)
                if isinstance(exc, CONNECTION_ERRORS):
                    raise self._failed("write", exc) from exc
                raise

    async def query(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        """Every row of one read. For the stores only."""
        async with self._turn.exclusive():
            try:
                return list(await self._conn.fetch(sql, *params))
            except CONNECTION_ERRORS as exc:
                raise self._failed("read", exc) from exc
            except asyncio.CancelledError:
                self._cancelled_in_flight()
                raise

    async def table_names(self) -> set[str]:
        """The tables of the state's schema."""
        return {str(r[0]) for r in await self.query(POSTGRES.table_names)}


async def _rollback(transaction: Any, conn: asyncpg.Connection, where: str) -> None:
    if conn.is_closed():  # the server rolled it back when the connection ended
        return
    try:
        await transaction.rollback()
    except (*CONNECTION_ERRORS, asyncpg.exceptions.InterfaceError):
        log.warning("graph.rollback_failed", location=where, exc_info=True)


async def apply_schema(conn: asyncpg.Connection) -> None:
    """Apply the migrations the database lacks, one process at a time (a session advisory
    lock held for the whole upgrade: a second process waits, then finds nothing to do)."""
    await conn.execute("SELECT pg_advisory_lock($1)", SCHEMA_LOCK_KEY)
    try:
        async with conn.transaction():
            await conn.execute(VERSION_TABLE)
            version = await conn.fetchval("SELECT max(version) FROM kb_schema_version")
            reached = int(version or 0)
            for step in MIGRATIONS[reached:]:
                await conn.execute(step)
                reached += 1
                log.info("graph.schema_migrated", version=reached)
            if reached != int(version or 0):
                await conn.execute("DELETE FROM kb_schema_version")
                await conn.execute("INSERT INTO kb_schema_version(version) VALUES ($1)",
                                   reached)
    finally:
        await conn.execute("SELECT pg_advisory_unlock($1)", SCHEMA_LOCK_KEY)
