"""Draining the lazy-edge queue: the second half of the REM tick (`core.jobs.rem_tick`).

Every appended line takes effect exactly once, whatever its bytes and wherever a crash lands:

- **Identity by position.** A rotated queue (`.draining`) is a generation with a random id in
  a sidecar (`core.stores.queue_files`); a line is (generation, byte offset). Each batch's
  transaction writes its nodes and edges *and* the generation's committed offset, so a
  restart resumes right after the last committed line: a replay is impossible, and a
  byte-identical line appended again is simply another line (another mention: it reinforces
  the edge again). No identity is kept per applied line.
- **Order of writes per batch**: (1) over-limit lines are streamed to side files while they
  are read; (2) dead letters are appended and fsynced; (3) re-queued lines are appended and
  fsynced; (4) one transaction: back-filled nodes, edges, the committed offset (with the
  dead-letter file's size), and the re-queue tokens issued and used up. A SIGKILL between any
  two steps leaves nothing applied twice and nothing lost:
  - before (4) nothing took effect, and the batch is read again from the committed offset;
  - dead letters written by a batch that never committed are found again by their `readAt`
    (they can only follow the dead-letter size the last commit recorded) and kept, not
    written twice, so one line never has two records;
  - a re-queued line carries a token (its lineId and attempt count) that is outstanding only
    once the commit recorded it, and is used up in the transaction that settles the line: a
    copy a crash left in the queue (the batch was re-read and re-queued it again, or applied
    it) is recognized and skipped.
- **No line can stop the queue.** Anything a line can carry is caught by the parser
  (`core.rules.queue_lines`) and dead-lettered as malformed. For what nobody foresaw, a batch that
  fails twice with an error that is not an outage is split in halves until the line that
  fails alone is isolated and dead-lettered (`unprocessable`); the others are applied.
  Outages are told apart first: a SQLite error by its result code (busy, locked, I/O, full
  ...), a Chroma error by its kind (only a request refused for its data, 400/413 or refused by
  the client, can be the batch's fault) and by asking the store a harmless question (if that
  fails too, the store is down). An outage fails the tick, keeps `.draining` for the next one
  and spends no line's attempts. A line is isolated only after three tries alone, a moment
  apart, so a store that flaps cannot get a good line dead-lettered.
- **Bounded memory.** `.draining` is read in chunks, a batch is at most DRAIN_BATCH_LINES
  lines, DRAIN_BATCH_BYTES bytes and DRAIN_BATCH_PARSED_BYTES once parsed (a bound computed
  from the bytes before parsing), and a line over the limit is never held: it is streamed
  to `<queue>.dead/` and its dead letter names the file, its size and its SHA-256.
- **A drainer per host.** On a shared PostgreSQL state each host's drainer tags the
  generations it commits with its own id (`core.stores.drainer_identity`) and forgets only its
  own older ones; a batch that loses to a concurrent write (deadlock, serialization failure)
  is tried again, and never counts against its lines.
- One drainer per queue at a time (a lock); a leftover `.draining` (a crash, a stop) is
  drained before the live queue is rotated, so a rotation never overwrites unread lines.

Earlier versions' queues (a line identified by its bytes' SHA-256) are settled by
`core.jobs.line_identity_migration`, the drain's only code for them.
"""

from __future__ import annotations

import asyncio
import gc
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import structlog

