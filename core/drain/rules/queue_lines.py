"""Lazy-edge queue lines (pure): parsing, identities, and the records the drainer writes back.

A line is one JSON object: `source`, `target`, `relationship` (non-empty strings of at most
1,024 characters, without NUL), an optional `weight` (a number within ±WEIGHT_LIMIT; absent or
0 links at 1.0, as the original's `edge.weight || 1.0`), and any other keys, which become edge
properties (`justification`, `timestamp`, ...). The drainer adds one reserved
key, `_drain`, when it puts a failed line back: `{lineId, attempts, lastReason,
lastAttemptAt}`. It is never an edge property, and producers strip it (`strip_drain_key`):
every line a producer appends is a new line.

Everything else is `malformed` and dead-lettered at once, never retried: bytes that are not
UTF-8, text that is not strict JSON (RFC 8259: no `NaN`/`Infinity`, no lone surrogate escape,
no number that overflows a double such as `1e999`), nesting deeper than MAX_JSON_DEPTH, a
value that is not an object, a missing or empty field, a non-numeric or out-of-range weight,
an over-long id, a line over MAX_LINE_BYTES. orjson is the parser: it enforces the JSON rules
in C; the depth and weight rules are the ones the drainer's writes need. So whatever
`parse_line` accepts (and `enqueue` appends) the drainer can link, re-queue and dead-letter:
it can always be written back as valid JSON (every SQLite `properties` value stays valid
JSON), and no weight it links can make an edge's weight non-finite.

Identity is by position, never by content. A line is identified by where the drainer read it:
`<segment>:<byte offset>`, the segment being the random id the `.draining` file got when
it was rotated (see `core.drain.stores.queue_files`). Two byte-identical lines are two mentions. A
line that fails and is re-queued keeps its first identity in `_drain.lineId` together with its
attempt count; that pair is a token the drainer issues once and accepts once, so a copy of a
re-queued line left behind by a crash is recognized and skipped.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypeGuard

import orjson

from core.base.rules.ids import normalize_graph_node_id
from core.base.rules.nodes import WEIGHT_LIMIT as WEIGHT_LIMIT
from core.base.rules.timestamps import epoch_ms_from_created_at

#: Longest id or relationship accepted; longer ones are malformed (they are not real ids, and
#: they would bloat every index they touch).
MAX_FIELD_CHARS = 1_024
#: Longest line accepted; the drainer streams a longer one to a side file, never holding it.
MAX_LINE_BYTES = 1 << 20
#: What one JSON value of a line may cost once parsed, at most, over the line's own bytes: an
#: upper bound over the kinds of value CPython builds (docs/performance.md). Every value but
#: the first follows one of `,` `:` `[` `{`.
PARSED_BYTES_PER_VALUE = 96
#: The characters that each open a JSON value (see PARSED_BYTES_PER_VALUE).
_VALUE_OPENERS = b",:[{"
#: The deepest JSON value a line may hold (a line's object is 1 deep). orjson's encoder,
#: which writes lines back, refuses anything deeper although its decoder reads more: a deeper
#: line would be accepted, then fail every write (pinned by tests/jobs/test_queue_grammar.py).
MAX_JSON_DEPTH = 254
#: The reserved key the drainer uses for its bookkeeping on re-queued lines.
DRAIN_KEY = "_drain"
#: The dead-letter reason of every line that cannot be parsed (CONTRACT).
MALFORMED = "malformed"
#: The dead-letter reason of a line isolated by the split defence (see `core.drain`).
UNPROCESSABLE = "unprocessable"
#: Keys of a line that are not edge properties.
EDGE_FIELDS = frozenset({"source", "target", "relationship", "weight", DRAIN_KEY})
#: A drainer-issued line identity: a 32-hex-digit segment, a colon, a byte offset. Anything
#: else in `_drain.lineId` is no token: the line is a new one.
_POSITION_ID = re.compile(r"[0-9a-f]{32}:[0-9]+")
#: The only way a NUL gets into a decoded JSON string.
_NUL_ESCAPE = b"\\u0000"


def json_line(value: Any) -> bytes:
    """`value` as compact JSON bytes, copied to its own size (orjson hands back its whole
    working buffer, which each re-queued line or dead letter would otherwise hold)."""
    return bytes(memoryview(orjson.dumps(value)))


def parsed_size_bound(raw: bytes) -> int:
    """An upper bound of the memory a line takes once parsed: its bytes plus
    PARSED_BYTES_PER_VALUE per value it can hold (one pass in C), so a batch of lines that
    parse into millions of objects (`[[],[],...]`) stays small."""
    return len(raw) + PARSED_BYTES_PER_VALUE * (len(raw) - len(raw.translate(None,
                                                                              _VALUE_OPENERS)))


def position_id(segment: str, offset: int) -> str:
    """The identity of the line that starts at `offset` of segment `segment`."""
    return f"{segment}:{offset}"


@dataclass(slots=True)
class EdgeLine:
    """A valid queue line: the edge it asks for and its drain bookkeeping (never mutated)."""

    source: str
    target: str
    relationship: str
    weight: float
    properties: dict[str, Any]
    #: The line as an object without `_drain`, to re-queue or dead-letter it.
    body: dict[str, Any]
    #: The line's bytes as read (newline stripped), to put back unchanged when deferred.
    raw: bytes
    #: Failed tries so far (from `_drain.attempts`; 0 for a new line).
    attempts: int = 0
    #: `_drain.lineId` when the drainer issued it: this is a re-queued line, valid only while
    #: its token (lineId, attempts) is outstanding.
    token_id: str | None = None
    #: Whether the line carried a `_drain` key at all (producers strip it).
    had_drain_key: bool = False


@dataclass(frozen=True, slots=True)
class MalformedLine:
    """A line that can never apply, and why (for the dead-letter record)."""

    detail: str
    raw: bytes


def parse_line(raw: bytes) -> EdgeLine | MalformedLine:
    """Parse one line into an edge or a malformed record; never raises."""
    if raw[-1:] in (b"\n", b"\r"):
        raw = raw.rstrip(b"\r\n")
    if len(raw) > MAX_LINE_BYTES:
        return MalformedLine(f"line is {len(raw)} bytes (limit {MAX_LINE_BYTES})", raw)
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        return MalformedLine(_decode_problem(raw, str(exc)), raw)
    if type(value) is not dict:
        return MalformedLine(f"a line must be a JSON object, got {_json_type(value)}", raw)
    source, target = value.get("source"), value.get("target")
    relationship, weight = value.get("relationship"), value.get("weight", 1.0)
    # One quick test for the common, valid line (this runs once per line). An id with a
    # canonical prefix is neither blank nor in need of normalizing. A decoded string can hold
    # a NUL only from a `\u0000` escape, so the fields are searched only when the bytes have one.
    if not (type(source) is str and type(target) is str and type(relationship) is str
            and (type(weight) is float or type(weight) is int)
            and len(source) <= MAX_FIELD_CHARS and len(target) <= MAX_FIELD_CHARS
            and 0 < len(relationship) <= MAX_FIELD_CHARS and not relationship.isspace()):
        return MalformedLine(_field_problem(value), raw)
    if not (source.startswith(_CANONICAL_PREFIXES) and target.startswith(_CANONICAL_PREFIXES)):
        if not (source and target) or source.isspace() or target.isspace():
            return MalformedLine(_field_problem(value), raw)
        source, target = _canonical(source), _canonical(target)
    if _NUL_ESCAPE in raw and ("\x00" in source or "\x00" in target or "\x00" in relationship):
        return MalformedLine(_field_problem(value), raw)
    # The properties: the line without its edge fields (cheaper than a comprehension).
    properties = value.copy()
    del properties["source"], properties["target"], properties["relationship"]
    if "weight" in properties:
        del properties["weight"]
    had_drain_key = DRAIN_KEY in properties
    if had_drain_key:
        del properties[DRAIN_KEY]
    # The original links `edge.weight || 1.0`: a zero weight (or -0.0) counts as the default.
    weight = float(weight) or 1.0
    problem = _beyond_limits(weight, value, raw)
    if problem is not None:
        return MalformedLine(problem, raw)
    # Positional: cheaper, and this runs once per line.
    line = EdgeLine(source, target, relationship, weight, properties, value, raw)
    if had_drain_key:
        # `value` is this call's own fresh dict: the body is it minus the bookkeeping.
        drain = value.pop(DRAIN_KEY)
        line.had_drain_key = True
        if type(drain) is dict:
            _read_bookkeeping(line, drain)
    return line


def _beyond_limits(weight: float, value: Any, raw: bytes) -> str | None:
    """Why a well-formed line is beyond what the drain can store or write back, or None."""
    if not -WEIGHT_LIMIT <= weight <= WEIGHT_LIMIT:
        return f"weight {weight!r} is out of range (at most {WEIGHT_LIMIT:,.0f} either side of 0)"
    # Only a line with more openers than the limit can be too deep; the encoder says for sure.
    if raw.count(b"[") + raw.count(b"{") > MAX_JSON_DEPTH:
        return _unwritable(value)
    return None


def _unwritable(value: Any) -> str | None:
    """Why a parsed line could not be written back as JSON, or None when it can."""
    try:
        orjson.dumps(value)
    except orjson.JSONEncodeError as exc:
        if "Recursion limit" in str(exc):
            return f"JSON nested too deeply (more than {MAX_JSON_DEPTH} levels)"
        return f"cannot be written back as JSON ({exc})"
    return None


def _is_id(value: Any) -> TypeGuard[str]:
    """A usable id or relationship: a non-blank string of at most MAX_FIELD_CHARS, no NUL."""
    return (type(value) is str and 0 < len(value) <= MAX_FIELD_CHARS and not value.isspace()
            and "\x00" not in value)


#: Ids that start with one of these are already canonical (the common case).
_CANONICAL_PREFIXES = ("memory:", "session:", "CONCEPT:")


def _canonical(node_id: str) -> str:
    """`normalize_graph_node_id`, skipped for the ids it cannot change."""
    if node_id[:1] not in "mMsS":
        return node_id
    return str(normalize_graph_node_id(node_id))


def _read_bookkeeping(line: EdgeLine, drain: Mapping[str, Any]) -> None:
    attempts = drain.get("attempts")
    if type(attempts) is int:
        line.attempts = max(0, attempts)
    line_id = drain.get("lineId")
    if isinstance(line_id, str) and _POSITION_ID.fullmatch(line_id):
        line.token_id = line_id


def _decode_problem(raw: bytes, message: str) -> str:
    """A malformed line's detail from orjson's message, in words an operator can act on."""
    if "not valid UTF-8" in message:
        try:
            raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            return f"invalid UTF-8 at byte {exc.start}"
    if "depth limit exceeded" in message:
        return f"JSON nested too deeply (more than {MAX_JSON_DEPTH} levels)"
    if "infinity when parsed as double" in message:
        return f"non-finite number, out of a double's range ({message})"
    if "surrogate" in message:
        return f"invalid JSON: lone surrogate escape ({message})"
    if not raw.strip():
        return "blank line"
    return f"invalid JSON: {message}"


def _field_problem(value: Mapping[str, Any]) -> str:
    """Why a line's fields do not make an edge (the first problem found)."""
    for name in ("source", "target", "relationship"):
        if name not in value:
            return f"missing {name}"
        field = value[name]
        if type(field) is not str:
            return f"{name} must be a string, got {_json_type(field)}"
        if not field.strip():
            return f"{name} is empty"
        if len(field) > MAX_FIELD_CHARS:
            return f"{name} is {len(field)} characters (limit {MAX_FIELD_CHARS})"
        if "\x00" in field:
            return f"{name} contains a NUL character"
    return f"weight must be a number, got {_json_type(value.get('weight'))}"


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


