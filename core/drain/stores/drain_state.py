"""The drainer's own tables: each segment's committed offset and the re-queue tokens.

Identity is by position (`core.drain.rules.queue_lines`): a line is (segment, byte offset), so
exactly-once needs one row per `.draining` file in flight, written in the same transaction as
the batch's nodes and edges, plus one row per line waiting in the queue for another try. The
writes here take the batch's `Transaction`; nothing is kept per applied line.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

import orjson

from core.base.state.graph_db import Reader, Transaction

#: The table of re-queue tokens (a dry run on an older file may find it missing).
TOKENS_TABLE = "drain_requeued"


async def table_exists(reader: Reader, table: str) -> bool:
    """Whether `table` exists in the file."""
    return bool(await reader.query(reader.sql.table_exists, (table,)))


async def progress(reader: Reader, segment: str) -> tuple[int | None, int | None]:
    """A segment's committed offset and the dead-letter file's size at that commit, or
    (None, None) when nothing of it was committed."""
    rows = await reader.query(reader.sql.progress, (segment,))
    return (int(rows[0][0]), int(rows[0][1])) if rows else (None, None)


async def commit_offset(tx: Transaction, segment: str, *, offset: int,
                        dead_letters_size: int, now_ms: int, first_of_segment: bool,
                        drainer: str) -> None:
    """Record that every line of `segment` before `offset` has taken effect, with the
    dead-letter file's size after the batch. The first commit of a segment tags it with
    `drainer` and forgets that drainer's other segments: one drainer has one `.draining`
    at a time, so their files are gone; another drainer's rows (another host's, on a shared
    PostgreSQL state) are never touched."""
    await tx.execute(tx.sql.commit_offset, (segment, offset, dead_letters_size, now_ms))
    if first_of_segment:
        await tx.execute(tx.sql.forget_other_segments, (segment, drainer))


async def outstanding_tokens(
    reader: Reader, line_ids: Collection[str]
) -> dict[str, tuple[int, int]]:
    """The outstanding tokens among `line_ids`: lineId -> (attempts, issued at, epoch ms)."""
    if not line_ids:
        return {}
    rows = await reader.query(reader.sql.outstanding_tokens,
                              (orjson.dumps(list(line_ids)).decode(),))
    return {str(r[0]): (int(r[1]), int(r[2])) for r in rows}


async def use_tokens(tx: Transaction, line_ids: Sequence[str]) -> None:
    """Use up the tokens of lines settled in this transaction."""
    if line_ids:
        await tx.executemany(tx.sql.use_token, [(t,) for t in line_ids])


async def issue_tokens(tx: Transaction, tokens: Sequence[tuple[str, int]], *, now_ms: int) -> None:
    """Issue (lineId, attempts) tokens for lines re-queued in this transaction."""
    if tokens:
        await tx.executemany(tx.sql.issue_token, [(line_id, n, now_ms) for line_id, n in tokens])

