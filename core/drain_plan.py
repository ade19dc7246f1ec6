"""The drainer's per-line decisions (pure): what happens to each line of a batch.

No I/O and no clock here (the time comes in as an argument). The drainer (`core.drain`) reads a
batch, asks the stores a few bulk questions, and calls these in turn:

1. `parse_batch`: every read line parsed (blank lines dropped), with its position.
2. `triage`, given what the stores and this tick already know (`Known`): a copy of a
   re-queued line whose token is not outstanding is a duplicate left by a crash (skipped); a
   line that already failed earlier in this tick is deferred (put back untouched: a tick spends
   at most one attempt per line); a line whose dead letter a crashed attempt already wrote
   keeps that record (never a second one); a line that earlier versions of the drainer already
   settled is a replay (skipped); a malformed line is dead-lettered; the rest is work.
3. `decide`, given which endpoints cannot be resolved and why: each work line is linked,
   re-queued with one more attempt, or dead-lettered after its last.

The result is a `BatchPlan`: everything to write, in one place, so the writer can make it
durable in the order that makes a crash harmless (see `core.drain`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field

import orjson

from core.lazy_queue import ReadLine
from core.nodes import EdgeRow
from core.queue_lines import (
    MALFORMED,
    MAX_LINE_BYTES,
    EdgeLine,
    MalformedLine,
    dead_letter_record,
    parse_line,
    position_id,
    requeue_line,
)

#: The reason of a line whose endpoint the back-fill did not report on at all (a defensive
#: default: every endpoint asked about gets a reason).
ENDPOINT_MISSING = "endpoint-missing"


@dataclass(slots=True)
class Parsed:
    """A non-blank read line, parsed, with its identity in this generation."""

    read_at: str
    read: ReadLine
    line: EdgeLine | MalformedLine


def parse_batch(generation: str, lines: Sequence[ReadLine]) -> list[Parsed]:
    """Parse every non-blank line; an over-limit (spilled) line is malformed without a parse."""
    parsed: list[Parsed] = []
    for read in lines:
        raw = read.raw
        if read.spilled is not None:
            size = read.spilled.size
            parsed.append(Parsed(position_id(generation, read.offset), read, MalformedLine(
                f"line is {size} bytes (limit {MAX_LINE_BYTES}); its bytes are kept in the "
                "dead-letter folder", b"")))
            continue
        if raw[:1] != b"{" and not raw.strip():
            continue
        parsed.append(Parsed(position_id(generation, read.offset), read, parse_line(raw)))
    return parsed


def legacy_id_of(item: Parsed, *, legacy_file: bool) -> str | None:
    """The identity an earlier version gave this line (the SHA-256 of its bytes, or the one it
    carried in `_drain.lineId`), when that version may have settled it: every line of a
    `.draining` it left behind, and lines it re-queued. None otherwise."""
    line = item.line
    if isinstance(line, EdgeLine) and line.legacy_id is not None:
        return line.legacy_id
    if legacy_file and item.read.spilled is None:
        return hashlib.sha256(line.raw).hexdigest()
    return None


@dataclass(frozen=True, slots=True)
class Known:
    """What the stores and this tick know about a batch's lines, read before deciding."""

    #: Outstanding re-queue tokens of the batch's re-queued lines: lineId -> attempts.
    outstanding: Mapping[str, int] = field(default_factory=dict)
    #: Identities (lineId) of lines that failed earlier in this tick.
    failed_this_tick: Collection[str] = frozenset()
    #: Positions (readAt) whose dead letter is already in the file (a crashed attempt, or a
    #: failed commit of this tick, wrote it).
    dead_written: Collection[str] = frozenset()
    #: Legacy identities already settled (by an earlier version, or earlier in this tick).
    legacy_settled: Collection[str] = frozenset()
    #: Whether this generation is a `.draining` an earlier version left (identity by content).
    legacy_file: bool = False


@dataclass(slots=True)
class WorkLine:
    """A valid line to act on: where it was read, its identity, the edge."""

    read_at: str
    line_id: str
    line: EdgeLine
    #: Its legacy identity, recorded as settled when it is (migration only).
    legacy_id: str | None = None


@dataclass(slots=True)
class DeadLetter:
    """A record for the dead-letter file, and the position it settles."""

    read_at: str
    record: bytes


@dataclass(slots=True)
class BatchPlan:
    """Everything one batch writes, and its figures."""

    links: list[EdgeRow] = field(default_factory=list)
    dead_letters: list[DeadLetter] = field(default_factory=list)
    #: Lines for the live queue: re-queued ones (with one more attempt) and deferred ones.
    requeue: list[bytes] = field(default_factory=list)
    #: New tokens (lineId, attempts) of the re-queued lines.
    tokens_issued: list[tuple[str, int]] = field(default_factory=list)
    #: Tokens used up by lines settled in this batch.
    tokens_consumed: list[str] = field(default_factory=list)
    #: Legacy identities settled here, with their outcome (migration only).
    legacy_settled: list[tuple[str, str]] = field(default_factory=list)
    #: Identities of the lines that failed in this batch (re-queued or dead after attempts).
    failed: list[str] = field(default_factory=list)
    total_lines: int = 0
    processed: int = 0
    succeeded: int = 0
    requeued: int = 0
    dead_after_attempts: int = 0
    malformed: int = 0
    already_dead: int = 0
    replayed: int = 0
    duplicates: int = 0
    deferred: int = 0