@dataclass(frozen=True, slots=True)
class LineProblem:
    """A line `enqueue` refuses: its 1-based number and why."""

    number: int
    detail: str


def check_lines(raw_lines: Iterable[bytes]) -> tuple[list[bytes], list[LineProblem]]:
    """Validate producer input: the non-blank lines as they will be appended (`_drain`
    stripped), and a problem for each malformed one."""
    valid: list[bytes] = []
    problems: list[LineProblem] = []
    for number, raw in enumerate(raw_lines, start=1):
        line = raw.rstrip(b"\r\n")
        if not line.strip():
            continue
        parsed = parse_line(line)
        if isinstance(parsed, MalformedLine):
            problems.append(LineProblem(number, parsed.detail))
        elif parsed.had_drain_key:
            valid.append(json_line(parsed.body))
        else:
            valid.append(line)
    return valid, problems


def strip_drain_key(raw: bytes) -> bytes:
    """A valid line without the drainer's `_drain` key, so a line fed back is a new line;
    other lines are returned byte for byte."""
    parsed = parse_line(raw)
    if isinstance(parsed, EdgeLine) and parsed.had_drain_key:
        return json_line(parsed.body)
    return raw.rstrip(b"\r\n")


def requeue_line(line: EdgeLine, *, line_id: str, reason: str, now_ms: int) -> bytes:
    """The line to re-queue after a failed attempt: its body plus its token (see `core.drain`)."""
    drain = {"lineId": line_id, "attempts": line.attempts + 1, "lastReason": reason,
             "lastAttemptAt": now_ms}
    return json_line({**line.body, DRAIN_KEY: drain})


@dataclass(frozen=True, slots=True)
class SpilledBytes:
    """Where an over-limit line's bytes went: `file` relative to the dead-letter folder (None
    in a dry run)."""

    file: str | None
    size: int
    sha256: str


@dataclass(slots=True)
class ReadLine:
    """One line read from a queue file: its offset, and its bytes or where they were spilled."""

    offset: int
    raw: bytes
    spilled: SpilledBytes | None = None


def line_time(raw: bytes) -> tuple[int, str] | None:
    """When a queue line was written, as (epoch ms, field): its `timestamp`, else
    `_drain.lastAttemptAt`; None when neither."""
    try:
        value = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(value, dict):
        return None
    stamp = epoch_ms_from_created_at(value.get("timestamp"))
    if stamp is not None:
        return stamp, "timestamp"
    drain = value.get(DRAIN_KEY)
    if isinstance(drain, dict):
        attempted = epoch_ms_from_created_at(drain.get("lastAttemptAt"))
        if attempted is not None:
            return attempted, "lastAttemptAt"
    return None
