"""Defaults written as TOML source, for the docs and the example file (pure)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def toml_literal(value: Any) -> str:
    """Render a default as TOML source (for docs and the example file)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, int):
        return f"{value:_}" if abs(value) >= 10_000 else str(value)
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, (tuple, list)) and not value:
        return "[]"
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{k} = {toml_literal(v)}" for k, v in value.items()) + "}"
    raise TypeError(f"no TOML literal for {value!r}")


