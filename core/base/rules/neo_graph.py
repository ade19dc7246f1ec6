"""The original's graph rules (pure): how neo.mjs's GraphService writes a node or an edge into its
`Nodes`/`Edges` documents, and how it names the node of a raw memory, so that a write of the
daemons is one the platform would have made (`research/neo-deployment.md` §2-§4).

- **A node** is the document `{id, label, properties}`. A new one gets
  `{name: name || id, description: '', [semanticVectorId], ...properties}`; an existing one
  keeps every key it has, takes `name` / `semanticVectorId` when the write names them, then
  the written properties (merged: an object into an object, key by key; a key is never
  deleted, a null is stored as null). `user_id` (E2+) is `properties.userId || null`.
- **An edge** is `{id, source, target, type, properties: {weight, ...}}`, found by (source,
  target, type), created with a fresh id, and reinforced on a repeat mention to
  `min((parseFloat(weight) || 1) + 0.1 * new, 5)` (1, 1.1, 1.2000000000000002, ...), its
  properties merged and its `user_id` left alone. Of several rows with one key (the table has
  no UNIQUE) the first, the lowest rowid, is the one reinforced, as the original's `get()`.
- **Identity** (E2 and E3): a raw memory is the bare-id `AGENT_MEMORY` node `X`, never
  `memory:X`, which is input grammar only; `resolve_endpoint` is the original's `resolveNodeId`.
- **The daemons' node shapes** (§4.1): `project_node` maps this project's MEMORY / SESSION
  node (`core.base.rules.nodes`) to the one the original's ingestor writes for the same row: no
  `title` property (it is the session's `name`), a minimal session without a hash, a key the
  row does not have left out instead of written as "".

A write that would change nothing is not made (`unchanged`): the original's triggers log every
UPDATE in `GraphLog`, and its peers would drop their caches for nothing.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from core.base.rules.graph_schema import NeoEra
from core.base.rules.ids import MEMORY_PREFIX, SESSION_PREFIX
from core.base.rules.nodes import (
    MAX_WEIGHT,
    MEMORY_LABEL,
    MIN_WEIGHT,
    REINFORCE_FACTOR,
    SESSION_LABEL,
    NodeRow,
)

#: The label of a raw memory's node in E2 and E3 (`rawMemoryGraphIdentity.mjs`).
AGENT_MEMORY_LABEL = "AGENT_MEMORY"
#: The reason of a memory endpoint whose canonical id another node holds.
CANONICAL_LABEL_CONFLICT = "canonical-label-conflict"
#: How many characters of a memory's id its node's `name` keeps (`id.slice(0, 12)`).
MEMORY_NAME_LENGTH = 12
#: The properties of the original's memory and session projections besides the marker (§4.1);
#: `title` is not among them: a session's title is its `name`.
_PROJECTED_KEYS = ("chromaId", "createdAt", "payloadHash", "sessionId", "userId")
_MARKERS = ("backfilled", "liveIngested")
#: JavaScript's `parseFloat`: leading whitespace, then the longest number it can read.
_JS_FLOAT = re.compile(r"\s*([+-]?(?:Infinity|(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?))")


# ----------------------------------------------------------------------------------- documents


def document_json(document: Mapping[str, Any]) -> str:
    """The document's JSON as `JSON.stringify` writes it: compact, keys in their order,
    non-ASCII as is, an integral float as an integer. Raises orjson's error (a ValueError) for
    what JSON cannot hold (a lone surrogate, an integer past 64 bits)."""
    return orjson.dumps(_js_numbers(document)).decode()


def _js_numbers(value: Any) -> Any:
    """`value` with every integral float an integer; the very object when it has none (the
    usual document: strings, integers, booleans), so that no copy is made for nothing."""
    kind = type(value)
    if kind is str or kind is int or kind is bool or value is None:
        return value
    if kind is float:
        return int(value) if math.isfinite(value) and value.is_integer() \
            and abs(value) < 2 ** 53 else value
    if isinstance(value, Mapping):
        copy: dict[str, Any] | None = None
        for key, item in value.items():
            kind = type(item)
            if kind is str or kind is int or kind is bool or item is None:
                continue
            fixed = _js_numbers(item)
            if fixed is not item:
                if copy is None:
                    copy = dict(value)
                copy[key] = fixed
        return copy if copy is not None else value
    if isinstance(value, (list, tuple)):
        items = [_js_numbers(v) for v in value]
        return items if any(a is not b for a, b in zip(items, value, strict=True)) \
            or isinstance(value, tuple) else value
    return value


def js_truthy_user_id(properties: Any) -> Any:
    """`properties.userId || null` (the `user_id` column): a non-empty string or a non-zero
    number, else None."""
    value = properties.get("userId") if isinstance(properties, Mapping) else None
    if isinstance(value, str):
        return value or None
    if isinstance(value, (int, float)) and not (value == 0 or value != value):
        return int(value) if isinstance(value, bool) else value
    return None


def merged(old: Mapping[str, Any], patch: Mapping[str, Any]) -> dict[str, Any]:
    """`patch` merged into `old`: an object into an object, key by key; anything else
    replaces; no key of `old` is ever deleted (a null is stored as null)."""
    result = dict(old)
    for key, value in patch.items():
        current = result.get(key)
        if isinstance(value, Mapping) and isinstance(current, Mapping):
            result[key] = merged(current, value)
        else:
            result[key] = value
    return result


# -------------------------------------------------------------------------------------- nodes


@dataclass(frozen=True, slots=True)
class NeoNodeWrite:
    """One `upsertNode` call: the node's id and label in the graph, the named fields it sets
    on every write (`name`, `semanticVectorId`), the name a new node gets, and properties."""

    id: str
    label: str
    properties: Mapping[str, Any]
    name_if_new: str | None = None
    set_fields: Mapping[str, Any] = field(default_factory=dict)


def new_node_document(write: NeoNodeWrite) -> dict[str, Any]:
    """The document `upsertNode` creates: `{name, description, [semanticVectorId], ...}`."""
    name = write.set_fields.get("name") or write.name_if_new or write.id
    properties: dict[str, Any] = {"name": name, "description": ""}
    properties.update((k, v) for k, v in write.set_fields.items() if k != "name")
    return {"id": write.id, "label": write.label, "properties": merged(properties,
                                                                       write.properties)}


def updated_node_document(stored: Mapping[str, Any], write: NeoNodeWrite) -> dict[str, Any]:
    """`stored` as `upsertNode` leaves it: every key kept, the label and the named fields
    set, the properties merged in. A stored document that is not an object (written by
    hand) is replaced by a new node's."""
    old = stored.get("properties")
    properties = merged(old if isinstance(old, Mapping) else {}, write.set_fields)
    document = dict(stored)
    document["id"] = write.id
    document["label"] = write.label
    document["properties"] = merged(properties, write.properties)
    return document


