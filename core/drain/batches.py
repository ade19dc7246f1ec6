"""One batch of the drain settled (`BatchSettler.settle`): resolved, written in the order that
makes a crash harmless (`BatchSettler._write`, see `core.drain`), tried again when it
loses to a concurrent write, split when it fails for a reason that is not an outage, and its
one failing line isolated and dead-lettered. An outage propagates and spends nothing.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import structlog

from core.base.rules.errors import WriteConflict
from core.base.runtime.context import TickContext
from core.base.state.graph import (
    existing_ids,
    insert_edges_if_absent,
    insert_nodes_if_absent,
    link_edges,
)
from core.base.state.graph_db import GraphDB, Transaction
from core.drain.faults import (
    BATCH_TRIES,
    ISOLATION_BACKOFF_S,
    ISOLATION_TRIES,
    is_outage,
    isolation_plan,
)
from core.drain.lazy_backfill import plan_backfill
from core.drain.rules.backfill_plan import BackfillPlan, line_reason
from core.drain.rules.drain_plan import (
    ENDPOINT_MISSING,
    BatchPlan,
    Known,
    Parsed,
    decide,
    parse_batch,
    triage,
)
from core.drain.rules.queue_lines import EdgeLine, ReadLine
from core.drain.stores import drain_state
from core.drain.stores.queue_files import Segment, append_locked
from core.drain.tick_state import TickState

#: The drain's one logger name (see `core.drain.tick_state`).
log = structlog.get_logger(__package__)

#: Tries of a batch that lost to a concurrent write (`WriteConflict`), CONFLICT_BACKOFF_S
#: times the try number apart; a conflict on the last one fails the tick as an outage.
CONFLICT_TRIES = 5
CONFLICT_BACKOFF_S = 0.05


@dataclass(slots=True)
class Batch:
    """Consecutive lines of one segment, and the offset right after the last of them."""

    segment: Segment
    lines: list[ReadLine]
    end_offset: int

    def halves(self) -> tuple[Batch, Batch]:
        middle = len(self.lines) // 2
        left, right = self.lines[:middle], self.lines[middle:]
        return (Batch(self.segment, left, right[0].offset),
                Batch(self.segment, right, self.end_offset))


class BatchSettler:
    """Settles a tick's batches one after another, into the stores and the tick's state."""

    def __init__(self, context: TickContext, state: TickState, *, dry_run: bool,
                 clock: Callable[[], int]) -> None:
        self.context = context
        self.settings = context.settings
        self.graph: GraphDB = context.graph
        self.state = state
        self.dry_run = dry_run
        self.clock = clock

    async def settle(self, batch: Batch, *, tries: int = BATCH_TRIES) -> None:
        """Apply a batch, splitting it on a failure that is not an outage (see `core.drain`);
        outages propagate."""
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
                log.warning("drain.batch_failed", segment=batch.segment.id,
                            fromOffset=batch.lines[0].offset, toOffset=batch.end_offset,
                            lines=len(batch.lines), attempt=attempt, error=repr(exc))
        assert error is not None
        if alone:
            await self._isolate(batch, error)
            return
        for half in batch.halves():
            await self.settle(half, tries=1)

    async def _apply_until_no_conflict(self, batch: Batch) -> None:
        """Apply a batch, trying it again while it loses to a concurrent write (a deadlock or
        serialization failure rolls the whole transaction back: nothing of it took effect)."""
        for attempt in range(1, CONFLICT_TRIES + 1):
            try:
                await self._apply(batch)
                return
            except WriteConflict as exc:
                if attempt == CONFLICT_TRIES:
                    raise
                log.warning("drain.batch_conflict", segment=batch.segment.id,
                            fromOffset=batch.lines[0].offset, attempt=attempt, error=str(exc))
                await asyncio.sleep(CONFLICT_BACKOFF_S * attempt)

    async def _is_outage(self, exc: Exception) -> bool:
        """Whether `exc` says a store is unavailable rather than that this batch's data made a
        call fail (`core.drain.faults.is_outage`)."""
        s = self.settings.chroma
        return await is_outage(exc, self.context.vectors,
                               (s.memory_collection, s.summary_collection))

    async def _apply(self, batch: Batch) -> None:
        """Resolve and write one batch (see `core.drain` for the order of writes)."""
        segment = batch.segment
        parsed = parse_batch(batch.lines)
        now = self.clock()
        triaged = triage(segment.id, parsed, await self._known(parsed), now_ms=now)
        endpoints = list(triaged.endpoints)
        present = await existing_ids(self.graph, endpoints)
        missing = [n for n in endpoints if n not in present]
        backfill = await plan_backfill(self.graph, self.context.vectors, self.settings,
                                       missing, existing=present)
        plan = decide(triaged, _unresolved(missing, backfill),
                      max_attempts=self.settings.drain.lazy_edge_max_attempts, now_ms=now)
        if not self.dry_run:
            await self._write(batch, plan, backfill, now=now)
        self.state.account(plan, parsed, segment.id)

    async def _known(self, parsed: Sequence[Parsed]) -> Known:
        """What the stores and this tick know about these lines (one small query at most)."""
        state = self.state
        tokens = [p.line.token_id for p in parsed
                  if isinstance(p.line, EdgeLine) and p.line.token_id is not None]
        outstanding: dict[str, tuple[int, int]] = {}
        if tokens and state.drain_tables:
            outstanding = await drain_state.outstanding_tokens(self.graph, tokens)
        return Known(outstanding=outstanding, tick_started_ms=state.started_ms,
                     dead_written=state.dead_written)

    async def _write(self, batch: Batch, plan: BatchPlan, backfill: BackfillPlan,
                     *, now: int) -> None:
        s, state = self.settings.drain, self.state
        if plan.dead_letters:  # durable before the commit; a crash keeps them (readAt)
            state.dead_letters_size = await asyncio.to_thread(
                append_locked, s.dead_letter_path, [d.record for d in plan.dead_letters])
            state.dead_written.update(d.read_at for d in plan.dead_letters)
        if plan.requeue:  # durable before the commit; a crash leaves copies whose token is void
            await asyncio.to_thread(append_locked, s.lazy_edges_queue_path, plan.requeue)
        async with self.graph.write() as tx:
            await insert_nodes_if_absent(tx, backfill.nodes)
            await insert_edges_if_absent(tx, backfill.edges)
            await link_edges(tx, plan.links)
            await self._commit_bookkeeping(tx, batch, plan, now=now)
        state.current_segment = batch.segment.id
        if state.dead_written:  # everything before the committed offset is settled for good
            state.dead_written = {p for p in state.dead_written
                                  if not _settled_by(p, batch.segment.id, batch.end_offset)}

    async def _commit_bookkeeping(self, tx: Transaction, batch: Batch, plan: BatchPlan,
                                  *, now: int) -> None:
        """The committed offset, the tokens used and issued."""
        segment, state = batch.segment.id, self.state
        await drain_state.commit_offset(
            tx, segment, offset=batch.end_offset, dead_letters_size=state.dead_letters_size,
            now_ms=now, first_of_segment=state.current_segment != segment,
            drainer=state.drainer)
        await drain_state.use_tokens(tx, plan.tokens_consumed)
        await drain_state.issue_tokens(tx, plan.tokens_issued, now_ms=now)

    async def _isolate(self, batch: Batch, error: Exception) -> None:
        """Dead-letter the one line that fails alone (`unprocessable`, with the error)."""
        plan = isolation_plan(batch.segment.id, batch.lines[0], error,
                              already_dead=self.state.dead_written, now_ms=self.clock())
        if not self.dry_run:
            await self._write(batch, plan, BackfillPlan(), now=self.clock())
        self.state.account(plan, (), batch.segment.id)
        self.state.stats = replace(self.state.stats, isolated=self.state.stats.isolated + 1)


def _settled_by(read_at: str, segment: str, committed_offset: int) -> bool:
    """Whether the position `read_at` lies before `segment`'s committed offset."""
    gen, _, offset = read_at.partition(":")
    return gen == segment and int(offset) < committed_offset


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
