"""The dead-letter file `<queue>.dead.jsonl` and its side folder `<queue>.dead/`, read back.

Only the drainer appends to the file (with the producer lock protocol, `core.drain.stores.
queue_files.append_locked`); records are written and parsed by `core.drain.rules.dead_letters`.
This module reads them: which positions of a segment already have a record (the
drainer's crash recovery), and the counts by reason (status, metrics).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from core.base.io.files import file_size, iter_bounded_lines, open_lines
from core.drain.rules.dead_letters import (
    DEAD_LETTER_RECORD_LIMIT,
    parse_dead_letter,
    read_at_marker,
)


def spill_dir(dead_letter_path: Path) -> Path:
    """The folder that keeps over-limit lines' bytes: `<queue>.dead/`, beside the dead-letter
    file `<queue>.dead.jsonl`."""
    return dead_letter_path.with_suffix("")


def dead_letters_of(dead_letter_path: Path, segment: str, *, after: int) -> set[str]:
    """The positions (`readAt`) of `segment` that already have a dead-letter record.

    Only the drainer appends to the file, and only right before the commit that records the
    file's size (`after`), so a record of a batch that never committed can only follow `after`.
    When the file no longer fits that (an operator removed records), the whole file is read.
    """
    size = file_size(dead_letter_path)
    if size == 0:
        return set()
    found: set[str] = set()
    marker = read_at_marker(segment)
    with open(dead_letter_path, "rb") as stream:
        start = 0
        if 0 < after <= size:
            stream.seek(after - 1)
            start = after if stream.read(1) == b"\n" else 0
        stream.seek(start)
        for raw in iter_bounded_lines(stream, limit=DEAD_LETTER_RECORD_LIMIT):
            if raw is None or marker not in raw:
                continue
            read_at = parse_dead_letter(raw).read_at
            if read_at is not None and read_at.startswith(segment + ":"):
                found.add(read_at)
    return found


@dataclass(slots=True)
class DeadLetterCounts:
    """The dead-letter file's records: how many, by reason, and the latest `deadAt`."""

    present: bool = False
    total: int = 0
    bytes: int = 0
    by_reason: Counter[str] = field(default_factory=Counter)
    last_dead_ms: int | None = None


def count_dead_letters(path: Path) -> DeadLetterCounts:
    """Count the records by their `reason` (a torn record is `unreadable`), streaming the file
    in bounded lines. Blocking: call through a thread."""
    counts = DeadLetterCounts()
    with open_lines(path, limit=DEAD_LETTER_RECORD_LIMIT) as opened:
        if opened is None:
            return counts
        counts.present, counts.bytes = True, opened.size
        for raw in opened.lines:
            fields = parse_dead_letter(raw)
            counts.total += 1
            counts.by_reason[fields.reason] += 1
            if fields.dead_at is not None and (counts.last_dead_ms is None
                                               or fields.dead_at > counts.last_dead_ms):
                counts.last_dead_ms = fields.dead_at
    return counts