from core.jobs.context import TickContext
from core.jobs.drain_faults import (
    BATCH_TRIES,
    ISOLATION_BACKOFF_S,
    ISOLATION_TRIES,
    is_outage,
    isolation_plan,
)
from core.jobs.lazy_backfill import plan_backfill
from core.jobs.line_identity_migration import LineIdentityMigration
from core.rules.backfill_plan import BackfillPlan, line_reason
from core.rules.drain_plan import (
    ENDPOINT_MISSING,
    BatchPlan,
    DrainStats,
    Known,
    Parsed,
    decide,
    parse_batch,
    triage,
)
from core.rules.errors import StoreUnavailable, WriteConflict
from core.rules.queue_lines import (
    EdgeLine,
    MalformedLine,
    ReadLine,
    position_id,
)
from core.stores import drain_state
from core.stores.clock import now_ms
from core.stores.dead_letter_file import dead_letters_of, spill_dir
from core.stores.drainer_identity import drainer_id
from core.stores.files import file_size
from core.stores.graph import (
    existing_ids,
    insert_edges_if_absent,
    insert_nodes_if_absent,
    link_edges,
)
from core.stores.graph_db import GraphDB, Transaction
from core.stores.locks import ProcessLock
from core.stores.queue_files import (
    Generation,
    append_locked,
    new_generation,
    read_generation,
    refuse_symlinked_queue,
    remove_generation,
    rotate_queue,
    write_generation,
)
from core.stores.queue_reader import QueueReader, hand_back_late_bytes

log = structlog.get_logger(__name__)

#: Lines per batch: one existence query, a Chroma get or two, one transaction. Fewer, larger
#: batches rewrite fewer index pages and fsync fewer times; a batch's memory grows with its
#: lines, so this is the size past which a larger batch drains no faster (docs/performance.md,
#: "Notes moved from the code").
DRAIN_BATCH_LINES = 20_000
#: Bytes of lines per batch, which bounds what a batch holds in copies of its lines (the
#: parsed strings, the properties JSON, a dead letter's record) when they are long.
DRAIN_BATCH_BYTES = 6 << 20
#: The bound of a batch's lines once parsed (`parsed_size_bound`: their bytes plus
#: PARSED_BYTES_PER_VALUE per JSON value). It lets a full batch of real edge lines through,
#: while a line that parses into millions of small objects (`[[],[],...]`) counts for many
#: times its bytes, so a 1 MiB one makes a batch of its own instead of sharing one with two
#: others: what a batch holds once parsed is bounded whatever its lines hold.
DRAIN_BATCH_PARSED_BYTES = 48 << 20
#: How long to wait for a bare producer to finish an unterminated last line.
LATE_WRITER_GRACE_S = 0.05
#: How many malformed lines are quoted in the log per tick (all are dead-lettered).
MALFORMED_LOGGED = 10
#: Tries of a batch that lost to a concurrent write (`WriteConflict`: another drainer on a
#: shared PostgreSQL state), CONFLICT_BACKOFF_S times the try number apart; none spends a
#: line's attempts, and a conflict on the last one fails the tick as an outage.
CONFLICT_TRIES = 5
CONFLICT_BACKOFF_S = 0.05

def drainer_lock(queue_path: Path) -> ProcessLock:
    """The lock that makes one drainer at a time."""
    return ProcessLock(queue_path.with_name(queue_path.name + ".drain.lock"),
                       purpose=f"the drainer of {queue_path}")


class QueueFileError(StoreUnavailable):
    """A queue file could not be read or written (disk full, permissions): exit 1."""


async def drain_queue(
    context: TickContext, *, dry_run: bool = False, clock: Callable[[], int] = now_ms
) -> DrainStats:
    """Drain the leftover `.draining` (if any), then the live queue. Raises LockHeld when
    another drainer runs, StoreUnavailable when a store fails (nothing lost either way),
    QueuePathIsSymlink (exit 2) when the queue path is a symbolic link."""
    started = time.monotonic()
    refuse_symlinked_queue(context.settings.lazy_edges_queue_path)
    drainer = _Drainer(context, dry_run=dry_run, clock=clock)
    try:
        with _cyclic_gc_paused():
            await (drainer.read_in_place() if dry_run else drainer.drain_under_lock())
    except OSError as exc:
        # Disk full, permissions, a vanished folder: fail the tick like a store outage;
        # `.draining` (if any) stays for the next tick and nothing is lost.
        raise QueueFileError(f"queue file error: {exc}") from exc
    drainer.log_malformed()
    return replace(drainer.stats, duration_ms=int((time.monotonic() - started) * 1000))


