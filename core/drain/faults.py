"""The drain's failure policy: telling an outage from a batch's bad data, and isolating the one
line that fails alone.

The policy is the package's "no line can stop the queue" (`core.drain`): an outage fails the
tick and spends nothing; a batch that fails otherwise BATCH_TRIES times is split until the
failing line is alone, and that line is dead-lettered `unprocessable` after ISOLATION_TRIES.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

import structlog

from core.base.chroma import (
    CollectionMissing,
    VectorStore,
    VectorStoreError,
    refused_for_its_data,
)
from core.base.rules.errors import LockHeld, StoreUnavailable
from core.drain.rules.dead_letters import dead_letter_record
from core.drain.rules.drain_plan import BatchPlan, DeadLetter
from core.drain.rules.queue_lines import UNPROCESSABLE, EdgeLine, ReadLine, parse_line, position_id

log = structlog.get_logger(__name__)

#: Tries of a batch before it is split (the split halves get one each).
BATCH_TRIES = 2
#: Tries of a line alone before it is dead-lettered `unprocessable`, ISOLATION_BACKOFF_S times
#: the try number apart, so a store that flaps cannot get a good line dead-lettered.
ISOLATION_TRIES = 3
ISOLATION_BACKOFF_S = 0.2
#: The id asked of Chroma to tell an outage from a request that failed on its data.
PROBE_ID = "kb-daemons-probe"
#: How much of an isolated line's error goes into its dead letter.
ISOLATED_DETAIL_CHARS = 500


async def is_outage(exc: Exception, vectors: VectorStore, collections: Sequence[str]) -> bool:
    """Whether `exc` says a store is unavailable rather than that a batch's data made a call
    fail (how each store is told: see `core.drain`); `collections` are asked the harmless
    question."""
    if isinstance(exc, VectorStoreError):
        return not (refused_for_its_data(exc) and await _chroma_answers(vectors, collections))
    return isinstance(exc, (StoreUnavailable, LockHeld, OSError))


async def _chroma_answers(vectors: VectorStore, collections: Sequence[str]) -> bool:
    """Whether every collection answers a harmless `get` (a missing one counts as answering:
    the store is up)."""
    for collection in collections:
        try:
            await vectors.get_by_ids(collection, [PROBE_ID])
        except CollectionMissing:
            continue
        except Exception:
            return False
    return True


def isolation_plan(segment: str, read: ReadLine, error: Exception, *,
                   already_dead: Collection[str], now_ms: int) -> BatchPlan:
    """The plan that settles a line that fails alone: one `unprocessable` dead letter (none
    when `already_dead` holds its position), and its re-queue token used up. Logs it."""
    read_at = position_id(segment, read.offset)
    line_id, attempts, token = read_at, 0, None
    try:
        parsed = parse_line(read.raw) if read.spilled is None else None
    except Exception:  # the parser itself may be what fails
        parsed = None
    if isinstance(parsed, EdgeLine):
        attempts, token = parsed.attempts, parsed.token_id
        line_id = token or read_at
    detail = f"{type(error).__name__}: {error}"[:ISOLATED_DETAIL_CHARS]
    log.error("drain.line_isolated", readAt=read_at, lineId=line_id, error=detail)
    plan = BatchPlan(total_lines=1, processed=1)
    if read_at in already_dead:
        plan.already_dead = 1
    else:
        plan.dead_letters.append(DeadLetter(read_at, dead_letter_record(
            line_id=line_id, read_at=read_at, reason=UNPROCESSABLE, detail=detail,
            attempts=attempts, now_ms=now_ms, line=read.raw, spilled=read.spilled)))
    if token is not None:
        plan.tokens_consumed.append(token)
    return plan
