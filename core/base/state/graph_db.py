"""The store seam: what every backend of the state (graph, telemetry, daemon state) offers.

Every layer above names only these Protocols, so a second backend is a new package beside
`core.base.state.sqlite`, not edits across the layers. A backend's `sql` is its text of every
statement (`core.base.state.statements.Statements`). `query`, `execute` and `executemany` are
for the stores only (a test walks the source for SQL anywhere else).

A backend whose graph is not this project's `nodes`/`edges` (the original's `Nodes`/`Edges`
documents: `core.base.state.neo`) has a `model`, a `GraphModel`, that `core.base.state.graph` hands
the graph's reads and writes to; the other backends' `model` is None and their graph is their
statements.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Collection, Iterable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any, Protocol

from core.base.rules.errors import KbError
from core.base.rules.nodes import EdgeLike, NodeRow
from core.base.state.statements import Statements


class GraphDataError(KbError):
    """A statement failed because of the data it carried, not because the store is unavailable:
    retrying the same data fails the same way (the drainer isolates the line that causes it)."""


class ConnectionTurn:
    """Takes turns on one connection between the tasks of one process (a connection holds one
    transaction at a time). Re-entrant per task: a read within its own open write transaction
    goes straight on."""

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

    @property
    def model(self) -> GraphModel | None:
        """The backend's graph model, or None when its graph is its statements."""
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

    `write()` commits on success and rolls back on any error: `StoreUnavailable` for an
    outage, `GraphDataError` for a statement the data made fail, `ConnectionLost` when the
    connection broke (`lost` says why). A read-only store (dry runs) refuses `write()`.
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
        """Why this connection can no longer be used, or None while it can; a lost connection
        is never used again (`core.base.state.reopening_graph` replaces it)."""
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


class GraphModel(Protocol):
    """A graph kept in another shape than this project's tables: `core.base.state.graph`'s reads
    and writes, done the way that shape's owner does them (`core.base.state.neo.model`). Ids in and
    out are this project's (`memory:X`, `session:S`, ...); where the graph keeps a node under
    another id (the original's bare-id raw memories), the model maps it."""

    #: Whether an upsert keeps every key a node has (`drop_keys` are not dropped).
    keeps_every_key: bool
    #: Whether the tenant nodes are the original's (`core.base.rules.tenants`: written with its
    #: defaults and `visibility`, no top-level `repoSlug`; telemetry names its repo).
    original_tenants: bool

    async def existing_ids(self, reader: Reader, ids: Collection[str]) -> set[str]:
        """Which of `ids` resolve to a node."""
        ...

    async def identity_conflicts(self, reader: Reader, ids: Collection[str]) -> dict[str, str]:
        """The ids of `ids` that can never resolve as they are (another node holds the id a
        back-fill would create), with the reason."""
        ...

    async def nodes_by_id(self, reader: Reader, ids: Collection[str]) -> dict[str, NodeRow]:
        """The nodes a write of each id would land on, by the id asked."""
        ...

    def write_conflicts(self, nodes: Sequence[NodeRow],
                        existing: Mapping[str, NodeRow]) -> dict[str, str]:
        """The nodes of `nodes` that must not be written over what `existing` (`nodes_by_id`)
        found, with the reason."""
        ...

    async def insert_nodes_if_absent(self, tx: Transaction, nodes: Iterable[NodeRow]) -> None:
        """Create nodes that do not exist."""
        ...

    async def upsert_nodes(self, tx: Transaction, nodes: Iterable[NodeRow]) -> None:
        """Create nodes or merge properties into them."""
        ...

    async def rewrite_node_keys(self, tx: Transaction, node: NodeRow) -> None:
        """Set top-level keys of an existing node to exactly the values given (no merge
        into them); the other keys kept, a missing node left missing."""
        ...

    async def insert_edges_if_absent(self, tx: Transaction, edges: Iterable[EdgeLike]) -> None:
        """Create edges that do not exist, without reinforcing the others."""
        ...

    async def link_edges(self, tx: Transaction, edges: Iterable[EdgeLike]) -> None:
        """Create edges or reinforce them, in their order."""
        ...