@contextmanager
def _cyclic_gc_paused() -> Iterator[None]:
    """Pause Python's cyclic garbage collector for the drain. A drain allocates several
    containers per line (the parsed object, its properties, the rows to write), and every few
    thousand allocations the collector walks the whole heap, which with chromadb loaded is
    large (see docs/performance.md, "Notes moved from the code"). Nothing the drain allocates
    forms a reference cycle, so reference counting frees it all the same; the collector runs
    again as soon as the drain returns."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


@dataclass(slots=True)
class _Batch:
    """Consecutive lines of one generation, and the offset right after the last of them."""

    generation: Generation
    lines: list[ReadLine]
    end_offset: int

    def halves(self) -> tuple[_Batch, _Batch]:
        middle = len(self.lines) // 2
        left, right = self.lines[:middle], self.lines[middle:]
        return (_Batch(self.generation, left, right[0].offset),
                _Batch(self.generation, right, self.end_offset))


class _Drainer:
    """One tick's drain: the files, the batches, and what this tick learned on the way."""

    def __init__(
        self, context: TickContext, *, dry_run: bool, clock: Callable[[], int]
    ) -> None:
        self.context = context
        self.settings = context.settings
        self.graph: GraphDB = context.graph
        self.stats = DrainStats()
        self.dry_run = dry_run
        self.clock = clock
        self.malformed_examples: list[dict[str, Any]] = []
        #: When the tick started: lines re-queued since are deferred (`Known`).
        self.started_ms = clock()
        #: Positions whose dead letters are in the file but not yet behind a committed offset
        #: (found on recovery, or written by a batch whose commit failed): never a second
        #: record for one of them. Bounded by a batch: a commit forgets what it settled.
        self.dead_written: set[str] = set()
        #: Earlier versions' line identities (`core.jobs.line_identity_migration`).
        self.migration = LineIdentityMigration()
        self.drain_tables = True
        #: The dead-letter file's size after our last append, recorded with each commit.
        self.dead_letters_size = 0
        #: The generation of the last commit (the first commit of another forgets the rest).
        self.current_generation: str | None = None
        #: Whose generations these are: '' for a SQLite file (one drainer per file), else
        #: the id kept beside the queue (`core.stores.drainer_identity`), read under the lock.
        self.drainer = ""

    # ---------------------------------------------------------------------------- files

    async def drain_under_lock(self) -> None:
        """The leftover `.draining` first, then the rotated queue, under the drainer lock."""
        s = self.settings
        lock = drainer_lock(s.lazy_edges_queue_path).acquire()
        try:
            if s.state_url:
                self.drainer = await asyncio.to_thread(drainer_id, s.lazy_edges_queue_path)
            await self.migration.detect(self.graph)
            if s.draining_path.exists():
                self.stats = replace(self.stats, orphan_recovered=True)
                log.warning("drain.orphan_recovering", path=str(s.draining_path))
                await self._drain_generation(*await self._resume_leftover())
            else:
                # A sidecar without its file: the crash came after `.draining` was removed.
                await asyncio.to_thread(remove_generation, s.draining_path)
            if not self.stats.interrupted:
                generation = new_generation(now_ms=self.clock(),
                                            dead_letters_size=file_size(s.dead_letter_path))
                if await asyncio.to_thread(rotate_queue, s.lazy_edges_queue_path,
                                           s.draining_path, generation):
                    self.stats = replace(self.stats, queue_rotated=True)
                    await self._drain_generation(generation, 0)
            if not self.stats.interrupted:
                await self.migration.finish(self.graph)
        finally:
            lock.release()

    async def _resume_leftover(self) -> tuple[Generation, int]:
        """The leftover's generation and the offset to resume at: its sidecar and committed
        offset, or (no sidecar: an earlier version's file, or one made by hand) a fresh
        generation from the first byte. Collects the dead letters a crashed batch wrote.

        A committed offset past the file's end means the sidecar does not describe this file
        (only something outside the drainer can cause it): the file is drained from its first
        byte under a fresh generation, because resuming could skip lines nobody read, while
        starting over can at worst apply lines a second time, and says so in the log."""
        s = self.settings
        generation = await asyncio.to_thread(read_generation, s.draining_path)
        if generation is not None:
            committed, dead_size = await drain_state.progress(self.graph, generation.id)
            size = file_size(s.draining_path)
            if committed is not None and committed > size:
                # Committed past the file's end: this sidecar belongs to another file.
                log.error("drain.sidecar_mismatch", generation=generation.id,
                          committedOffset=committed, size=size)
                generation = None
            else:
                after = dead_size if dead_size is not None else generation.dead_letters_size
                self.dead_written |= await asyncio.to_thread(
                    dead_letters_of, s.dead_letter_path, generation.id, after=after)
                return generation, committed or 0
        generation = new_generation(now_ms=self.clock(),
                                    dead_letters_size=file_size(s.dead_letter_path),
                                    legacy=self.migration.active)
        await asyncio.to_thread(write_generation, s.draining_path, generation)
        log.warning("drain.leftover_adopted", generation=generation.id,
                    legacy=generation.legacy)
        return generation, 0

    async def _drain_generation(self, generation: Generation, start: int) -> None:
        """Process every line of `.draining` from `start` in batches, then remove it (and its
        sidecar), handing bytes a bare producer wrote meanwhile back to the live queue. When
        the daemon is stopping, return after the current batch and keep the file: the next
        start resumes after the committed offset."""
        s = self.settings
        self.dead_letters_size = file_size(s.dead_letter_path)
        reader = await asyncio.to_thread(
            QueueReader, s.draining_path, start=start, spill_to=spill_dir(s.dead_letter_path),
            name_of=lambda offset: f"{generation.id}-{offset}.line")
        try:
            while True:
                if self.context.control.stopping:
                    self.stats = replace(self.stats, interrupted=True)
                    log.info("drain.interrupted", path=str(s.draining_path),
                             offset=reader.offset)
                    return
                lines = await _read_batch(reader)
                if not lines:
                    break
                await self._settle(_Batch(generation, lines, reader.offset))
                self.context.control.progress()
            late = await asyncio.to_thread(hand_back_late_bytes, reader,
                                           s.lazy_edges_queue_path)
            await asyncio.to_thread(remove_generation, s.draining_path)
            if late:
                self.stats = replace(
                    self.stats, late_lines_handed_back=self.stats.late_lines_handed_back + late)
                log.info("drain.late_lines_handed_back", count=late)
        finally:
            await asyncio.to_thread(reader.close)

    async def read_in_place(self) -> None:
        """Dry run: read `.draining` (from its committed offset) and the queue where they are;
        no lock, no rename, no write, no side file."""
        s = self.settings
        self.drain_tables = await drain_state.table_exists(self.graph, drain_state.TOKENS_TABLE)
        await self.migration.detect(self.graph)
        leftover = await asyncio.to_thread(read_generation, s.draining_path)
        start = 0
        if leftover is not None and self.drain_tables:
            start = (await drain_state.progress(self.graph, leftover.id))[0] or 0
        dry = Generation("dry-run-leftover", 0, 0, legacy=self.migration.active)
        for path, generation, offset in ((s.draining_path, leftover or dry, start),
                                         (s.lazy_edges_queue_path,
                                          Generation("dry-run", 0, 0), 0)):
            if not path.exists():
                continue
            reader = await asyncio.to_thread(QueueReader, path, start=offset)
            try:
                while lines := await _read_batch(reader):
                    await self._settle(_Batch(generation, lines, reader.offset))
            finally:
                await asyncio.to_thread(reader.close)

    # --------------------------------------------------------------------------- batches

    async def _settle(self, batch: _Batch, *, tries: int = BATCH_TRIES) -> None:
        """Apply a batch; when it fails `tries` times with an error that is not an outage,
        split it until the failing line is alone, and dead-letter that line (see the module
        docstring). Outages propagate: the tick fails and nothing is spent."""
        alone = len(batch.lines) == 1
        tries = ISOLATION_TRIES if alone else tries
        error: Exception | None = None
        for attempt in range(1, tries + 1):
            if alone and attempt > 1:
                await asyncio.sleep(ISOLATION_BACKOFF_S * (attempt - 1))
            try:
                await self._apply_until_no_conflict(batch)
                return
            except Exception as exc:
                if await self._is_outage(exc):
                    raise
                error = exc
                log.warning("drain.batch_failed", generation=batch.generation.id,
                            fromOffset=batch.lines[0].offset, toOffset=batch.end_offset,
                            lines=len(batch.lines), attempt=attempt, error=repr(exc))
        assert error is not None
        if alone:
            await self._isolate(batch, error)
            return
        for half in batch.halves():
            await self._settle(half, tries=1)

    async def _apply_until_no_conflict(self, batch: _Batch) -> None:
        """Apply a batch, trying it again while it loses to a concurrent write (a deadlock or
        serialization failure rolls the whole transaction back: nothing of it took effect)."""
        for attempt in range(1, CONFLICT_TRIES + 1):
            try:
                await self._apply(batch)
                return
            except WriteConflict as exc:
                if attempt == CONFLICT_TRIES:
                    raise
                log.warning("drain.batch_conflict", generation=batch.generation.id,
                            fromOffset=batch.lines[0].offset, attempt=attempt, error=str(exc))
                await asyncio.sleep(CONFLICT_BACKOFF_S * attempt)

    async def _is_outage(self, exc: Exception) -> bool:
        """Whether `exc` says a store is unavailable rather than that this batch's data made a
        call fail (`core.jobs.drain_faults.is_outage`)."""
        s = self.settings
        return await is_outage(exc, self.context.vectors,
                               (s.memory_collection, s.summary_collection))

    async def _apply(self, batch: _Batch) -> None:
        """Resolve and write one batch (see the module docstring for the order of writes)."""
        generation = batch.generation
        parsed = parse_batch(batch.lines)
        now = self.clock()
        triaged = triage(generation.id, parsed,
                         await self._known(parsed, legacy_file=generation.legacy), now_ms=now)
        endpoints = list(triaged.endpoints)
        present = await existing_ids(self.graph, endpoints)
        missing = [n for n in endpoints if n not in present]
        backfill = await plan_backfill(self.graph, self.context.vectors, self.settings,
                                       missing, existing=present)
        plan = decide(triaged, _unresolved(missing, backfill),
                      max_attempts=self.settings.lazy_edge_max_attempts, now_ms=now)
        if not self.dry_run:
            await self._write(batch, plan, backfill, now=now)
        self._account(plan, parsed, generation.id)

    async def _known(self, parsed: Sequence[Parsed], *, legacy_file: bool) -> Known:
        """What the stores and this tick know about these lines (two small queries at most)."""
        tokens = [p.line.token_id for p in parsed
                  if isinstance(p.line, EdgeLine) and p.line.token_id is not None]
        outstanding: dict[str, tuple[int, int]] = {}
        if tokens and self.drain_tables:
            outstanding = await drain_state.outstanding_tokens(self.graph, tokens)
        legacy_settled = await self.migration.settled(self.graph, parsed,
                                                      legacy_file=legacy_file)
        return Known(outstanding=outstanding, tick_started_ms=self.started_ms,
                     dead_written=self.dead_written, legacy_settled=legacy_settled,
                     legacy_file=legacy_file)

    async def _write(self, batch: _Batch, plan: BatchPlan, backfill: BackfillPlan,
                     *, now: int) -> None:
        s = self.settings
        if plan.dead_letters:  # durable before the commit; a crash keeps them (readAt)
            self.dead_letters_size = await asyncio.to_thread(
                append_locked, s.dead_letter_path, [d.record for d in plan.dead_letters])
            self.dead_written.update(d.read_at for d in plan.dead_letters)
        if plan.requeue:  # durable before the commit; a crash leaves copies whose token is void
            await asyncio.to_thread(append_locked, s.lazy_edges_queue_path, plan.requeue)
        async with self.graph.write() as tx:
            await insert_nodes_if_absent(tx, backfill.nodes)
            await insert_edges_if_absent(tx, backfill.edges)
            await link_edges(tx, plan.links)
            await self._commit_bookkeeping(tx, batch, plan, now=now)
        self.current_generation = batch.generation.id
        if self.dead_written:  # everything before the committed offset is settled for good
            self.dead_written = {p for p in self.dead_written
                                 if not _settled_by(p, batch.generation.id, batch.end_offset)}

    async def _commit_bookkeeping(self, tx: Transaction, batch: _Batch, plan: BatchPlan,
                                  *, now: int) -> None:
        """The committed offset, the tokens used and issued, the old identities settled."""
        generation = batch.generation.id
        await drain_state.commit_offset(
            tx, generation, offset=batch.end_offset, dead_letters_size=self.dead_letters_size,
            now_ms=now, first_of_generation=self.current_generation != generation,
            drainer=self.drainer)
        await drain_state.use_tokens(tx, plan.tokens_consumed)
        await drain_state.issue_tokens(tx, plan.tokens_issued, now_ms=now)
        await self.migration.record(tx, plan, now_ms=now)

    def _account(self, plan: BatchPlan, parsed: Sequence[Parsed], generation: str) -> None:
        """Add a written batch's figures to the tick's and remember what later batches of the
        tick must know."""
        self.stats = self.stats.added(plan)
        self.migration.remember(plan)
        if plan.malformed and len(self.malformed_examples) < MALFORMED_LOGGED:
            for item in parsed:
                if isinstance(item.line, MalformedLine):
                    self.malformed_examples.append({"readAt": position_id(generation,
                                                                          item.read.offset),
                                                    "detail": item.line.detail[:200]})
                    if len(self.malformed_examples) >= MALFORMED_LOGGED:
                        break

    async def _isolate(self, batch: _Batch, error: Exception) -> None:
        """Dead-letter the one line that fails alone (`unprocessable`, with the error)."""
        plan = isolation_plan(batch.generation.id, batch.lines[0], error,
                              already_dead=self.dead_written, now_ms=self.clock())
        if not self.dry_run:
            await self._write(batch, plan, BackfillPlan(), now=self.clock())
        self._account(plan, (), batch.generation.id)
        self.stats = replace(self.stats, isolated=self.stats.isolated + 1)

    def log_malformed(self) -> None:
        """One warning per tick naming a few malformed lines (all are in the dead letters)."""
        if self.malformed_examples:
            log.warning("drain.malformed_lines", count=self.stats.skipped_malformed,
                        examples=self.malformed_examples,
                        deadLetterFile=str(self.settings.dead_letter_path))


