"""The store seam: what every backend of the state (graph, telemetry, daemon state) offers.

The modules of `core.stores` that own a table group run their statements through these
Protocols, and every layer above names only them (`TickContext.graph` is a `GraphDB`), so a
second backend is a new package beside `core.stores.sqlite`, not edits across the layers.
A backend's `sql` is its text of every statement (`core.stores.statements.Statements`).

`query`, `Transaction.execute` and `Transaction.executemany` are for the modules of
`core.stores` only: every SQL statement lives there (a test walks the source and fails on SQL
text or a call of these anywhere else).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any, Protocol

from core.rules.errors import KbError
from core.stores.statements import Statements


class GraphDataError(KbError):
    """A statement failed because of the data it carried, not because the store is unavailable:
    retrying the same data fails the same way (the drainer isolates the line that causes it)."""


class ConnectionTurn:
    """Takes turns on one connection between the tasks of one process: a daemon's jobs (a
    pass, the alerting job) share its state connection, and a connection holds one transaction
    at a time. Re-entrant per task: a task inside its own turn (a read within its open write
    transaction) goes straight on. Uncontended, a turn costs an `asyncio.Lock` acquire."""

    def __init__(self) -> None:
        self._lock = asyncio.Lock()
        self._holder: asyncio.Task[Any] | None = None

    @asynccontextmanager
    async def exclusive(self) -> AsyncIterator[None]:
        """The connection for the current task alone until the block ends."""
        task = asyncio.current_task()
        if task is not None and self._holder is task:
            yield
            return
        async with self._lock:
            self._holder = task
            try:
                yield
            finally:
                self._holder = None


class Reader(Protocol):
    """Anything that runs a read: the database, or a transaction (which sees its own writes)."""

    @property
    def sql(self) -> Statements:
        """The backend's statements."""
        ...

    async def query(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        """Every row of one read (rows index by column position)."""
        ...


class Transaction(Reader, Protocol):
    """A write transaction (`GraphDB.write()`): its statements commit or roll back together."""

    async def execute(self, sql: str, params: Sequence[Any] = ()) -> None:
        """Run one statement."""
        ...

    async def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        """Run one statement for each row of parameters, in their order."""
        ...


class GraphDB(Reader, Protocol):
    """An open state store: reads, short write transactions, and its tables.

    `write()` commits on success and rolls back on any error; an outage surfaces as
    `StoreUnavailable` (the tick fails cleanly, nothing half-written remains), a statement the
    data made fail as `GraphDataError`, a connection that broke under the call as
    `ConnectionLost` (then `lost` says why). A read-only store (`read_only`, for dry runs) refuses
    `write()` and changes nothing.
    """

    @property
    def read_only(self) -> bool:
        """Opened for a dry run: nothing can change."""
        ...

    @property
    def location(self) -> str:
        """Where the state is, for messages (a file path, or a URL without credentials)."""
        ...

    @property
    def lost(self) -> str | None:
        """Why this connection can no longer be used, or None while it can: a call failed
        with the connection's own error (`ConnectionLost`), or the backend saw it end (the
        server closed it, the SQLite file was replaced). A lost connection is never used
        again; `core.stores.reopening_graph` replaces it."""
        ...

    def write(self) -> AbstractAsyncContextManager[Transaction]:
        """A write transaction."""
        ...

    async def table_names(self) -> set[str]:
        """The state's tables (a read-only open of an older store may lack some)."""
        ...

    async def close(self) -> None:
        """Close the connection (idempotent)."""
        ...
