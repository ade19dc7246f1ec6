"""The dead-letter file's records (pure): written here, and read here only.

`<queue>.dead.jsonl` holds one JSON record per line that will not apply (README "Dead letters",
field by field): `deadAt`, `reason`, `detail`, `attempts`, `lineId` (the line's identity: where
it was first read), `readAt` (where it was read when it died: one record per `readAt`, ever),
and the line itself: `line` (text, without `_drain`), `lineBase64` (bytes that are not UTF-8),
or for an over-limit line `lineFile`, `lineBytes`, `lineSha256` (its bytes went to a side
file). The drainer writes them (`dead_letter_record`); status, metrics and the drainer's
recovery read them (`parse_dead_letter`).
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Any

import orjson

from core.base.rules.numbers import is_whole_number
from core.drain.rules.queue_lines import MAX_LINE_BYTES, SpilledBytes, json_line

#: The reason shown for a dead-letter line that is not a readable record (a torn write).
UNREADABLE = "unreadable"
#: The longest dead-letter record read back: a record quotes a line of at most MAX_LINE_BYTES,
#: which JSON escaping can grow six-fold (control bytes become `\u00XX`).
DEAD_LETTER_RECORD_LIMIT = 8 * MAX_LINE_BYTES


def dead_letter_record(
    *,
    line_id: str,
    read_at: str,
    reason: str,
    detail: str,
    attempts: int,
    now_ms: int,
    line: bytes = b"",
    spilled: SpilledBytes | None = None,
) -> bytes:
    """A dead-letter JSON line (no trailing newline). Fields (README "Dead letters"):
    `deadAt`, `reason`, `detail`, `attempts`, `lineId` (the line's identity: where it was
    first read), `readAt` (where it was read when it died: one record per `readAt`, ever),
    and the line itself: `line` (text, without `_drain`), `lineBase64` (bytes that are not
    UTF-8), or for an over-limit line `lineFile`, `lineBytes`, `lineSha256`."""
    record: dict[str, Any] = {"deadAt": now_ms, "reason": reason, "detail": detail,
                              "attempts": attempts, "lineId": line_id, "readAt": read_at}
    if spilled is not None:
        record.update(lineFile=spilled.file, lineBytes=spilled.size, lineSha256=spilled.sha256)
    else:
        try:
            record["line"] = line.decode("utf-8")
        except UnicodeDecodeError:
            record["lineBase64"] = base64.b64encode(line).decode("ascii")
    return json_line(record)


@dataclass(frozen=True, slots=True)
class DeadLetterFields:
    """What readers of a record need: why it died, when, and where it was read."""

    #: The record's `reason`, or UNREADABLE for a line that is not a readable record.
    reason: str
    #: `deadAt` (epoch ms) when it is an integer.
    dead_at: int | None = None
    #: `readAt` when it is a string.
    read_at: str | None = None


def parse_dead_letter(raw: bytes | None) -> DeadLetterFields:
    """The fields of one record (None: a line too long to read is unreadable too)."""
    if raw is None:
        return DeadLetterFields(UNREADABLE)
    try:
        record: Any = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return DeadLetterFields(UNREADABLE)
    if not isinstance(record, dict):
        return DeadLetterFields(UNREADABLE)
    reason, dead_at, read_at = record.get("reason"), record.get("deadAt"), record.get("readAt")
    return DeadLetterFields(
        reason if isinstance(reason, str) and reason else UNREADABLE,
        dead_at if is_whole_number(dead_at) else None,
        read_at if isinstance(read_at, str) else None,
    )


def read_at_marker(segment: str) -> bytes:
    """Bytes every record of `segment` contains (a quick filter before parsing a line)."""
    return b'"readAt":"' + segment.encode() + b":"