async def _read_batch(reader: QueueReader) -> list[ReadLine]:
    """The next batch of whole lines; at the end of the file, after a short wait for a bare
    producer to finish, an unterminated last line counts as a line."""
    lines = await asyncio.to_thread(reader.read_lines, DRAIN_BATCH_LINES, DRAIN_BATCH_BYTES,
                                    max_parsed_bytes=DRAIN_BATCH_PARSED_BYTES)
    if not lines and await asyncio.to_thread(reader.has_more):
        await asyncio.sleep(LATE_WRITER_GRACE_S)  # let a writer finish its line
        lines = await asyncio.to_thread(reader.read_lines, DRAIN_BATCH_LINES,
                                        DRAIN_BATCH_BYTES, final=True,
                                        max_parsed_bytes=DRAIN_BATCH_PARSED_BYTES)
    return lines


def _settled_by(read_at: str, generation: str, committed_offset: int) -> bool:
    """Whether the position `read_at` lies before `generation`'s committed offset."""
    gen, _, offset = read_at.partition(":")
    return gen == generation and int(offset) < committed_offset


def _unresolved(missing: Sequence[str], backfill: BackfillPlan) -> dict[str, str]:
    """Each endpoint that does not resolve, with its reason. Raises the VectorStoreError a
    Chroma read failed with: the caller tells an outage from a request refused for its data."""
    if backfill.fetch_errors:
        raise backfill.fetch_errors[0]
    unresolved: dict[str, str] = {}
    for node_id in missing:
        if backfill.resolved(node_id):
            continue
        result = backfill.results.get(node_id)
        unresolved[node_id] = line_reason(result) if result is not None else ENDPOINT_MISSING
    return unresolved
