"""One tick's drain over the queue files (`drain_queue`): under the drainer lock, the leftover
`.draining` resumed at its committed offset, then the live queue rotated; each read in bounded
batches that `core.drain.batches` settles, then removed with its sidecar. A dry run reads
both in place. The guarantees are in `core.drain`.
"""

from __future__ import annotations

import asyncio
import gc
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import structlog

from core.base.io.clock import now_ms
from core.base.io.files import file_size
from core.base.io.locks import ProcessLock
from core.base.rules.errors import StoreUnavailable
from core.base.runtime.context import TickContext
from core.drain.batches import Batch, BatchSettler
from core.drain.rules.drain_plan import DrainStats
from core.drain.rules.queue_lines import ReadLine
from core.drain.stores import drain_state
from core.drain.stores.dead_letter_file import dead_letters_of, spill_dir
from core.drain.stores.drainer_identity import drainer_id
from core.drain.stores.queue_files import (
    Segment,
    new_segment,
    read_sidecar,
    refuse_symlinked_queue,
    remove_sidecar,
    rotate_queue,
    write_sidecar,
)
from core.drain.stores.queue_reader import QueueReader, hand_back_late_bytes
from core.drain.tick_state import TickState

#: The drain's one logger name (see `core.drain.tick_state`).
log = structlog.get_logger(__package__)

#: Lines per batch (one existence query, a Chroma get or two, one transaction): the size past
#: which a larger batch drains no faster (docs/performance.md).
DRAIN_BATCH_LINES = 20_000
#: Bytes of lines per batch: bounds what a batch holds in copies of long lines.
DRAIN_BATCH_BYTES = 6 << 20
#: The bound of a batch's lines once parsed (`parsed_size_bound`): a full batch of real edge
#: lines fits, a line that parses into millions of small objects makes a batch of its own.
DRAIN_BATCH_PARSED_BYTES = 48 << 20
#: How long to wait for a bare producer to finish an unterminated last line.
LATE_WRITER_GRACE_S = 0.05


def drainer_lock(queue_path: Path) -> ProcessLock:
    """The lock that makes one drainer at a time."""
    return ProcessLock(queue_path.with_name(queue_path.name + ".drain.lock"),
                       purpose=f"the drainer of {queue_path}")


class QueueFileError(StoreUnavailable):
    """A queue file could not be read or written (disk full, permissions): exit 1."""


async def drain_queue(
    context: TickContext, *, dry_run: bool = False, clock: Callable[[], int] = now_ms
) -> DrainStats:
    """Drain the leftover `.draining` (if any), then the live queue. Raises LockHeld,
    StoreUnavailable (nothing lost either way) or QueuePathIsSymlink (exit 2)."""
    started = time.monotonic()
    refuse_symlinked_queue(context.settings.drain.lazy_edges_queue_path)
    drainer = _Drainer(context, dry_run=dry_run, clock=clock)
    try:
        with _cyclic_gc_paused():
            await (drainer.read_in_place() if dry_run else drainer.drain_under_lock())
    except OSError as exc:
        # Fail the tick like a store outage: `.draining` stays for the next tick.
        raise QueueFileError(f"queue file error: {exc}") from exc
    drainer.state.log_malformed(context.settings.drain.dead_letter_path)
    return replace(drainer.state.stats,
                   duration_ms=int((time.monotonic() - started) * 1000))


@contextmanager
def _cyclic_gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector for the drain: it would walk the whole (large) heap
    every few thousand of the drain's allocations (docs/performance.md), and nothing the
    drain allocates forms a cycle, so reference counting frees it all the same."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


