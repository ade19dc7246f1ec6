"""Live ingestion's decisions (pure): which sessions a summary page puts in the window, and which
of a batch's nodes would change the graph.

A node whose payload hash is unchanged and already carries the live marker (and no `minimal`
or `backfilled`) is skipped, so re-ingesting a session inside the drain's overlap window costs
reads only. Live ingestion upgrades back-filled and minimal nodes: the marker becomes
`liveIngested` and `minimal` goes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from core.base.rules.nodes import (
    LIVE_INGEST_DROPS,
    EdgeRow,
    NodeRow,
    memory_node,
    originates_in,
    pick_summary_row,
    session_id_of,
    session_node,
    summaries_by_session,
)
from core.base.rules.rows import ChromaRow
from core.base.rules.timestamps import row_time_field, row_time_ms

#: How many rows without a readable time (`createdAt`, else `timestamp`) are named in the log
#: (all are counted).
UNPARSEABLE_NAMED = 20


@dataclass(slots=True)
class SyncStats:
    """Figures of a sync: memories and sessions upserted or skipped, and the errors."""

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

    def session_figures(self) -> SessionSync:
        """The per-session shape `sync_session_to_graph` returns."""
        return SessionSync(self.memories_processed, self.memories_upserted,
                           self.memories_skipped, self.sessions_upserted > 0,
                           tuple(self.errors))


@dataclass(frozen=True, slots=True)
class SessionSync:
    """What syncing one session did: `{memoriesProcessed, memoriesUpserted, memoriesSkipped,
    sessionUpserted, errors}`."""

    memories_processed: int
    memories_upserted: int
    memories_skipped: int
    session_upserted: bool
    errors: tuple[str, ...]


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

    def figures(self) -> LiveIngestFigures:
        """Flat figures for logs and `--json`."""
        return LiveIngestFigures(
            self.cutoff_ms, self.window.summaries_scanned, len(self.window.session_ids),
            self.window.unparseable, self.stats.sessions_upserted, self.stats.sessions_skipped,
            self.stats.memories_processed, self.stats.memories_upserted,
            self.stats.memories_skipped, len(self.stats.errors))


@dataclass(frozen=True, slots=True)
class LiveIngestFigures:
    """A live-ingestion pass's figures (`liveIngest` in a tick's figures)."""

    cutoff_ms: int
    summaries_scanned: int
    sessions_found: int
    unparseable_created_at: int
    sessions_upserted: int
    sessions_skipped: int
    memories_processed: int
    memories_upserted: int
    memories_skipped: int
    #: How many sessions or rows could not be synced (each is logged).
    errors: int


@dataclass(frozen=True, slots=True)
class LiveIngestSkipped:
    """Live ingestion did not run (no summary collection yet), and why."""

    cutoff_ms: int
    skipped: str


def needs_upsert(existing: NodeRow | None, fresh: NodeRow, *,
                 keeps_every_key: bool = False) -> bool:
    """Whether writing `fresh` would change anything (see the module docstring). On a graph
    that keeps every key (the original's), a live-ingested node with the same payload is up
    to date whatever else it carries."""
    if existing is None:
        return True
    props = existing.properties
    if props.get("payloadHash") != fresh.properties.get("payloadHash"):
        return True
    if props.get("liveIngested") is not True:
        return True
    return not keeps_every_key and any(k in props for k in LIVE_INGEST_DROPS)


@dataclass(slots=True)
class SyncBatch:
    """A batch's fresh nodes and edges, before the graph is asked what it already holds."""

    sessions: list[NodeRow] = field(default_factory=list)
    memories: list[NodeRow] = field(default_factory=list)
    edges: list[EdgeRow] = field(default_factory=list)
    stats: SyncStats = field(default_factory=SyncStats)


def build_sync_batch(session_ids: Sequence[str], summaries: Iterable[ChromaRow],
                     memories: Iterable[ChromaRow]) -> SyncBatch:
    """The live nodes of a batch of sessions: a session node from its earliest summary row
    (a session without one is an error of the batch, left to lazy back-fill), and a memory
    node with its ORIGINATES_IN edge for each memory of a synced session."""
    batch = SyncBatch()
    rows_by_session = summaries_by_session(summaries)
    for session_id in session_ids:
        chosen = pick_summary_row(rows_by_session.get(session_id, ()))
        if chosen is None:
            batch.stats.errors.append(f"[{session_id}] no summary row for this session")
            continue
        batch.sessions.append(session_node(session_id, chosen[0], chosen[1], "liveIngested"))
    synced = {node.properties["sessionId"] for node in batch.sessions}
    for row in memories:
        sid = session_id_of(row.metadata)
        if sid is None or sid not in synced:
            continue  # its session has no summary: left to lazy back-fill
        batch.stats.memories_processed += 1
        try:
            batch.memories.append(memory_node(row.id, row.metadata, "liveIngested"))
            batch.edges.append(originates_in(row.id, sid))
        except Exception as exc:  # one odd row must not stop the session
            batch.stats.errors.append(f"[{row.id}] {exc}")
    return batch


def nodes_to_write(batch: SyncBatch, existing: Mapping[str, NodeRow], *,
                   keeps_every_key: bool = False,
                   conflicts: Mapping[str, str] | None = None) -> list[NodeRow]:
    """The batch's nodes that would change the graph (counted as upserted; the others as
    skipped). A node in `conflicts` (its id holds a node it must not be written over) is an
    error of the batch, named with the reason, and not written."""
    conflicts = conflicts or {}
    sessions = [n for n in batch.sessions if n.id not in conflicts
                and needs_upsert(existing.get(n.id), n, keeps_every_key=keeps_every_key)]
    memories = [n for n in batch.memories if n.id not in conflicts
                and needs_upsert(existing.get(n.id), n, keeps_every_key=keeps_every_key)]
    batch.stats.errors.extend(f"[{node_id}] {reason}" for node_id, reason in conflicts.items())
    stats = batch.stats
    stats.sessions_upserted += len(sessions)
    stats.sessions_skipped += len(batch.sessions) - len(sessions)
    stats.memories_upserted += len(memories)
    stats.memories_skipped += len(batch.memories) - len(memories) - len(
        [n for n in batch.memories if n.id in conflicts])
    return sessions + memories


def add_to_window(window: SessionWindow, page: Iterable[ChromaRow], *, cutoff_ms: int,
                  seen: set[str]) -> None:
    """Add a page of summary rows to the window: each session with a summary dated after
    `cutoff_ms` (`row_time_ms`), once. A row whose time cannot be read is counted and named,
    not skipped silently: such a session never reaches the graph by this path."""
    for row in page:
        window.summaries_scanned += 1
        sid = session_id_of(row.metadata)
        if sid is None:
            window.without_session_id += 1
            continue
        created = row_time_ms(row.metadata)
        if created is None:
            window.unparseable += 1
            if len(window.unparseable_named) < UNPARSEABLE_NAMED:
                field_name = row_time_field(row.metadata)
                window.unparseable_named.append(
                    {"rowId": row.id, "sessionId": sid,
                     field_name: row.metadata.get(field_name)})
        elif created > cutoff_ms and sid not in seen:
            seen.add(sid)
            window.session_ids.append(sid)