def project_node(row: NodeRow, era: NeoEra) -> NeoNodeWrite:
    """The original's write for this project's node `row` (see the module docstring): a
    MEMORY or SESSION node built from a Chroma row is shaped as its ingestor shapes it (in
    E2/E3 a memory is the `AGENT_MEMORY` node of its bare id); any other node is written as
    given, under its own id and label."""
    props = row.properties
    if row.label == MEMORY_LABEL and row.id.startswith(MEMORY_PREFIX) and "chromaId" in props:
        return _memory_write(row, era)
    if row.label == SESSION_LABEL and row.id.startswith(SESSION_PREFIX) and (
            "chromaId" in props or props.get("minimal") is True):
        return _session_write(row)
    return NeoNodeWrite(row.id, row.label, props)


def _present(props: Mapping[str, Any], keys: tuple[str, ...]) -> dict[str, Any]:
    """The keys the row had: this project writes a missing field as "", the original leaves
    it out (`createdAt: meta.createdAt` of a row without one vanishes in JSON)."""
    return {k: props[k] for k in keys if k in props and props[k] != ""}


def _sorted(props: dict[str, Any]) -> dict[str, Any]:
    """In the original's order: its ingestor lists these properties alphabetically."""
    return dict(sorted(props.items()))


def _marker(props: Mapping[str, Any]) -> dict[str, Any]:
    return {m: True for m in _MARKERS if props.get(m) is True}


def _memory_write(row: NodeRow, era: NeoEra) -> NeoNodeWrite:
    chroma_id = str(row.properties["chromaId"])
    live = row.properties.get("liveIngested") is True
    fields = _sorted({**_marker(row.properties), **_present(row.properties, _PROJECTED_KEYS)})
    name = chroma_id[:MEMORY_NAME_LENGTH]
    if not era.bare_memory_ids:
        # E1: `upsertNode({id: memory:X, type: 'MEMORY', name: X.slice(0, 12), ...})`.
        return NeoNodeWrite(row.id, MEMORY_LABEL, fields, set_fields={"name": name})
    if live and isinstance(fields.get("userId"), str):
        fields["userId"] = fields["userId"].removeprefix("@")  # normalizeRawMemoryUserId
    # E2/E3: the bare id, `semanticVectorId` on every write, the name only on a new node.
    return NeoNodeWrite(chroma_id, AGENT_MEMORY_LABEL, fields, name_if_new=name,
                        set_fields={"semanticVectorId": chroma_id})


def _session_write(row: NodeRow) -> NeoNodeWrite:
    props = row.properties
    session_id = str(props.get("sessionId") or row.id[len(SESSION_PREFIX):])
    if props.get("minimal") is True and "chromaId" not in props:
        return NeoNodeWrite(row.id, SESSION_LABEL,
                            {"backfilled": True, "minimal": True, "sessionId": session_id},
                            set_fields={"name": session_id})
    title = props.get("title")
    name = title if isinstance(title, str) and title else session_id
    return NeoNodeWrite(row.id, SESSION_LABEL,
                        _sorted({**_marker(props), **_present(props, _PROJECTED_KEYS)}),
                        set_fields={"name": name})


# -------------------------------------------------------------------------------------- edges


