"""Live ingestion: mirror summarized sessions and their memories into the graph.

`sync_session_to_graph` is the original's per-session primitive; `sync_sessions` does the same
for many sessions with a few Chroma calls and one transaction per batch; `live_ingest_since`
finds the sessions summarized after a cutoff (as times, not strings) and syncs them. Nodes whose
payload hash is unchanged and already carry the live marker are skipped, so re-ingesting a
session inside the drain's overlap window costs reads only. Live ingestion upgrades back-filled
and minimal nodes: the marker becomes `liveIngested` and `minimal` goes.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import structlog

from core.rules.ids import memory_node_id, session_node_id
from core.rules.nodes import (
    LIVE_INGEST_DROPS,
    EdgeRow,
    NodeRow,
    memory_node,
    originates_in,
    pick_summary_row,
    session_id_of,
    session_node,
)
from core.rules.timestamps import epoch_ms_from_created_at
from core.stores.chroma import CollectionMissing
from core.stores.graph import insert_edges_if_absent, nodes_by_id, upsert_nodes

if TYPE_CHECKING:
    from core.rules.config import Settings
    from core.stores.chroma import VectorStore
    from core.stores.sqlite import GraphDB

log = structlog.get_logger(__name__)

#: Sessions synced per transaction: a few hundred sessions' memories (thousands of rows) per
#: Chroma round trip, while one batch's rows stay a few MB.
SESSIONS_PER_BATCH = 200
#: How many rows with an unparseable `createdAt` are named in the log (all are counted).
UNPARSEABLE_NAMED = 20


@dataclass(slots=True)
class SyncStats:
    """Figures of a sync (the original's keys, plus a session count for batches)."""

    memories_processed: int = 0
    memories_upserted: int = 0
    memories_skipped: int = 0
    sessions_upserted: int = 0
    sessions_skipped: int = 0
    errors: list[str] = field(default_factory=list)

    def add(self, other: SyncStats) -> None:
        """Accumulate another batch's figures."""
        self.memories_processed += other.memories_processed
        self.memories_upserted += other.memories_upserted
        self.memories_skipped += other.memories_skipped
        self.sessions_upserted += other.sessions_upserted
        self.sessions_skipped += other.sessions_skipped
        self.errors.extend(other.errors)

    def as_session_dict(self) -> dict[str, Any]:
        """The original per-session stats shape."""
        return {
            "memoriesProcessed": self.memories_processed,
            "memoriesUpserted": self.memories_upserted,
            "memoriesSkipped": self.memories_skipped,
            "sessionUpserted": self.sessions_upserted > 0,
            "errors": list(self.errors),
        }


@dataclass(slots=True)
class SessionWindow:
    """Sessions whose summary was created after a cutoff, found by a paged scan."""

    session_ids: list[str] = field(default_factory=list)
    summaries_scanned: int = 0
    unparseable: int = 0
    unparseable_named: list[dict[str, Any]] = field(default_factory=list)
    without_session_id: int = 0


@dataclass(slots=True)
class LiveIngestReport:
    """What one live-ingestion pass saw and did."""

    cutoff_ms: int
    window: SessionWindow
    stats: SyncStats

    def figures(self) -> dict[str, Any]:
        """Flat figures for logs and --json output."""
        return {
            "cutoffMs": self.cutoff_ms,
            "summariesScanned": self.window.summaries_scanned,
            "sessionsFound": len(self.window.session_ids),
            "unparseableCreatedAt": self.window.unparseable,
            "sessionsUpserted": self.stats.sessions_upserted,
            "sessionsSkipped": self.stats.sessions_skipped,
            "memoriesProcessed": self.stats.memories_processed,
            "memoriesUpserted": self.stats.memories_upserted,
            "memoriesSkipped": self.stats.memories_skipped,
            "errors": len(self.stats.errors),
        }


def _needs_upsert(existing: NodeRow | None, fresh: NodeRow) -> bool:
    """Whether writing `fresh` would change anything: a new node, a changed payload, or an
    existing node that is not yet (only) live-ingested."""
    if existing is None:
        return True
    props = existing.properties
    if props.get("payloadHash") != fresh.properties.get("payloadHash"):
        return True
    return props.get("liveIngested") is not True or any(k in props for k in LIVE_INGEST_DROPS)


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
    stats = SyncStats()
    summaries = await vectors.get_where_in(settings.summary_collection, "sessionId", session_ids)
    try:
        memories = await vectors.get_where_in(settings.memory_collection, "sessionId",
                                              session_ids)
    except CollectionMissing:
        # No memory collection yet: the sessions still land; their memories reach the graph
        # by lazy back-fill or a later sync.
        memories = []

    rows_by_session: dict[str, list[tuple[str, Mapping[str, Any]]]] = defaultdict(list)
    for row in summaries:
        sid = session_id_of(row.metadata)
        if sid is not None:
            rows_by_session[sid].append((row.id, row.metadata))

    fresh_sessions: list[NodeRow] = []
    for sid in session_ids:
        chosen = pick_summary_row(rows_by_session.get(sid, ()))
        if chosen is None:
            stats.errors.append(f"[{sid}] no summary row for this session")
            continue
        fresh_sessions.append(session_node(sid, chosen[0], chosen[1], "liveIngested"))
    synced = {node.properties["sessionId"] for node in fresh_sessions}

    fresh_memories: list[NodeRow] = []
    edges: list[EdgeRow] = []
    for row in memories:
        sid = session_id_of(row.metadata)
        if sid is None or sid not in synced:
            continue  # its session has no summary: left to lazy back-fill
        stats.memories_processed += 1
        try:
            fresh_memories.append(memory_node(row.id, row.metadata, "liveIngested"))
            edges.append(originates_in(row.id, sid))
        except Exception as exc:  # one odd row must not stop the session
            stats.errors.append(f"[{row.id}] {exc}")

    existing = await nodes_by_id(graph,
        [session_node_id(s) for s in synced] + [memory_node_id(r.id) for r in memories]
    )
    to_write: list[NodeRow] = []
    for node in fresh_sessions:
        if _needs_upsert(existing.get(node.id), node):
            to_write.append(node)
            stats.sessions_upserted += 1
        else:
            stats.sessions_skipped += 1
    for node in fresh_memories:
        if _needs_upsert(existing.get(node.id), node):
            to_write.append(node)
            stats.memories_upserted += 1
        else:
            stats.memories_skipped += 1
    written = {node.id for node in to_write}
    if to_write and not dry_run:
        async with graph.write() as tx:
            await upsert_nodes(tx, to_write, drop_keys=LIVE_INGEST_DROPS)
            await insert_edges_if_absent(tx, (e for e in edges if e.source in written))
    return stats


async def sync_session_to_graph(
    graph: GraphDB, vectors: VectorStore, settings: Settings, session_id: Any
) -> dict[str, Any]:
    """Sync one session (its summary, memories and ORIGINATES_IN edges); never raises.

    Returns the original's stats: `{memoriesProcessed, memoriesUpserted, memoriesSkipped,
    sessionUpserted, errors}`.
    """
    if not isinstance(session_id, str) or not session_id:
        return SyncStats(errors=["[input] sessionId is required"]).as_session_dict()
    try:
        stats = await sync_sessions(graph, vectors, settings, [session_id])
    except Exception as exc:
        log.error("ingest.session_failed", session_id=session_id, exc_info=True)
        stats = SyncStats(errors=[f"[fatal] {exc}"])
    return stats.as_session_dict()


async def sessions_created_since(
    vectors: VectorStore, settings: Settings, cutoff_ms: int
) -> SessionWindow:
    """Page through the summaries (metadatas only) and pick the sessions with a summary created
    after `cutoff_ms`. A `createdAt` that cannot be parsed is counted and named, not skipped
    silently: such a session never reaches the graph by this path."""
    window = SessionWindow()
    seen: set[str] = set()
    async for page in vectors.scan(settings.summary_collection):
        window.summaries_scanned += len(page)
        for row in page:
            sid = session_id_of(row.metadata)
            if sid is None:
                window.without_session_id += 1
                continue
            created = epoch_ms_from_created_at(row.metadata.get("createdAt"))
            if created is None:
                window.unparseable += 1
                if len(window.unparseable_named) < UNPARSEABLE_NAMED:
                    window.unparseable_named.append(
                        {"rowId": row.id, "sessionId": sid,
                         "createdAt": row.metadata.get("createdAt")})
            elif created > cutoff_ms and sid not in seen:
                seen.add(sid)
                window.session_ids.append(sid)
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
             durationMs=int((time.monotonic() - started) * 1000), **report.figures())
    return report

