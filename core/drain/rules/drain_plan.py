"""The drainer's per-line decisions (pure): what happens to each line of a batch.

The drainer (`core.drain`) reads a batch, asks the stores a few bulk questions, and calls:

1. `parse_batch`: every read line parsed (blank lines dropped), with its position.
2. `triage`, given what the stores and this tick already know (`Known`): a copy of a
   re-queued line whose token is not outstanding is a duplicate left by a crash (skipped); a
   line that already failed in this tick is deferred (put back untouched: a tick spends at
   most one attempt per line); a line whose dead letter a crashed attempt already wrote keeps
   that record; a malformed line is dead-lettered; the rest is work.
3. `decide`, given which endpoints cannot be resolved and why: each work line is linked,
   re-queued with one more attempt, or dead-lettered after its last.

The result is a `BatchPlan`: everything to write, for the writer to make durable in the order
that makes a crash harmless (see `core.drain`).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace

from core.base.rules.nodes import EdgeLike
from core.drain.rules.dead_letters import dead_letter_record
from core.drain.rules.queue_lines import (
    MALFORMED,
    MAX_LINE_BYTES,
    EdgeLine,
    MalformedLine,
    ReadLine,
    json_line,
    parse_line,
    position_id,
    requeue_line,
)

#: The reason of a line whose endpoint the back-fill did not report on (a defensive default).
ENDPOINT_MISSING = "endpoint-missing"


@dataclass(slots=True)
class Parsed:
    """A non-blank read line, parsed (its position: `read.offset` in the batch's segment)."""

    read: ReadLine
    line: EdgeLine | MalformedLine


def parse_batch(lines: Sequence[ReadLine]) -> list[Parsed]:
    """Parse every non-blank line; an over-limit (spilled) line is malformed without a parse."""
    parsed: list[Parsed] = []
    for read in lines:
        raw = read.raw
        if read.spilled is not None:
            parsed.append(Parsed(read, MalformedLine(
                f"line is {read.spilled.size} bytes (limit {MAX_LINE_BYTES}); its bytes are "
                "kept in the dead-letter folder", b"")))
        elif raw[:1] == b"{" or raw.strip():
            parsed.append(Parsed(read, parse_line(raw)))
    return parsed


@dataclass(frozen=True, slots=True)
class Known:
    """What the stores and this tick know about a batch's lines, read before deciding."""

    #: Outstanding re-queue tokens: lineId -> (attempts, issued at epoch ms).
    outstanding: Mapping[str, tuple[int, int]] = field(default_factory=dict)
    #: When this tick started (epoch ms): a token issued since means the line failed in it.
    tick_started_ms: int = 0
    #: Positions (readAt) whose dead letter an uncommitted attempt already wrote.
    dead_written: Collection[str] = frozenset()


@dataclass(slots=True)
class DeadLetter:
    """A record for the dead-letter file, and the position it settles."""

    read_at: str
    record: bytes


@dataclass(slots=True)
class BatchPlan:
    """Everything one batch writes, and its figures."""

    #: The lines to link, as parsed (an `EdgeLine` has an edge's fields).
    links: list[EdgeLike] = field(default_factory=list)
    dead_letters: list[DeadLetter] = field(default_factory=list)
    #: Lines for the live queue: re-queued ones (with one more attempt) and deferred ones.
    requeue: list[bytes] = field(default_factory=list)
    #: New tokens (lineId, attempts) of the re-queued lines.
    tokens_issued: list[tuple[str, int]] = field(default_factory=list)
    #: Tokens used up by lines settled in this batch.
    tokens_consumed: list[str] = field(default_factory=list)
    total_lines: int = 0
    processed: int = 0
    succeeded: int = 0
    requeued: int = 0
    dead_after_attempts: int = 0
    malformed: int = 0
    already_dead: int = 0
    duplicates: int = 0
    deferred: int = 0


@dataclass(slots=True)
class Triage:
    """The batch sorted before resolution: the work lines to resolve, and a plan of the rest."""

    segment: str
    work: list[Parsed]
    plan: BatchPlan
    #: The distinct endpoints of the work lines, in order (the keys; values unused).
    endpoints: dict[str, None] = field(default_factory=dict)


def triage(segment: str, parsed: Sequence[Parsed], known: Known, *, now_ms: int) -> Triage:
    """Sort parsed lines (see the module docstring); malformed lines get their dead letters."""
    plan = BatchPlan(total_lines=len(parsed))
    triaged = Triage(segment, [], plan)
    work, endpoints = triaged.work, triaged.endpoints
    tokens_seen: set[str] = set()
    dead_written = known.dead_written
    for item in parsed:
        line = item.line
        # The common case: a new valid line is work at once.
        if not dead_written and type(line) is EdgeLine and line.token_id is None:
            work.append(item)
            endpoints[line.source] = None
            endpoints[line.target] = None
            continue
        token = line.token_id if type(line) is EdgeLine else None
        if token is not None:
            assert type(line) is EdgeLine
            issued = known.outstanding.get(token)
            if token in tokens_seen or issued is None or issued[0] != line.attempts:
                plan.duplicates += 1  # a copy a crash left behind; its token is used up
                continue
            tokens_seen.add(token)
            if issued[1] >= known.tick_started_ms:
                plan.deferred += 1
                plan.requeue.append(line.raw)
                continue
        if dead_written and position_id(segment, item.read.offset) in dead_written:
            plan.already_dead += 1
            plan.processed += 1
            if token is not None:
                plan.tokens_consumed.append(token)
            continue
        if isinstance(line, MalformedLine):
            _dead_letter_malformed(triaged, item, line, now_ms=now_ms)
            continue
        work.append(item)
        endpoints[line.source] = None
        endpoints[line.target] = None
    return triaged


def _dead_letter_malformed(triaged: Triage, item: Parsed, line: MalformedLine, *,
                           now_ms: int) -> None:
    """A malformed line's dead letter (it is never retried)."""
    plan = triaged.plan
    read_at = position_id(triaged.segment, item.read.offset)
    plan.malformed += 1
    plan.processed += 1
    plan.dead_letters.append(DeadLetter(read_at, dead_letter_record(
        line_id=read_at, read_at=read_at, reason=MALFORMED, detail=line.detail,
        attempts=0, now_ms=now_ms, line=line.raw, spilled=item.read.spilled)))


def decide(
    triaged: Triage, unresolved: Mapping[str, str], *, max_attempts: int, now_ms: int
) -> BatchPlan:
    """Settle each work line: linked when both endpoints resolve, else re-queued, or
    dead-lettered after `max_attempts`. `unresolved` maps an endpoint to its reason."""
    plan = triaged.plan
    links = plan.links
    for item in triaged.work:
        line = item.line
        assert type(line) is EdgeLine
        source, target, token = line.source, line.target, line.token_id
        if source not in unresolved and target not in unresolved:
            links.append(line)
            if token is not None:
                plan.tokens_consumed.append(token)
            continue
        _settle_failure(triaged, item, line, unresolved, max_attempts=max_attempts,
                        now_ms=now_ms)
    plan.processed += len(triaged.work)
    plan.succeeded = len(links)
    return plan


def _settle_failure(triaged: Triage, item: Parsed, line: EdgeLine, unresolved: Mapping[str, str],
                    *, max_attempts: int, now_ms: int) -> None:
    """A line whose endpoints do not all resolve: re-queued, or dead after its last try."""
    plan = triaged.plan
    read_at = position_id(triaged.segment, item.read.offset)
    line_id = line.token_id or read_at
    missing = [n for n in (line.source, line.target) if n in unresolved]
    reason = unresolved[missing[0]]
    if line.attempts + 1 >= max_attempts:
        plan.dead_after_attempts += 1
        plan.dead_letters.append(DeadLetter(read_at, dead_letter_record(
            line_id=line_id, read_at=read_at, reason=reason, detail=f"unresolved: {missing}",
            attempts=line.attempts + 1, now_ms=now_ms, line=_body_bytes(line))))
        if line.token_id is not None:
            plan.tokens_consumed.append(line.token_id)
    else:
        plan.requeued += 1
        plan.requeue.append(requeue_line(line, line_id=line_id, reason=reason, now_ms=now_ms))
        plan.tokens_issued.append((line_id, line.attempts + 1))


def _body_bytes(line: EdgeLine) -> bytes:
    """The line as its producer wrote it (without `_drain`)."""
    return json_line(line.body) if line.had_drain_key else line.raw


@dataclass(frozen=True, slots=True)
class DrainStats:
    """Figures of one drain.

    The drain's `--json` figures: `totalLines` non-blank lines read; `processed` those acted
    on (not duplicates or deferred lines); `succeeded` edges linked; `failed` lines whose
    endpoints did not resolve (`requeued` + dead after their last attempt); `deadLettered`
    every line settled in the dead-letter file (`skippedMalformed`, `isolated` included);
    `isolated` lines dead-lettered `unprocessable`; `duplicates` copies of re-queued lines
    left by a crash; `replayed` always 0 (identity is by position); `deferred` lines that
    already failed in this tick, put back untouched.
    """

    total_lines: int = 0
    processed: int = 0
    succeeded: int = 0
    failed: int = 0
    requeued: int = 0
    dead_lettered: int = 0
    skipped_malformed: int = 0
    isolated: int = 0
    replayed: int = 0
    duplicates: int = 0
    deferred: int = 0
    late_lines_handed_back: int = 0
    interrupted: bool = False
    queue_rotated: bool = False
    orphan_recovered: bool = False
    duration_ms: int = 0

    def added(self, plan: BatchPlan) -> DrainStats:
        """These figures with a written batch's added."""
        return replace(
            self,
            total_lines=self.total_lines + plan.total_lines,
            processed=self.processed + plan.processed,
            succeeded=self.succeeded + plan.succeeded,
            requeued=self.requeued + plan.requeued,
            failed=self.failed + plan.requeued + plan.dead_after_attempts,
            dead_lettered=self.dead_lettered + len(plan.dead_letters) + plan.already_dead,
            skipped_malformed=self.skipped_malformed + plan.malformed,
            duplicates=self.duplicates + plan.duplicates,
            deferred=self.deferred + plan.deferred,
        )
