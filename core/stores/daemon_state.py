"""The daemons' bookkeeping in the state store: last completed ticks and small named values.

Kept in the graph file so that a restart knows when each daemon last ticked (neither skipping
nor doubling a pass), when each job last succeeded (the metrics exporter serves it from the
first scrape, even when the latest tick failed), and where live ingestion left off.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from core.stores.graph_db import GraphDB, Transaction

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


async def record_tick(graph: GraphDB, record: TickRecord) -> None:
    """Remember a daemon's latest tick (one row per daemon) and, when it succeeded, when it
    finished as the job's last success, in the same transaction (never one without the
    other)."""
    async with graph.write() as tx:
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
