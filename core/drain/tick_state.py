"""What one tick's drain learns on the way (`TickState`): its figures, and what its later
batches must know about its earlier ones. The tick (`core.drain.queue_drain`) and its batches
(`core.drain.batches`) share one, so each fact has one place.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog

from core.drain.rules.drain_plan import BatchPlan, DrainStats, Parsed
from core.drain.rules.queue_lines import MalformedLine, position_id

#: The drain's one logger name for every module of the package, so a filter on the logger
#: sees all of the drain's lines.
log = structlog.get_logger(__package__)

#: How many malformed lines are quoted in the log per tick (all are dead-lettered).
MALFORMED_LOGGED = 10


@dataclass(slots=True)
class TickState:
    """One tick's figures and memory, from its first batch to its last."""

    #: When the tick started: lines re-queued since are deferred (`Known`).
    started_ms: int
    stats: DrainStats = field(default_factory=DrainStats)
    malformed_examples: list[dict[str, Any]] = field(default_factory=list)
    #: Positions whose dead letters are in the file but not yet behind a committed offset
    #: (found on recovery, or written by a batch whose commit failed): never a second
    #: record for one of them. Bounded by a batch: a commit forgets what it settled.
    dead_written: set[str] = field(default_factory=set)
    drain_tables: bool = True
    #: The dead-letter file's size after our last append, recorded with each commit.
    dead_letters_size: int = 0
    #: The segment of the last commit (the first commit of another forgets the rest).
    current_segment: str | None = None
    #: Whose segments these are: '' for a SQLite file (one drainer per file), else
    #: the id kept beside the queue (`core.drain.stores.drainer_identity`), read under the lock.
    drainer: str = ""

    def account(self, plan: BatchPlan, parsed: Sequence[Parsed], segment: str) -> None:
        """Add a written batch's figures to the tick's and remember what later batches of the
        tick must know."""
        self.stats = self.stats.added(plan)
        if plan.malformed and len(self.malformed_examples) < MALFORMED_LOGGED:
            for item in parsed:
                if isinstance(item.line, MalformedLine):
                    self.malformed_examples.append({"readAt": position_id(segment,
                                                                          item.read.offset),
                                                    "detail": item.line.detail[:200]})
                    if len(self.malformed_examples) >= MALFORMED_LOGGED:
                        break

    def log_malformed(self, dead_letter_path: Path) -> None:
        """One warning per tick naming a few malformed lines (all are in the dead letters)."""
        if self.malformed_examples:
            log.warning("drain.malformed_lines", count=self.stats.skipped_malformed,
                        examples=self.malformed_examples,
                        deadLetterFile=str(dead_letter_path))
