"""MEMORY and SESSION node contents built from Chroma rows (pure).

Both pipelines (live ingestion and back-fill) build their nodes here, so the two can differ only
in their provenance marker. The payload hash is SHA-256 of compact, key-sorted JSON (JavaScript
`JSON.stringify` formatting, so other writers of these nodes compute the same hash) over the
fields that matter, absent values as "". Equal hashes mean an upsert would change nothing.

A node carries the row fields it mirrors (`createdAt`, `sessionId`, `userId`, a session's
`title`) only when the row has them, as the original's nodes do (its `JSON.stringify` drops an
undefined value): the original's rows have no `createdAt` (they carry `timestamp`), so their
nodes have no `createdAt` key and their hash takes `createdAt` as "". A row's `timestamp` dates
it for the live window (`core.base.rules.timestamps.row_time_ms`) but is never put in its node or
its hash: both stay byte for byte what the original computes for the same row, so neither side
rewrites the other's node.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, Protocol

import orjson

from core.base.rules.ids import memory_node_id, session_node_id
from core.base.rules.rows import ChromaRow
from core.base.rules.timestamps import row_time_ms

MEMORY_LABEL = "MEMORY"
SESSION_LABEL = "SESSION"
ORIGINATES_IN = "ORIGINATES_IN"

#: The largest weight magnitude a line may carry: far beyond any real producer, and with
#: MIN_WEIGHT it keeps every edge weight finite however many lines reinforce it.
WEIGHT_LIMIT = 1_000_000.0
#: Linking an existing edge again adds this fraction of the new weight.
REINFORCE_FACTOR = 0.1
#: Reinforcement never takes a weight above this.
MAX_WEIGHT = 5.0
#: No stored weight goes below this (nor does a link store one above WEIGHT_LIMIT), so no
#: number of lines can push an edge to ±Inf, whoever the caller.
MIN_WEIGHT = -WEIGHT_LIMIT

Marker = Literal["backfilled", "liveIngested"]

# What live ingestion removes when it upgrades an existing node: markers are exclusive, and a
# node built from a real summary is no longer minimal.
LIVE_INGEST_DROPS: tuple[str, ...] = ("backfilled", "minimal")


@dataclass(frozen=True, slots=True)
class NodeRow:
    """A node to write: id, label and its properties (a JSON object)."""

    id: str
    label: str
    properties: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class EdgeRow:
    """An edge to write; `properties` excludes the weight, which has its own column."""

    source: str
    target: str
    relationship: str
    weight: float = 1.0
    properties: Mapping[str, Any] | None = None


class EdgeLike(Protocol):
    """An edge's fields, read-only: an `EdgeRow`, or a parsed queue line linked as it is."""

    @property
    def source(self) -> str: ...
    @property
    def target(self) -> str: ...
    @property
    def relationship(self) -> str: ...
    @property
    def weight(self) -> float: ...
    @property
    def properties(self) -> Mapping[str, Any] | None: ...


#: One encoder for every hash (`json.dumps` with keywords builds one per call).
_JS_ENCODER = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def js_json(value: Any) -> str:
    """Compact key-sorted JSON formatted as JavaScript's JSON.stringify would (integral floats
    without a fraction, non-ASCII unescaped), so hashes match the platform's JavaScript writers.

    A value without floats is written by orjson, byte-identical there to the standard encoder
    (a property test holds it to that) and cheaper."""
    normalized = _js_numbers(value)
    if _float_free(normalized):
        try:
            return orjson.dumps(normalized, option=orjson.OPT_SORT_KEYS).decode()
        except orjson.JSONEncodeError:
            pass  # a non-string key or an integer past 64 bits: the standard encoder decides
    return _JS_ENCODER.encode(normalized)


def _float_free(value: Any) -> bool:
    kind = type(value)
    if kind is dict:
        return all(_float_free(v) for v in value.values())
    if kind is list:
        return all(_float_free(v) for v in value)
    return kind is str or kind is int or kind is bool or value is None