@dataclass(slots=True)
class Triage:
    """The batch sorted before resolution: work to resolve, and a plan of the rest."""

    work: list[WorkLine]
    plan: BatchPlan


def triage(parsed: Sequence[Parsed], known: Known, *, now_ms: int) -> Triage:
    """Sort parsed lines (see the module docstring); malformed lines get their dead letters."""
    plan = BatchPlan(total_lines=len(parsed))
    work: list[WorkLine] = []
    tokens_seen: set[str] = set()
    legacy_seen: set[str] = set()
    for item in parsed:
        line = item.line
        legacy_id = legacy_id_of(item, legacy_file=known.legacy_file)
        if legacy_id is not None and (legacy_id in known.legacy_settled
                                      or legacy_id in legacy_seen):
            plan.replayed += 1
            continue
        token = line.token_id if isinstance(line, EdgeLine) else None
        if token is not None:
            assert isinstance(line, EdgeLine)
            if token in tokens_seen or known.outstanding.get(token) != line.attempts:
                plan.duplicates += 1  # a copy a crash left behind; its token is used up
                continue
            tokens_seen.add(token)
            if token in known.failed_this_tick:
                plan.deferred += 1
                plan.requeue.append(line.raw)
                continue
        if legacy_id is not None:
            legacy_seen.add(legacy_id)
        if item.read_at in known.dead_written:
            plan.already_dead += 1
            plan.processed += 1
            if token is not None:
                plan.tokens_consumed.append(token)
            if legacy_id is not None:
                plan.legacy_settled.append((legacy_id, "dead"))
            continue
        if isinstance(line, MalformedLine):
            plan.malformed += 1
            plan.processed += 1
            plan.dead_letters.append(DeadLetter(item.read_at, dead_letter_record(
                line_id=item.read_at, read_at=item.read_at, reason=MALFORMED,
                detail=line.detail, attempts=0, now_ms=now_ms, line=line.raw,
                spilled=item.read.spilled)))
            if legacy_id is not None:
                plan.legacy_settled.append((legacy_id, "dead"))
            continue
        work.append(WorkLine(item.read_at, token or item.read_at, line, legacy_id))
    return Triage(work, plan)


def endpoints_of(work: Sequence[WorkLine]) -> list[str]:
    """The distinct endpoints the work lines need, in order."""
    return list(dict.fromkeys(n for w in work for n in (w.line.source, w.line.target)))


def decide(
    triaged: Triage, unresolved: Mapping[str, str], *, max_attempts: int, now_ms: int
) -> BatchPlan:
    """Settle each work line: linked when both endpoints resolve, else re-queued with one more
    attempt, or dead-lettered once `max_attempts` tries failed. `unresolved` maps each
    endpoint that does not resolve to its reason (the back-fill's)."""
    plan = triaged.plan
    links = plan.links
    for work in triaged.work:
        line = work.line
        token = line.token_id
        plan.processed += 1
        if line.source not in unresolved and line.target not in unresolved:
            links.append(EdgeRow(line.source, line.target, line.relationship, line.weight,
                                 line.properties))
            if token is not None:
                plan.tokens_consumed.append(token)
            if work.legacy_id is not None:
                plan.legacy_settled.append((work.legacy_id, "applied"))
            continue
        missing = [n for n in (line.source, line.target) if n in unresolved]
        reason = unresolved[missing[0]]
        plan.failed.append(work.line_id)
        if line.attempts + 1 >= max_attempts:
            plan.dead_after_attempts += 1
            plan.dead_letters.append(DeadLetter(work.read_at, dead_letter_record(
                line_id=work.line_id, read_at=work.read_at, reason=reason,
                detail=f"unresolved: {missing}", attempts=line.attempts + 1, now_ms=now_ms,
                line=_body_bytes(line))))
            if token is not None:
                plan.tokens_consumed.append(token)
            outcome = "dead"
        else:
            plan.requeued += 1
            plan.requeue.append(requeue_line(line, line_id=work.line_id, reason=reason,
                                             now_ms=now_ms))
            plan.tokens_issued.append((work.line_id, line.attempts + 1))
            outcome = "requeued"
        if work.legacy_id is not None:
            plan.legacy_settled.append((work.legacy_id, outcome))
    plan.succeeded = len(links)
    return plan


def _body_bytes(line: EdgeLine) -> bytes:
    """The line as its producer wrote it (without `_drain`): bytes as read when it carried no
    bookkeeping, re-serialized otherwise."""
    return orjson.dumps(line.body) if line.had_drain_key else line.raw
