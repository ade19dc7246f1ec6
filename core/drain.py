"""The drain daemon's work: one REM tick = live ingestion, then draining the lazy-edge queue.

The drainer never loses a line and never applies one twice:
- it holds a drainer lock, so two drainers never race (the second is refused, naming the first);
- a leftover `.draining` (a crash) is drained before the live queue is rotated, so a rotation
  never overwrites unread lines;
- lines are handled in batches: one SQLite query for which endpoints exist, one Chroma `get`
  for the missing memories, one for their sessions, one transaction for the new nodes, the
  edges and the identities of the lines that took effect. A replayed line (same identity) is
  skipped, so a crash between a commit and the removal of `.draining` changes nothing;
- dead letters are made durable before the transaction that settles them, re-queued lines are
  written after it; `.draining` is removed only when every line in it is committed, re-queued
  or dead-lettered;
- a Chroma or SQLite failure fails the tick and leaves `.draining` in place for the next one:
  an outage never burns a line's attempts.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog

from core.backfill import Reason, plan_backfill
from core.clock import now_ms
from core.errors import StoreUnavailable
from core.ingest import live_ingest_since
from core.lazy_queue import DrainingFile, append_locked, parse_many, rotate_queue, split_lines
from core.locks import ProcessLock
from core.nodes import EdgeRow
from core.queue_lines import (
    MALFORMED,
    EdgeLine,
    MalformedLine,
    dead_letter_record,
    requeue_line,
)
from core.state import LIVE_INGEST_WATERMARK, get_value, set_value
from core.stores import Stores
from core.vectors import CollectionMissing, VectorStoreError

log = structlog.get_logger(__name__)

#: Lines per batch: one Chroma get of up to this many memories and one transaction. 5,000
#: lines are ~1-2 MB in memory and keep every Chroma call below its limits.
DRAIN_BATCH_LINES = 5_000
#: How long a line's identity is remembered after it took effect. A replay can only happen
#: on the tick after a crash; 30 days leaves room for a long outage.
APPLIED_LINE_RETENTION_MS = 30 * 86_400_000
#: How long to wait for a bare producer to finish an unterminated last line.
LATE_WRITER_GRACE_S = 0.05
#: How many malformed lines are quoted in the log per tick (all are dead-lettered).
MALFORMED_LOGGED = 10


@dataclass(slots=True)
class DrainStats:
    """Figures of one drain.

    `totalLines` counts non-blank lines read; `processed` those acted on (not replays or
    duplicates); `succeeded` edges linked; `failed` lines whose endpoints did not resolve
    (`requeued` + those dead-lettered after their last attempt); `deadLettered` every line
    written to the dead-letter file, `skippedMalformed` included; `deferred` lines put back
    untouched because they already failed earlier in this tick (a line re-queued while the
    leftover `.draining` is drained comes round again in the rotated queue: it must not spend
    a second attempt in the same tick).
    """

    total_lines: int = 0
    processed: int = 0
    succeeded: int = 0
    failed: int = 0
    requeued: int = 0
    dead_lettered: int = 0
    skipped_malformed: int = 0
    replayed: int = 0
    duplicates: int = 0
    deferred: int = 0
    late_lines_handed_back: int = 0
    interrupted: bool = False
    queue_rotated: bool = False
    orphan_recovered: bool = False
    duration_ms: int = 0

    def figures(self) -> dict[str, Any]:
        """camelCase figures for logs and `--json`."""
        return {
            "totalLines": self.total_lines,
            "processed": self.processed,
            "succeeded": self.succeeded,
            "failed": self.failed,
            "requeued": self.requeued,
            "deadLettered": self.dead_lettered,
            "skippedMalformed": self.skipped_malformed,
            "replayed": self.replayed,
            "duplicates": self.duplicates,
            "deferred": self.deferred,
            "lateLinesHandedBack": self.late_lines_handed_back,
            "interrupted": self.interrupted,
            "queueRotated": self.queue_rotated,
            "orphanRecovered": self.orphan_recovered,
            "durationMs": self.duration_ms,
        }


def drainer_lock(queue_path: Path) -> ProcessLock:
    """The lock that makes one drainer at a time."""
    return ProcessLock(queue_path.with_name(queue_path.name + ".drain.lock"),
                       purpose=f"the drainer of {queue_path}")


async def drain_queue(
    stores: Stores, *, dry_run: bool = False, clock: Callable[[], int] = now_ms
) -> DrainStats:
    """Drain the leftover `.draining` (if any), then the live queue. Raises LockHeld when
    another drainer runs, StoreUnavailable when a store fails (nothing lost either way)."""
    started = time.monotonic()
    stats = DrainStats()
    drain = _BatchDrainer(stores, stats, dry_run=dry_run, clock=clock)
    try:
        await (_read_queue_in_place(drain) if dry_run else _drain_under_lock(stores, drain))
    except OSError as exc:
        # Disk full, permissions, a vanished folder: fail the tick like a store outage;
        # `.draining` (if any) stays for the next tick and nothing is lost.
        raise QueueFileError(f"queue file error: {exc}") from exc
    drain.log_malformed()
    stats.duration_ms = int((time.monotonic() - started) * 1000)
    return stats


async def _read_queue_in_place(drain: _BatchDrainer) -> None:
    """Dry run: read `.draining` and the queue where they are; no lock, no rename, no write."""
    settings = drain.stores.settings
    for path in (settings.draining_path, settings.lazy_edges_queue_path):
        if path.exists():
            await _read_in_place(path, drain.process)


async def _drain_under_lock(stores: Stores, drain: _BatchDrainer) -> None:
    """The leftover `.draining` first, then the rotated queue, under the drainer lock."""
    settings = stores.settings
    stats = drain.stats
    lock = drainer_lock(settings.lazy_edges_queue_path).acquire()
    try:
        if settings.draining_path.exists():
            stats.orphan_recovered = True
            log.warning("drain.orphan_recovering", path=str(settings.draining_path))
            await _drain_file(stores, settings.draining_path, drain.process, stats)
        if not stats.interrupted and await asyncio.to_thread(
            rotate_queue, settings.lazy_edges_queue_path, settings.draining_path
        ):
            stats.queue_rotated = True
            await _drain_file(stores, settings.draining_path, drain.process, stats)
        if not stats.interrupted:
            await _forget_old_identities(stores, drain.clock())
    finally:
        lock.release()


async def _read_in_place(
    path: Path, process: Callable[[list[bytes]], Awaitable[None]]
) -> None:
    reader = await asyncio.to_thread(DrainingFile, path)
    try:
        while batch := await asyncio.to_thread(reader.read_lines, DRAIN_BATCH_LINES):
            await process(batch)
        fragment = await asyncio.to_thread(reader.take_fragment)
        if fragment.strip():
            await process(split_lines(fragment))
    finally:
        reader.close()


async def _drain_file(
    stores: Stores,
    path: Path,
    process: Callable[[list[bytes]], Awaitable[None]],
    stats: DrainStats,
) -> None:
    """Process every line of `path` in batches, then remove it, handing any bytes that a bare
    producer wrote meanwhile back to the live queue. When the daemon is stopping, return after
    the current batch and keep the file: the next start drains the rest."""
    reader = await asyncio.to_thread(DrainingFile, path)
    try:
        while True:
            if stores.control.stopping:
                stats.interrupted = True
                log.info("drain.interrupted", path=str(path), offset=reader.offset)
                return
            batch = await asyncio.to_thread(reader.read_lines, DRAIN_BATCH_LINES)
            if not batch and await asyncio.to_thread(reader.has_fragment):
                await asyncio.sleep(LATE_WRITER_GRACE_S)  # let a writer finish its line
                batch = await asyncio.to_thread(reader.read_lines, DRAIN_BATCH_LINES)
                if not batch:
                    batch = split_lines(await asyncio.to_thread(reader.take_fragment))
            if not batch:
                break
            await process(batch)
            stores.control.progress()
        late = split_lines(await asyncio.to_thread(reader.remove_and_collect_late_bytes))
        if late:
            await asyncio.to_thread(append_locked, stores.settings.lazy_edges_queue_path, late)
            stats.late_lines_handed_back += len(late)
            log.info("drain.late_lines_handed_back", count=len(late))
    finally:
        reader.close()


async def _forget_old_identities(stores: Stores, now: int) -> None:
    async with stores.graph.write() as tx:
        await tx.conn.execute("DELETE FROM applied_lines WHERE settled_at < ?",
                              (now - APPLIED_LINE_RETENTION_MS,))


class QueueFileError(StoreUnavailable):
    """A queue file could not be read or written (disk full, permissions): exit 1."""


class _BatchDrainer:
    """Resolves and applies one batch of lines at a time (see the module docstring)."""

    def __init__(
        self, stores: Stores, stats: DrainStats, *, dry_run: bool, clock: Callable[[], int]
    ) -> None:
        self.stores = stores
        self.stats = stats
        self.dry_run = dry_run
        self.clock = clock
        self.malformed_examples: list[dict[str, Any]] = []
        #: Lines that failed in this tick, by identity (bounded by the tick's failures).
        self.failed_this_tick: set[str] = set()

    async def process(self, raw_lines: list[bytes]) -> None:
        """Apply one batch; raises StoreUnavailable (nothing of the batch written)."""
        settings = self.stores.settings
        graph = self.stores.graph
        parsed = parse_many(raw_lines)
        self.stats.total_lines += len(parsed)
        settled = await _settled_ids(self.stores, [p.line_id for p in parsed])

        work: list[EdgeLine] = []
        malformed: list[MalformedLine] = []
        deferred: list[bytes] = []
        seen: set[str] = set()
        for line in parsed:
            if line.line_id in settled:
                self.stats.replayed += 1
            elif line.line_id in seen:
                self.stats.duplicates += 1
            elif line.line_id in self.failed_this_tick and isinstance(line, EdgeLine):
                seen.add(line.line_id)
                deferred.append(line.raw)
            else:
                seen.add(line.line_id)
                if isinstance(line, MalformedLine):
                    malformed.append(line)
                else:
                    work.append(line)
        self.stats.processed += len(work) + len(malformed)

        endpoints = list(dict.fromkeys(n for line in work for n in (line.source, line.target)))
        present = await graph.existing_ids(endpoints)
        missing = [n for n in endpoints if n not in present]
        plan = await plan_backfill(graph, self.stores.vectors, settings, missing,
                                   existing=present)
        for outcome in plan.results.values():
            if outcome.reason is Reason.CHROMA_FETCH_FAILED:
                # An outage is not the line's fault: fail the tick, keep every line.
                raise VectorStoreError(f"back-fill fetch failed: {outcome.error}")

        now = self.clock()
        links: list[EdgeRow] = []
        settle: list[tuple[str, str, int]] = []
        requeue: list[bytes] = []
        dead: list[bytes] = []
        for line in work:
            unresolved = [n for n in (line.source, line.target)
                          if n not in present and not plan.resolved(n)]
            if not unresolved:
                links.append(EdgeRow(line.source, line.target, line.relationship, line.weight,
                                     line.properties))
                settle.append((line.line_id, "applied", now))
                continue
            result = plan.results.get(unresolved[0])
            reason = str(result.reason) if result is not None else "endpoint-missing"
            if line.attempts + 1 >= settings.lazy_edge_max_attempts:
                dead.append(dead_letter_record(
                    line_id=line.line_id, reason=reason, detail=f"unresolved: {unresolved}",
                    raw=requeue_line(line, reason=reason, now_ms=now),
                    attempts=line.attempts + 1, now_ms=now))
                settle.append((line.line_id, "dead", now))
            else:
                requeue.append(requeue_line(line, reason=reason, now_ms=now))
            self.failed_this_tick.add(line.line_id)
        for bad in malformed:
            dead.append(dead_letter_record(line_id=bad.line_id, reason=MALFORMED,
                                           detail=bad.detail, raw=bad.raw, attempts=0,
                                           now_ms=now))
            settle.append((bad.line_id, "dead", now))
            if len(self.malformed_examples) < MALFORMED_LOGGED:
                self.malformed_examples.append({"lineId": bad.line_id[:12],
                                                "detail": bad.detail})

        if not self.dry_run:
            await self._write(plan_apply=plan.apply, links=links, settle=settle,
                              requeue=requeue + deferred, dead=dead)
        self.stats.deferred += len(deferred)
        self.stats.succeeded += len(links)
        self.stats.requeued += len(requeue)
        self.stats.dead_lettered += len(dead)
        self.stats.skipped_malformed += len(malformed)
        self.stats.failed += len(work) - len(links)

    async def _write(
        self,
        *,
        plan_apply: Callable[[Any], Awaitable[None]],
        links: Sequence[EdgeRow],
        settle: Sequence[tuple[str, str, int]],
        requeue: Sequence[bytes],
        dead: Sequence[bytes],
    ) -> None:
        settings = self.stores.settings
        if dead:  # durable before the transaction that marks these lines settled
            await asyncio.to_thread(append_locked, settings.dead_letter_path, dead)
        async with self.stores.graph.write() as tx:
            await plan_apply(tx)
            await tx.link_edges(links)
            # In key order: a B-tree takes sorted keys faster than random SHA-256 ids.
            await tx.conn.executemany(
                "INSERT OR IGNORE INTO applied_lines(line_id, outcome, settled_at) "
                "VALUES (?, ?, ?)", sorted(settle))
        if requeue:  # after the commit: a crash before it re-queues again, with the same id
            await asyncio.to_thread(append_locked, settings.lazy_edges_queue_path, requeue)

    def log_malformed(self) -> None:
        """One warning per tick naming a few malformed lines (all are in the dead letters)."""
        if self.malformed_examples:
            log.warning("drain.malformed_lines", count=self.stats.skipped_malformed,
                        examples=self.malformed_examples,
                        deadLetterFile=str(self.stores.settings.dead_letter_path))


async def _settled_ids(stores: Stores, line_ids: Sequence[str]) -> set[str]:
    """Which of these line identities already took effect (applied or dead-lettered)."""
    if not line_ids:
        return set()
    rows = await stores.graph.fetch_all(
        "SELECT line_id FROM applied_lines WHERE line_id IN (SELECT value FROM json_each(?))",
        (json.dumps(list(line_ids)),),
    )
    return {row[0] for row in rows}


async def rem_tick(stores: Stores, dry_run: bool) -> dict[str, Any]:
    """One REM tick: live-ingest the sessions summarized since the previous tick (minus the
    overlap), then drain the queue. The watermark is the start of the last tick whose live
    ingestion completed; the first tick looks back the overlap from now."""
    settings = stores.settings
    started = now_ms()
    watermark = await get_value(stores.graph, LIVE_INGEST_WATERMARK)
    since = int(watermark) if watermark and watermark.isdigit() else started
    cutoff = since - settings.rem_live_ingest_overlap_ms
    try:
        report = await live_ingest_since(stores.graph, stores.vectors, settings, cutoff,
                                         dry_run=dry_run)
        live: dict[str, Any] = report.figures()
        if not dry_run:  # only a completed ingestion moves the watermark
            await set_value(stores.graph, LIVE_INGEST_WATERMARK, str(started), now_ms=now_ms())
    except CollectionMissing as exc:
        log.warning("ingest.skipped", reason=str(exc))
        live = {"cutoffMs": cutoff, "skipped": str(exc)}
    drained = await drain_queue(stores, dry_run=dry_run)
    return {"liveIngest": live, "drain": drained.figures()}