def _js_numbers(value: Any) -> Any:
    kind = type(value)
    if kind is str or kind is int or value is None or kind is bool:  # the common leaves
        return value
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return int(value)
    if isinstance(value, Mapping):
        return {k: _js_numbers(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_js_numbers(v) for v in value]
    return value


def _field(metadata: Mapping[str, Any], name: str) -> Any:
    value = metadata.get(name)
    return "" if value is None else value


def payload_hash(payload: Mapping[str, Any]) -> str:
    """SHA-256 of `js_json(payload)`, the hash a node's payload is compared by.

    A payload of strings and integers only (every real one) goes to orjson straight, the same
    bytes without `js_json`'s walks (a property test holds the two to that)."""
    for value in payload.values():
        if type(value) is not str and type(value) is not int:
            break
    else:
        try:
            return hashlib.sha256(orjson.dumps(payload, option=orjson.OPT_SORT_KEYS)).hexdigest()
        except orjson.JSONEncodeError:
            pass  # a lone surrogate or an integer past 64 bits: js_json decides
    return hashlib.sha256(js_json(payload).encode("utf-8")).hexdigest()


def memory_payload_hash(metadata: Mapping[str, Any]) -> str:
    """Hash of the memory fields a graph node mirrors."""
    return payload_hash({k: _field(metadata, k) for k in ("createdAt", "sessionId", "userId")})


def session_payload_hash(metadata: Mapping[str, Any]) -> str:
    """Hash of the session-summary fields a graph node mirrors."""
    return payload_hash({k: _field(metadata, k)
                         for k in ("createdAt", "sessionId", "title", "userId")})


def memory_node(chroma_id: str, metadata: Mapping[str, Any], marker: Marker) -> NodeRow:
    """The MEMORY node for a memory row (the fields it mirrors: see the module docstring)."""
    created, session, user = (metadata.get("createdAt"), metadata.get("sessionId"),
                              metadata.get("userId"))
    properties: dict[str, Any] = {"chromaId": chroma_id}
    if session is not None:
        properties["sessionId"] = session
    if created is not None:
        properties["createdAt"] = created
    if user is not None:
        properties["userId"] = user
    # The same payload as memory_payload_hash's, its fields read once.
    properties["payloadHash"] = payload_hash({
        "createdAt": "" if created is None else created,
        "sessionId": "" if session is None else session,
        "userId": "" if user is None else user})
    properties[marker] = True
    return NodeRow(memory_node_id(chroma_id), MEMORY_LABEL, properties)


def session_node(
    session_id: str, summary_id: str, metadata: Mapping[str, Any], marker: Marker
) -> NodeRow:
    """The SESSION node for a session whose summary row exists (`chromaId` is the summary's)."""
    fields = {**metadata, "sessionId": session_id}
    properties: dict[str, Any] = {"chromaId": summary_id, "sessionId": session_id}
    for name in ("title", "createdAt", "userId"):
        if (value := fields.get(name)) is not None:
            properties[name] = value
    properties["payloadHash"] = session_payload_hash(fields)
    properties[marker] = True
    return NodeRow(session_node_id(session_id), SESSION_LABEL, properties)


def minimal_session_node(session_id: str) -> NodeRow:
    """A SESSION node for a session without a summary row, as the original writes it (no
    hash); a later live ingestion of its summary upgrades it."""
    properties = {"sessionId": session_id, "backfilled": True, "minimal": True}
    return NodeRow(session_node_id(session_id), SESSION_LABEL, properties)


def originates_in(chroma_id: str, session_id: str) -> EdgeRow:
    """The edge from a memory to the session it was recorded in."""
    return EdgeRow(memory_node_id(chroma_id), session_node_id(session_id), ORIGINATES_IN)


def session_id_of(metadata: Mapping[str, Any]) -> str | None:
    """A row's `sessionId` when it is a non-empty string, else None (no parent to link)."""
    value = metadata.get("sessionId")
    return value if isinstance(value, str) and value else None


def summaries_by_session(
    rows: Iterable[ChromaRow],
) -> dict[str, list[tuple[str, Mapping[str, Any]]]]:
    """Summary rows grouped by their session (rows without a session id are left out)."""
    by_session: dict[str, list[tuple[str, Mapping[str, Any]]]] = defaultdict(list)
    for row in rows:
        sid = session_id_of(row.metadata)
        if sid is not None:
            by_session[sid].append((row.id, row.metadata))
    return by_session


def pick_summary_row(
    rows: Iterable[tuple[str, Mapping[str, Any]]],
) -> tuple[str, Mapping[str, Any]] | None:
    """The summary row that represents a session among several, deterministically: the
    earliest (`row_time_ms`; unreadable times last), ties by row id."""
    best: tuple[tuple[int, int, str], str, Mapping[str, Any]] | None = None
    for row_id, metadata in rows:
        created = row_time_ms(metadata)
        rank = (0 if created is not None else 1, created or 0, row_id)
        if best is None or rank < best[0]:
            best = (rank, row_id, metadata)
    return None if best is None else (best[1], best[2])
