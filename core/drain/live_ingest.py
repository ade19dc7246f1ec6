"""Live ingestion: mirror summarized sessions and their memories into the graph.

`sync_session_to_graph` syncs one session; `sync_sessions` does the same for many with a few
Chroma calls and one transaction per batch; `live_ingest_since` finds the sessions summarized
after a cutoff (as times, not strings) and syncs them. What changes the graph and what is
skipped is `core.drain.rules.ingest`'s decision.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import structlog

from core.base.chroma import CollectionMissing
from core.base.rules.camel_json import to_json
from core.base.rules.ids import memory_node_id
from core.base.rules.nodes import LIVE_INGEST_DROPS
from core.base.state.graph import (
    insert_edges_if_absent,
    keeps_every_key,
    nodes_by_id,
    upsert_nodes,
    write_conflicts,
)
from core.drain.rules.ingest import (
    LiveIngestReport,
    SessionSync,
    SessionWindow,
    SyncStats,
    add_to_window,
    build_sync_batch,
    nodes_to_write,
)

if TYPE_CHECKING:
    from core.base.chroma import VectorStore
    from core.base.config.config import Settings
    from core.base.state.graph_db import GraphDB

log = structlog.get_logger(__name__)

#: Sessions synced per transaction: a few hundred sessions' memories (thousands of rows) per
#: Chroma round trip, while one batch's rows stay a few MB.
SESSIONS_PER_BATCH = 200


async def sync_sessions(
    graph: GraphDB,
    vectors: VectorStore,
    settings: Settings,
    session_ids: Sequence[str],
    *,
    dry_run: bool = False,
) -> SyncStats:
    """Sync many sessions, SESSIONS_PER_BATCH at a time. Data problems are counted in
    `errors`; a store that fails raises StoreUnavailable (the caller's tick fails, nothing
    is half-written: each batch is one transaction)."""
    total = SyncStats()
    unique = list(dict.fromkeys(s for s in session_ids if s))
    for start in range(0, len(unique), SESSIONS_PER_BATCH):
        batch = unique[start : start + SESSIONS_PER_BATCH]
        total.add(await _sync_batch(graph, vectors, settings, batch, dry_run=dry_run))
    return total


async def _sync_batch(
    graph: GraphDB,
    vectors: VectorStore,
    settings: Settings,
    session_ids: list[str],
    *,
    dry_run: bool,
) -> SyncStats:
    summaries = await vectors.get_where_in(settings.chroma.summary_collection, "sessionId",
                                           session_ids)
    try:
        memories = await vectors.get_where_in(settings.chroma.memory_collection, "sessionId",
                                              session_ids)
    except CollectionMissing:
        # No memory collection yet: the sessions still land; their memories reach the graph
        # by lazy back-fill or a later sync.
        memories = []
    batch = build_sync_batch(session_ids, summaries, memories)
    existing = await nodes_by_id(
        graph, [n.id for n in batch.sessions] + [memory_node_id(r.id) for r in memories])
    to_write = nodes_to_write(
        batch, existing, keeps_every_key=keeps_every_key(graph),
        conflicts=write_conflicts(graph, [*batch.sessions, *batch.memories], existing))
    written = {node.id for node in to_write}
    if to_write and not dry_run:
        async with graph.write() as tx:
            await upsert_nodes(tx, to_write, drop_keys=LIVE_INGEST_DROPS)
            await insert_edges_if_absent(tx, (e for e in batch.edges if e.source in written))
    return batch.stats


async def sync_session_to_graph(
    graph: GraphDB, vectors: VectorStore, settings: Settings, session_id: Any
) -> SessionSync:
    """Sync one session (its summary, memories and ORIGINATES_IN edges); never raises: a
    missing session id or a failure is in the result's `errors`."""
    if not isinstance(session_id, str) or not session_id:
        return SyncStats(errors=["[input] sessionId is required"]).session_figures()
    try:
        stats = await sync_sessions(graph, vectors, settings, [session_id])
    except Exception as exc:
        log.error("ingest.session_failed", session_id=session_id, exc_info=True)
        stats = SyncStats(errors=[f"[fatal] {exc}"])
    return stats.session_figures()


async def sessions_created_since(
    vectors: VectorStore, settings: Settings, cutoff_ms: int
) -> SessionWindow:
    """Page through the summaries (metadatas only) and pick the sessions with a summary created
    after `cutoff_ms` (see `core.drain.rules.ingest.add_to_window`)."""
    window = SessionWindow()
    seen: set[str] = set()
    async for page in vectors.scan(settings.chroma.summary_collection):
        add_to_window(window, page, cutoff_ms=cutoff_ms, seen=seen)
    if window.unparseable:
        log.warning("ingest.unparseable_created_at", count=window.unparseable,
                    rows=window.unparseable_named)
    return window


async def live_ingest_since(
    graph: GraphDB,
    vectors: VectorStore,
    settings: Settings,
    cutoff_ms: int,
    *,
    dry_run: bool = False,
) -> LiveIngestReport:
    """Sync every session summarized after `cutoff_ms` (raises StoreUnavailable when a store
    fails; per-session data problems are in the report's errors)."""
    started = time.monotonic()
    window = await sessions_created_since(vectors, settings, cutoff_ms)
    stats = await sync_sessions(graph, vectors, settings, window.session_ids, dry_run=dry_run)
    report = LiveIngestReport(cutoff_ms, window, stats)
    if stats.errors:
        log.warning("ingest.session_errors", count=len(stats.errors), errors=stats.errors[:20])
    log.info("ingest.completed", dryRun=dry_run,
             durationMs=int((time.monotonic() - started) * 1000), **to_json(report.figures()))
    return report