class _Drainer:
    """One tick's drain: the files, and the batches read from them handed to the settler."""

    def __init__(
        self, context: TickContext, *, dry_run: bool, clock: Callable[[], int]
    ) -> None:
        self.context = context
        self.settings = context.settings
        self.graph = context.graph
        self.clock = clock
        self.state = TickState(started_ms=clock())
        self.batches = BatchSettler(context, self.state, dry_run=dry_run, clock=clock)

    async def drain_under_lock(self) -> None:
        """The leftover `.draining` first, then the rotated queue, under the drainer lock."""
        s, state = self.settings.drain, self.state
        lock = drainer_lock(s.lazy_edges_queue_path).acquire()
        try:
            if self.settings.state.url:
                state.drainer = await asyncio.to_thread(drainer_id, s.lazy_edges_queue_path)
            if s.draining_path.exists():
                state.stats = replace(state.stats, orphan_recovered=True)
                log.warning("drain.orphan_recovering", path=str(s.draining_path))
                await self._drain_segment(*await self._resume_leftover())
            else:
                # A sidecar without its file: the crash came after `.draining` was removed.
                await asyncio.to_thread(remove_sidecar, s.draining_path)
            if not state.stats.interrupted:
                segment = new_segment(now_ms=self.clock(),
                                      dead_letters_size=file_size(s.dead_letter_path))
                if await asyncio.to_thread(rotate_queue, s.lazy_edges_queue_path,
                                           s.draining_path, segment):
                    state.stats = replace(state.stats, queue_rotated=True)
                    await self._drain_segment(segment, 0)
        finally:
            lock.release()

    async def _resume_leftover(self) -> tuple[Segment, int]:
        """The leftover's segment and offset to resume at (no sidecar: a fresh segment from
        the first byte); collects the dead letters a crashed batch wrote.

        A committed offset past the file's end means the sidecar belongs to another file: the
        file is drained from its first byte under a fresh segment, because resuming could skip
        lines nobody read, while starting over can at worst apply lines twice (and logs it)."""
        s = self.settings.drain
        segment = await asyncio.to_thread(read_sidecar, s.draining_path)
        if segment is not None:
            committed, dead_size = await drain_state.progress(self.graph, segment.id)
            size = file_size(s.draining_path)
            if committed is not None and committed > size:
                log.error("drain.sidecar_mismatch", segment=segment.id,
                          committedOffset=committed, size=size)
                segment = None
            else:
                after = dead_size if dead_size is not None else segment.dead_letters_size
                self.state.dead_written |= await asyncio.to_thread(
                    dead_letters_of, s.dead_letter_path, segment.id, after=after)
                return segment, committed or 0
        segment = new_segment(now_ms=self.clock(),
                              dead_letters_size=file_size(s.dead_letter_path))
        await asyncio.to_thread(write_sidecar, s.draining_path, segment)
        log.warning("drain.leftover_adopted", segment=segment.id)
        return segment, 0

    async def _drain_segment(self, segment: Segment, start: int) -> None:
        """Settle `.draining` from `start` in batches, hand late bytes back to the live queue,
        and remove it with its sidecar. When stopping, return after the current batch and keep
        the file: the next start resumes after the committed offset."""
        s, state = self.settings.drain, self.state
        state.dead_letters_size = file_size(s.dead_letter_path)
        reader = await asyncio.to_thread(
            QueueReader, s.draining_path, start=start, spill_to=spill_dir(s.dead_letter_path),
            name_of=lambda offset: f"{segment.id}-{offset}.line")
        try:
            while True:
                if self.context.control.stopping:
                    state.stats = replace(state.stats, interrupted=True)
                    log.info("drain.interrupted", path=str(s.draining_path),
                             offset=reader.offset)
                    return
                lines = await _read_batch(reader)
                if not lines:
                    break
                await self.batches.settle(Batch(segment, lines, reader.offset))
                self.context.control.progress()
            late = await asyncio.to_thread(hand_back_late_bytes, reader,
                                           s.lazy_edges_queue_path)
            await asyncio.to_thread(remove_sidecar, s.draining_path)
            if late:
                state.stats = replace(
                    state.stats, late_lines_handed_back=state.stats.late_lines_handed_back + late)
                log.info("drain.late_lines_handed_back", count=late)
        finally:
            await asyncio.to_thread(reader.close)

    async def read_in_place(self) -> None:
        """Dry run: read `.draining` (from its committed offset) and the queue in place."""
        s, state = self.settings.drain, self.state
        state.drain_tables = await drain_state.table_exists(self.graph,
                                                            drain_state.TOKENS_TABLE)
        leftover = await asyncio.to_thread(read_sidecar, s.draining_path)
        start = 0
        if leftover is not None and state.drain_tables:
            start = (await drain_state.progress(self.graph, leftover.id))[0] or 0
        dry = Segment("dry-run-leftover", 0, 0)
        for path, segment, offset in ((s.draining_path, leftover or dry, start),
                                      (s.lazy_edges_queue_path,
                                       Segment("dry-run", 0, 0), 0)):
            if not path.exists():
                continue
            reader = await asyncio.to_thread(QueueReader, path, start=offset)
            try:
                while lines := await _read_batch(reader):
                    await self.batches.settle(Batch(segment, lines, reader.offset))
            finally:
                await asyncio.to_thread(reader.close)


async def _read_batch(reader: QueueReader) -> list[ReadLine]:
    """The next batch of whole lines; at the end, after a short wait for a bare producer, an
    unterminated last line counts as a line."""
    lines = await asyncio.to_thread(reader.read_lines, DRAIN_BATCH_LINES, DRAIN_BATCH_BYTES,
                                    max_parsed_bytes=DRAIN_BATCH_PARSED_BYTES)
    if not lines and await asyncio.to_thread(reader.has_more):
        await asyncio.sleep(LATE_WRITER_GRACE_S)
        lines = await asyncio.to_thread(reader.read_lines, DRAIN_BATCH_LINES,
                                        DRAIN_BATCH_BYTES, final=True,
                                        max_parsed_bytes=DRAIN_BATCH_PARSED_BYTES)
    return lines
