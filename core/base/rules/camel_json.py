"""The one serializer of typed figures to the CONTRACT's camelCase JSON.

What a tick, a command or a report says is a frozen dataclass; readers use its attributes, so a
renamed field is a type error, not a silent `KeyError`. `to_json` turns one into the JSON the
CONTRACT names (`--json`, the telemetry `detail`, the `daemon_ticks` record):

- each field becomes a key, in declaration order: its snake_case name in camelCase
  (`stale_count` -> `staleCount`), or the name given with `json_name(...)`;
- a field marked `omitted_when_none` is left out when it is None (optional keys);
- a field marked `shown_as(fn)` is written as `fn(value)` (a webhook URL as its redacted
  label: the record keeps what it needs, the JSON shows what may be shown);
- a field marked `hidden` is never written (a record's own bookkeeping);
- a field marked `flattened` (a dataclass) has its keys written in its place, so a view can
  show a record and a few keys more;
- nested dataclasses, sequences and mappings are converted the same way; enums become their
  value, paths their text.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Mapping
from enum import Enum
from functools import cache
from pathlib import PurePath
from typing import Any, ClassVar, Protocol


class Figures(Protocol):
    """Any dataclass instance: what a tick returns and `to_json` writes."""

    __dataclass_fields__: ClassVar[dict[str, dataclasses.Field[Any]]]


_JSON_NAME = "json_name"
_OMIT_NONE = "omit_none"
_SHOWN_AS = "shown_as"
_HIDDEN = "hidden"
_FLATTENED = "flattened"


def json_name(name: str, **more: Any) -> dict[str, Any]:
    """Field metadata: write this field under `name` instead of its camelCase name."""
    return {_JSON_NAME: name, **more}


def omitted_when_none(**more: Any) -> dict[str, Any]:
    """Field metadata: leave the key out when the value is None."""
    return {_OMIT_NONE: True, **more}


def shown_as(encode: Callable[[Any], Any], **more: Any) -> dict[str, Any]:
    """Field metadata: write `encode(value)` instead of the value."""
    return {_SHOWN_AS: encode, **more}


def hidden() -> dict[str, Any]:
    """Field metadata: never write this field."""
    return {_HIDDEN: True}


def flattened() -> dict[str, Any]:
    """Field metadata: write this (dataclass) field's keys in place of the field itself."""
    return {_FLATTENED: True}


@cache
def camel_case(snake: str) -> str:
    """`late_lines_handed_back` -> `lateLinesHandedBack`."""
    return re.sub(r"_([a-z0-9])", lambda m: m.group(1).upper(), snake)


_Step = tuple[str, str | None, bool, Callable[[Any], Any] | None]


@cache
def _plan(cls: type) -> tuple[_Step, ...]:
    """(attribute, key or None when flattened, omit when None, encoder) per written field."""
    plan: list[_Step] = []
    for f in dataclasses.fields(cls):
        meta = f.metadata
        if meta.get(_HIDDEN):
            continue
        key = None if meta.get(_FLATTENED) else meta.get(_JSON_NAME, camel_case(f.name))
        plan.append((f.name, key, bool(meta.get(_OMIT_NONE)), meta.get(_SHOWN_AS)))
    return tuple(plan)


def to_json(value: Any) -> Any:
    """`value` as JSON-ready data (see the module docstring)."""
    if isinstance(value, Enum):
        return to_json(value.value)
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        out: dict[str, Any] = {}
        for attribute, key, omit_none, encode in _plan(type(value)):
            item = getattr(value, attribute)
            if item is None and omit_none:
                continue
            shown = to_json(encode(item) if encode is not None else item)
            if key is None:
                out.update(shown)
            else:
                out[key] = shown
        return out
    if isinstance(value, PurePath):
        return str(value)
    if isinstance(value, Mapping):
        return {str(k): to_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_json(v) for v in value]
    raise TypeError(f"no JSON form for {type(value).__name__}")