def js_parse_float(value: Any) -> float:
    """JavaScript's `parseFloat(value)` of a value read from JSON: a number as is, a string's
    leading number, NaN for anything else (null, true, an object)."""
    if isinstance(value, bool) or value is None:
        return math.nan
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        found = _JS_FLOAT.match(value)
        return float(found.group(1).replace("Infinity", "inf")) if found else math.nan
    return math.nan


def reinforced_weight(stored: Any, weight: float) -> float:
    """`Math.min((parseFloat(stored) || 1.0) + weight * 0.1, 5.0)`, never below MIN_WEIGHT
    (this project's bound: an edge weight stays finite whatever its lines say)."""
    current = js_parse_float(stored)
    if current == 0 or math.isnan(current):
        current = 1.0
    return max(min(current + weight * REINFORCE_FACTOR, MAX_WEIGHT), MIN_WEIGHT)


def new_edge_document(edge_id: str, source: str, target: str, relationship: str,
                      weight: float, properties: Mapping[str, Any] | None) -> dict[str, Any]:
    """The document `linkNodes` creates: `{id, source, target, type, properties: {weight,
    ...properties}}`."""
    props: dict[str, Any] = {"weight": weight}
    if properties:
        props.update(properties)
    return {"id": edge_id, "source": source, "target": target, "type": relationship,
            "properties": props}


def reinforced_edge_document(stored: Mapping[str, Any], weight: float,
                             properties: Mapping[str, Any] | None) -> dict[str, Any]:
    """`stored` reinforced by a mention of `weight`: `{...old, weight, ...properties, weight:
    reinforced}`, every other key of the document kept."""
    old = stored.get("properties")
    old_props = old if isinstance(old, Mapping) else {}
    props = dict(old_props)
    props["weight"] = weight
    if properties:
        props.update(properties)
    props["weight"] = reinforced_weight(old_props.get("weight"), weight)
    document = dict(stored)
    document["properties"] = props
    return document


# ------------------------------------------------------------------------------------ identity


def memory_key(node_id: str) -> str | None:
    """X of a `memory:X` id (canonical prefix), None for any other id."""
    if node_id.startswith(MEMORY_PREFIX) and len(node_id) > len(MEMORY_PREFIX):
        return node_id[len(MEMORY_PREFIX):]
    return None


def ids_to_read(node_id: str, era: NeoEra) -> tuple[str, ...]:
    """The rows that say what `node_id` resolves to: `memory:X` and `X` in E2/E3."""
    key = memory_key(node_id) if era.bare_memory_ids else None
    return (node_id,) if key is None else (node_id, key)


@dataclass(frozen=True, slots=True)
class StoredNode:
    """What resolving an id needs of a stored node: its label and whether it is a Chroma
    projection (`properties.chromaId` set)."""

    label: Any
    has_chroma_id: bool


@dataclass(frozen=True, slots=True)
class Resolution:
    """Where an endpoint goes: the node id it resolves to (None: absent, back-fill it), or
    why it cannot resolve (`conflict`)."""

    node_id: str | None
    conflict: str | None = None


def resolve_endpoint(node_id: str, era: NeoEra,
                     stored: Mapping[str, StoredNode]) -> Resolution:
    """`GraphService.resolveNodeId` / `ingestSingleRow` in E2/E3 (§3.3): `memory:X` that is
    not a Chroma-backed MEMORY node is a semantic node of its own; `X` as AGENT_MEMORY is the
    memory; `X` under another label is a conflict; otherwise nothing (an old-form `memory:X`
    with `chromaId` is left to the original's migration). E1/V0 and every other id: the id
    itself when it is stored."""
    key = memory_key(node_id) if era.bare_memory_ids else None
    if key is None:
        return Resolution(node_id if node_id in stored else None)
    prefixed = stored.get(node_id)
    if prefixed is not None and not (prefixed.label == MEMORY_LABEL and prefixed.has_chroma_id):
        return Resolution(node_id)
    bare = stored.get(key)
    if bare is None:
        return Resolution(None)
    if bare.label == AGENT_MEMORY_LABEL:
        return Resolution(key)
    shown = bare.label if isinstance(bare.label, str) and bare.label else "an unlabeled node"
    return Resolution(None, f"canonical raw-memory id {key!r} is occupied by {shown}")


def written_id(row: NodeRow, era: NeoEra) -> str:
    """The id `row` is written under (`project_node`'s), without shaping the write."""
    if era.bare_memory_ids and row.label == MEMORY_LABEL and "chromaId" in row.properties:
        key = memory_key(row.id)
        if key is not None:
            return key
    return row.id


def projection_conflict(row: NodeRow, era: NeoEra, stored_label: Any) -> str | None:
    """Why the memory node `row` may not be written over the stored node of its id (E2/E3:
    the canonical raw-memory id holds a node of another label), or None."""
    write_id = written_id(row, era)
    if write_id == row.id or stored_label in (None, AGENT_MEMORY_LABEL):
        return None
    shown = stored_label if isinstance(stored_label, str) and stored_label else "an unlabeled node"
    return f"canonical raw-memory id {write_id!r} is occupied by {shown}"
