"""The daemons' bookkeeping in the state store: last completed ticks and small named values.

Kept in the graph file so that a restart knows when each daemon last ticked (neither skipping
nor doubling a pass), when each job last succeeded (the metrics exporter serves it from the
first scrape, even when the latest tick failed), and where live ingestion left off.

`daemon_ticks` holds one row per job and database (a reconcile, retention or alerting pass
runs on one host at a time; the `drain` row is the last tick of any drainer, which is what the
scheduler needs). `drainer_ticks` holds one row per drainer (`DrainerTick`): several drainers,
one per host, may share a PostgreSQL state, and status and /metrics show each of them with
the queue figures it saw, since no host can read another host's queue file.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from core.base.state.graph_db import GraphDB, Transaction

#: The drain daemon's job: the one whose ticks are also kept per drainer.
DRAIN_JOB = "drain"
#: daemon_state key of the drain daemon's live-ingestion watermark (epoch ms of the start of
#: the last tick whose live ingestion completed).
LIVE_INGEST_WATERMARK = "drain.liveIngestWatermark"
#: Suffix of the daemon_state key `<job>.lastSuccessAt`: epoch ms when the job's last
#: successful (`ok`) tick finished. `daemon_ticks` keeps only the latest tick, which may have
#: failed; this keeps the last success beside it.
LAST_SUCCESS_SUFFIX = ".lastSuccessAt"


@dataclass(frozen=True, slots=True)
class TickRecord:
    """A daemon's last completed tick."""

    daemon: str
    started_at: int
    finished_at: int
    duration_ms: int
    ok: bool
    figures: dict[str, Any]


@dataclass(frozen=True, slots=True)
class DrainerQueue:
    """Who a drainer is and what its queue held when its tick ended (read by the drainer
    itself: `core.drain.stores.drainer_queue.read_drainer_queue`)."""

    #: Its id (`core.drain.stores.drainer_identity`); '' for a SQLite file's one drainer.
    drainer: str
    #: The host it runs on, for a person (its id is what tells drainers apart).
    host: str
    queue_lines: int
    #: Whether a `.draining` file was left for its next tick.
    draining: bool
    dead_letters: int


@dataclass(frozen=True, slots=True)
class DrainerTick:
    """A drainer's last completed tick and its queue at the end of it."""

    queue: DrainerQueue
    tick: TickRecord


async def get_value(graph: GraphDB, key: str) -> str | None:
    """A named value, or None."""
    rows = await graph.query(graph.sql.get_value, (key,))
    return str(rows[0][0]) if rows else None


async def set_value(graph: GraphDB, key: str, value: str, *, now_ms: int) -> None:
    """Store a named value."""
    async with graph.write() as tx:
        await _put_value(tx, key, value, now_ms=now_ms)


async def _put_value(tx: Transaction, key: str, value: str, *, now_ms: int) -> None:
    await tx.execute(tx.sql.put_value, (key, value, now_ms))


async def record_tick(graph: GraphDB, record: TickRecord, *,
                      drainer: DrainerQueue | None = None) -> None:
    """Remember a daemon's latest tick (one row per daemon) and, when it succeeded, when it
    finished as the job's last success, in the same transaction (never one without the
    other). A drain tick also replaces its drainer's row (`drainer`), in that transaction."""
    async with graph.write() as tx:
        if drainer is not None:
            await tx.execute(
                tx.sql.record_drainer_tick,
                (drainer.drainer, drainer.host, record.started_at, record.finished_at,
                 record.duration_ms, int(record.ok), json.dumps(record.figures, default=str),
                 drainer.queue_lines, int(drainer.draining), drainer.dead_letters),
            )
        await tx.execute(
            tx.sql.record_tick,
            (record.daemon, record.started_at, record.finished_at, record.duration_ms,
             int(record.ok), json.dumps(record.figures, default=str)),
        )
        if record.ok:
            await _put_value(tx, record.daemon + LAST_SUCCESS_SUFFIX, str(record.finished_at),
                             now_ms=record.finished_at)


async def last_ticks(graph: GraphDB) -> dict[str, TickRecord]:
    """Every daemon's last tick, by daemon name."""
    rows = await graph.query(graph.sql.last_ticks)
    return {
        r[0]: TickRecord(r[0], int(r[1]), int(r[2]), int(r[3]), bool(r[4]), json.loads(r[5]))
        for r in rows
    }


async def last_drainer_ticks(graph: GraphDB) -> tuple[DrainerTick, ...]:
    """Every drainer's last tick, by drainer id (none when the state predates the table: a
    SQLite file of an earlier version opened read-only)."""
    if "drainer_ticks" not in await graph.table_names():
        return ()
    rows = await graph.query(graph.sql.drainer_ticks)
    return tuple(
        DrainerTick(DrainerQueue(str(r[0]), str(r[1]), int(r[7]), bool(r[8]), int(r[9])),
                    TickRecord(DRAIN_JOB, int(r[2]), int(r[3]), int(r[4]), bool(r[5]),
                               json.loads(r[6])))
        for r in rows
    )


async def last_success_stamps(graph: GraphDB) -> dict[str, int]:
    """When each job's last successful tick finished (epoch ms), by job name, as recorded by
    `record_tick`; a value that is not an integer (written by hand) is left out."""
    rows = await graph.query(
        graph.sql.values_by_suffix,
        (len(LAST_SUCCESS_SUFFIX), LAST_SUCCESS_SUFFIX),
    )
    stamps: dict[str, int] = {}
    for key, value in rows:
        try:
            stamps[str(key)[: -len(LAST_SUCCESS_SUFFIX)]] = int(value)
        except (TypeError, ValueError):
            continue
    return stamps


async def forget_drainer(graph: GraphDB, tick: DrainerTick) -> bool:
    """Remove a drainer's row, if its last tick is still `tick` (a drainer that ticked since
    it was read keeps its row): True when the row went."""
    async with graph.write() as tx:
        removed = await tx.query(tx.sql.forget_drainer,
                                 (tick.queue.drainer, tick.tick.finished_at))
    return bool(removed)
