"""Lazy-edge queue lines (pure): parsing, identity, and the records the drainer writes back.

A line is one JSON object: `source`, `target`, `relationship` (non-empty strings of at most
1,024 characters), an optional finite `weight` (default 1.0), and any other keys, which become
edge properties (`justification`, `timestamp`, ...). The drainer adds one reserved key, `_drain`,
when it puts a failed line back: `{attempts, lineId, lastReason, lastAttemptAt}`. It is never
an edge property.

Everything else is `malformed`: bad UTF-8, bad JSON (NaN and Infinity included), a value that
is not an object, a missing or empty field, a non-numeric or non-finite weight, an over-long id,
a line over MAX_LINE_BYTES. Malformed lines are dead-lettered at once, never retried.

A line's identity (`lineId`) is the SHA-256 of its bytes, carried along in `_drain.lineId` when
it is re-queued, so that a line takes effect once even when a crash replays it, and a producer
that retries an append cannot apply the same line twice.
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from core.ids import normalize_graph_node_id

#: Longest id or relationship accepted; longer ones are malformed (they are not real ids, and
#: they would bloat every index they touch).
MAX_FIELD_CHARS = 1_024
#: Longest line accepted (1 MiB). Real edge lines are a few hundred bytes; a bigger one is a
#: producer bug, and parsing it would cost memory for nothing.
MAX_LINE_BYTES = 1 << 20
#: The reserved key the drainer uses for its bookkeeping on re-queued lines.
DRAIN_KEY = "_drain"
#: The dead-letter reason of every line that cannot be parsed (CONTRACT).
MALFORMED = "malformed"
#: Keys of a line that are not edge properties.
EDGE_FIELDS = frozenset({"source", "target", "relationship", "weight", DRAIN_KEY})


@dataclass(frozen=True, slots=True)
class EdgeLine:
    """A valid queue line: the edge it asks for and its drain bookkeeping."""

    line_id: str
    source: str
    target: str
    relationship: str
    weight: float
    properties: Mapping[str, Any]
    attempts: int
    #: The line as an object (with any `_drain` removed), to re-queue or dead-letter it.
    body: Mapping[str, Any]
    #: The line's bytes as read, to put back unchanged when it is deferred.
    raw: bytes = b""


@dataclass(frozen=True, slots=True)
class MalformedLine:
    """A line that can never apply, and why (for the dead-letter record)."""

    line_id: str
    detail: str
    raw: bytes


def line_id_of(raw: bytes) -> str:
    """The identity of a line that carries none yet: the SHA-256 of its bytes."""
    return hashlib.sha256(raw).hexdigest()


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


#: One decoder for every line: `json.loads` with any keyword builds a new decoder per call,
#: which was a sixth of the parse time of a 50,000-line drain (measured).
_DECODER = json.JSONDecoder(parse_constant=_reject_constant)
_BOM = "\ufeff"


def _decode_json(text: str) -> Any:
    """`json.loads(text, parse_constant=_reject_constant)`, errors included, on one decoder."""
    if text[:1] == "{":
        # The common case: no leading whitespace, so `raw_decode` at 0 is what `decode` does
        # (same value, same errors) minus its two whitespace scans. Anything after the
        # object is left to `decode`, which says "Extra data" when it is not whitespace.
        value, end = _DECODER.raw_decode(text)
        if end == len(text):
            return value
    if text.startswith(_BOM):
        raise json.JSONDecodeError("Unexpected UTF-8 BOM (decode using utf-8-sig)", text, 0)
    return _DECODER.decode(text)


def parse_line(raw: bytes) -> EdgeLine | MalformedLine:
    """Parse one line (without its newline) into an edge or a malformed record; never raises."""
    raw = raw.rstrip(b"\r\n")
    own_id = line_id_of(raw)
    if len(raw) > MAX_LINE_BYTES:
        return MalformedLine(own_id, f"line is {len(raw)} bytes (limit {MAX_LINE_BYTES})", raw)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        return MalformedLine(own_id, f"invalid UTF-8 at byte {exc.start}", raw)
    try:
        value = _decode_json(text)
    except RecursionError:
        return MalformedLine(own_id, "JSON nested too deeply", raw)
    except ValueError as exc:
        return MalformedLine(own_id, f"invalid JSON: {exc}", raw)
    if not isinstance(value, dict):
        return MalformedLine(own_id, f"a line must be a JSON object, got {_json_type(value)}",
                             raw)
    problem = _field_problem(value)
    if problem is not None:
        return MalformedLine(own_id, problem, raw)

    drain = value.get(DRAIN_KEY)
    attempts = 0
    line_id = own_id
    if isinstance(drain, dict):
        if isinstance(drain.get("lineId"), str) and drain["lineId"]:
            line_id = drain["lineId"]
        if isinstance(drain.get("attempts"), int) and not isinstance(drain["attempts"], bool):
            attempts = max(0, drain["attempts"])
    # `value` is this call's own fresh dict: it becomes the body as is unless it carries the
    # drain's bookkeeping.
    body = {k: v for k, v in value.items() if k != DRAIN_KEY} if DRAIN_KEY in value else value
    weight = body.get("weight", 1.0)
    return EdgeLine(
        line_id=line_id,
        source=normalize_graph_node_id(body["source"]),
        target=normalize_graph_node_id(body["target"]),
        relationship=body["relationship"],
        weight=float(weight),
        properties={k: v for k, v in body.items() if k not in EDGE_FIELDS},
        attempts=attempts,
        body=body,
        raw=raw,
    )


def _field_problem(value: Mapping[str, Any]) -> str | None:
    for name in ("source", "target", "relationship"):
        field = value.get(name)
        if name not in value:
            return f"missing {name}"
        if not isinstance(field, str):
            return f"{name} must be a string, got {_json_type(field)}"
        if not field.strip():
            return f"{name} is empty"
        if len(field) > MAX_FIELD_CHARS:
            return f"{name} is {len(field)} characters (limit {MAX_FIELD_CHARS})"
    if "weight" in value:
        weight = value["weight"]
        if isinstance(weight, bool) or not isinstance(weight, (int, float)):
            return f"weight must be a number, got {_json_type(weight)}"
        try:
            if not math.isfinite(float(weight)):
                return "weight must be finite"
        except OverflowError:
            return "weight must be finite"
    return None


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def _compact(value: Mapping[str, Any]) -> bytes:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def requeue_line(line: EdgeLine, *, reason: str, now_ms: int) -> bytes:
    """The line to put back on the queue after a failed attempt (no trailing newline)."""
    drain = {"attempts": line.attempts + 1, "lineId": line.line_id, "lastReason": reason,
             "lastAttemptAt": now_ms}
    return _compact({**line.body, DRAIN_KEY: drain})


def dead_letter_record(
    *, line_id: str, reason: str, detail: str, raw: bytes, attempts: int, now_ms: int
) -> bytes:
    """A dead-letter JSON line: why, when, and the line itself (as text, or base64 when its
    bytes are not UTF-8), so an operator can fix and re-enqueue it."""
    record: dict[str, Any] = {"deadAt": now_ms, "reason": reason, "detail": detail,
                              "attempts": attempts, "lineId": line_id}
    try:
        record["line"] = raw.decode("utf-8")
    except UnicodeDecodeError:
        record["lineBase64"] = base64.b64encode(raw).decode("ascii")
    return _compact(record)
