"""The state a daemon keeps open for its whole life, reopened when its connection is lost.

A daemon opens its state once (`core.suite.scheduler.DaemonRunner`). A connection lost under a
call (the backend's `GraphDB.lost`) is never used again; this is the one place where it is
replaced, and no job retries anything:

- The call that meets the loss fails (`ConnectionLost`: its transaction rolled back, nothing
  lost), and with it the tick; the tick after it starts with a new connection
  (`reconnect`, called before every tick), so the first tick after the store is back succeeds.
- Between ticks, a call that finds the connection lost opens a new one too, but at most once
  per backoff (`retry_delay_s`); a call in between fails at once, so a pass over many tenants
  during an outage costs the server one attempt per backoff, not one per tenant.
- Logged once per outage (`core.base.state.outage`): `store.lost` with the reason when it begins,
  `store.reopened` when it ends, with how long it lasted and its `failures` (the loss and
  every reopen that failed).
- The old connection is closed before the new one is opened (SQLite's `-wal` and `-shm` files
  belong to the file the old connection opened), once the calls still running on it have
  ended or DRAIN_WAIT_S has passed; a read inside a write transaction goes on in that
  transaction's connection.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from contextvars import ContextVar
from typing import Any

import structlog

from core.base.rules.errors import ConnectionLost, StoreUnavailable
from core.base.state.graph_db import GraphDB, GraphModel, Transaction
from core.base.state.outage import Outage
from core.base.state.statements import Statements

log = structlog.get_logger(__name__)

#: The first wait after a failed reopen (s); it doubles with each failure.
RETRY_FIRST_S = 0.5
#: The longest wait between two reopen attempts (s), unless the daemon says otherwise.
RETRY_MAX_S = 60.0
#: How long a reopen waits for calls still running on the lost connection (s).
DRAIN_WAIT_S = 5.0
#: How long the check before a tick may take (s): a connection whose network was cut answers
#: nothing, and its first statement would otherwise hang until the tick's own time bound.
PROBE_TIMEOUT_S = 10.0

#: The kept graph and the connection of the write transaction the current task is inside.
_inside_write: ContextVar[tuple[object, GraphDB] | None] = ContextVar("kb_inside_write",
                                                                      default=None)


def retry_delay_s(failures: int, *, max_s: float, draw: float) -> float:
    """The wait before the next reopen after `failures` failed ones (pure): RETRY_FIRST_S
    doubling, at most `max_s`, jittered to between half and all of it (`draw` in [0, 1)), so
    hosts that lost one server together do not come back in step."""
    base = min(max_s, RETRY_FIRST_S * 2.0 ** max(0, failures - 1))
    return base * (0.5 + draw / 2)


class ReopeningGraph:
    """A `GraphDB` whose connection is replaced when it is lost (see the module docstring)."""

    def __init__(self, graph: GraphDB, opener: Callable[[], Awaitable[GraphDB]], *,
                 retry_max_s: float = RETRY_MAX_S,
                 clock: Callable[[], float] = time.monotonic,
                 draw: Callable[[], float] = random.random) -> None:
        self._graph = graph
        self._open = opener
        self._retry_max_s = retry_max_s
        self._clock = clock
        self._draw = draw
        self._reopening = asyncio.Lock()
        self._next_try = 0.0
        self._outage = Outage(began="store.lost", ended="store.reopened",
                              location=graph.location)
        #: Calls running on each connection (by id), and the event that says the lost one
        #: has none left.
        self._running: dict[int, int] = {}
        self._drained = asyncio.Event()

    @property
    def sql(self) -> Statements:
        """The backend's statements."""
        return self._graph.sql

    @property
    def model(self) -> GraphModel | None:
        """The current connection's graph model (None for this project's own schema)."""
        return self._graph.model

    @property
    def read_only(self) -> bool:
        """Opened for a dry run: nothing can change (every reopen keeps it so)."""
        return self._graph.read_only

    @property
    def location(self) -> str:
        """Where the state is, for messages."""
        return self._graph.location

    @property
    def lost(self) -> str | None:
        """None: a lost connection is replaced, never kept (the current one's reason is in
        the logs, `store.lost`)."""
        return None

    async def reconnect(self) -> None:
        """Before a tick: open a new connection when this one is lost or does not answer
        within PROBE_TIMEOUT_S, whatever the backoff (ticks are spaced already);
        ConnectionLost when the store is still unreachable."""
        graph = self._graph
        if graph.lost is None:
            try:
                async with asyncio.timeout(PROBE_TIMEOUT_S), self._lent(graph):
                    await graph.table_names()
            except (StoreUnavailable, TimeoutError):
                pass  # the backend now says why in `lost` (a timeout: cancelled in flight)
            if graph.lost is None:
                return
        await self._replace(graph, now=True)

    async def query(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        """Every row of one read. For the stores only."""
        graph = await self._usable()
        async with self._lent(graph):
            return await graph.query(sql, params)

    @asynccontextmanager
    async def write(self) -> AsyncIterator[Transaction]:
        """A write transaction on the current connection (reads made inside it by the same
        task run in it, even when another task finds the connection lost meanwhile)."""
        graph = await self._usable()
        async with self._lent(graph), graph.write() as transaction:
            token = _inside_write.set((self, graph))
            try:
                yield transaction
            finally:
                _inside_write.reset(token)

    async def table_names(self) -> set[str]:
        """The state's tables."""
        graph = await self._usable()
        async with self._lent(graph):
            return await graph.table_names()

    async def close(self) -> None:
        """Close the current connection (idempotent)."""
        await self._graph.close()

    async def _usable(self) -> GraphDB:
        """The connection a call runs on: the current one, or a new one when it is lost."""
        held = _inside_write.get()
        if held is not None and held[0] is self:
            return held[1]  # its transaction's connection, even one lost or replaced since
        graph = self._graph
        if graph.lost is None:
            return graph
        return await self._replace(graph, now=False)

    async def _replace(self, graph: GraphDB, *, now: bool) -> GraphDB:
        """Open a new connection in place of `graph` (lost), one caller at a time; unless
        `now`, only once the backoff since the last failed try has passed."""
        async with self._reopening:
            if self._graph is not graph and self._graph.lost is None:
                return self._graph  # another call replaced it meanwhile
            graph = self._graph
            reason = graph.lost or "it did not answer"
            if not self._outage.ongoing:
                self._outage.failed(reason)
            wait = self._next_try - self._clock()
            if not now and wait > 0:
                raise ConnectionLost(
                    f"{graph.location}: store unavailable, nothing lost: the connection was "
                    f"lost ({reason}); reconnecting in {wait:.1f} s")
            await self._retire(graph)
            try:
                fresh = await self._open()
            except StoreUnavailable as exc:
                self._outage.failed(str(exc))
                self._next_try = self._clock() + retry_delay_s(
                    self._outage.failures, max_s=self._retry_max_s, draw=self._draw())
                raise ConnectionLost(f"{exc} (store unavailable, nothing lost: the "
                                     "connection was lost; reconnecting)") from exc
            self._graph, self._next_try = fresh, 0.0
            self._outage.recovered()
            return fresh

    async def _retire(self, graph: GraphDB) -> None:
        """Close `graph` once no call runs on it (or after DRAIN_WAIT_S)."""
        if self._running.get(id(graph)):
            self._drained.clear()
            try:
                await asyncio.wait_for(self._drained.wait(), DRAIN_WAIT_S)
            except TimeoutError:
                log.warning("store.closing_busy", location=graph.location,
                            calls=self._running.get(id(graph), 0))
        await graph.close()

    @asynccontextmanager
    async def _lent(self, graph: GraphDB) -> AsyncIterator[None]:
        """Count a call running on `graph` for the time of the block."""
        key = id(graph)
        self._running[key] = self._running.get(key, 0) + 1
        try:
            yield
        finally:
            left = self._running[key] - 1
            if left:
                self._running[key] = left
            else:
                del self._running[key]
                self._drained.set()  # wakes a reopen waiting for this connection's calls


async def open_reopening(opener: Callable[[], Awaitable[GraphDB]], *,
                         retry_max_s: float = RETRY_MAX_S) -> ReopeningGraph:
    """Open the state with `opener` and keep it open: StoreUnavailable when the first open
    fails (the caller decides how to wait for it)."""
    return ReopeningGraph(await opener(), opener, retry_max_s=retry_max_s)
