"""The daemons' bookkeeping in SQLite: last completed ticks and small named values.

Kept in the graph file so that a restart knows when each daemon last ticked (neither skipping
nor doubling a pass) and where live ingestion left off.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from core.stores.sqlite import GraphDB

#: daemon_state key of the drain daemon's live-ingestion watermark (epoch ms of the start of
#: the last tick whose live ingestion completed).
LIVE_INGEST_WATERMARK = "drain.liveIngestWatermark"


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
    rows = await graph.query("SELECT value FROM daemon_state WHERE key = ?", (key,))
    return str(rows[0][0]) if rows else None


async def set_value(graph: GraphDB, key: str, value: str, *, now_ms: int) -> None:
    """Store a named value."""
    async with graph.write() as tx:
        await tx.execute(
            "INSERT INTO daemon_state(key, value, updated_at) VALUES (?, ?, ?) "
            "ON CONFLICT(key) DO UPDATE SET value = excluded.value, "
            "updated_at = excluded.updated_at",
            (key, value, now_ms),
        )


async def record_tick(graph: GraphDB, record: TickRecord) -> None:
    """Remember a daemon's latest tick (one row per daemon)."""
    async with graph.write() as tx:
        await tx.execute(
            "INSERT INTO daemon_ticks(daemon, started_at, finished_at, duration_ms, ok, figures) "
            "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT(daemon) DO UPDATE SET "
            "started_at = excluded.started_at, finished_at = excluded.finished_at, "
            "duration_ms = excluded.duration_ms, ok = excluded.ok, figures = excluded.figures",
            (record.daemon, record.started_at, record.finished_at, record.duration_ms,
             int(record.ok), json.dumps(record.figures, default=str)),
        )


async def last_ticks(graph: GraphDB) -> dict[str, TickRecord]:
    """Every daemon's last tick, by daemon name."""
    rows = await graph.query(
        "SELECT daemon, started_at, finished_at, duration_ms, ok, figures FROM daemon_ticks"
    )
    return {
        r[0]: TickRecord(r[0], int(r[1]), int(r[2]), int(r[3]), bool(r[4]), json.loads(r[5]))
        for r in rows
    }
