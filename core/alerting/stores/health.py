"""The health view's one read: `kb_ingestion_metrics` rolled up per (tenant, repo) since a
time (`graph.sql.health_by_repo`), as `HealthRow`s.

Read-only. A failing read raises (StoreUnavailable): a health view that cannot see the
telemetry must say so, not show an empty, healthy-looking table.
"""

from __future__ import annotations

from core.alerting.rules.health import HealthRow, health_row
from core.base.state.graph_db import GraphDB


async def health_rollup(graph: GraphDB, since_ms: int) -> list[HealthRow]:
    """Every (tenant, repo) with an event at or after `since_ms` (future-dated events
    included, as the original reads them), ordered by tenant then repo (bytewise)."""
    rows = await graph.query(graph.sql.health_by_repo, (since_ms,))
    return [health_row(r[0], r[1], tuple(r[2:])) for r in rows]
