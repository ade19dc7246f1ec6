"""Parsing the times other programs write on Chroma rows, as times rather than strings (pure).

Chroma rows carry `createdAt` as an ISO-8601 string (with or without a zone) or as epoch
milliseconds; some older writers used epoch seconds. The original platform's own memory and
summary rows carry no `createdAt` at all: they have `timestamp`, epoch milliseconds
(`Date.now()`; a summary's is its session's last activity). `row_time_ms` reads a row's time
from the one or the other. Times are compared as times, never as strings (which would order
"2026-1-5" after "2026-10-01", and numbers not at all).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

# Epoch values below this are seconds, above it milliseconds: 1e11 s is the year 5138, while
# 1e11 ms is March 1973, long before any row this system stores.
_SECONDS_MS_BOUNDARY = 100_000_000_000


def epoch_ms_from_created_at(value: Any) -> int | None:
    """Epoch milliseconds for an ISO-8601 string or an epoch number; None when unparseable.

    A naive ISO time is taken as UTC (the platform writes UTC). Booleans, NaN, infinities and
    empty strings are unparseable rather than silently zero.
    """
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        return _epoch_number_to_ms(float(value))
    if not isinstance(value, str):
        return None
    text = value.strip()
    if not text:
        return None
    try:
        return _epoch_number_to_ms(float(text))
    except ValueError:
        pass
    if text.endswith(("Z", "z")):
        text = text[:-1] + "+00:00"
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        return None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return int(parsed.timestamp() * 1000)


#: The field that dates a row, and the one that dates it when the first is absent.
CREATED_AT_KEY = "createdAt"
TIMESTAMP_KEY = "timestamp"


def row_time_field(metadata: Mapping[str, Any]) -> str:
    """The field a row is dated by: `createdAt` when the row has one (null counts as absent),
    else `timestamp` (the original's rows). A `createdAt` that is present but unparseable
    stays the row's time (unparseable): a row is never dated by a field its writer did not
    mean as its creation time when it has one."""
    return CREATED_AT_KEY if metadata.get(CREATED_AT_KEY) is not None else TIMESTAMP_KEY


def row_time_ms(metadata: Mapping[str, Any]) -> int | None:
    """A Chroma row's time in epoch ms (its `row_time_field`, parsed as
    `epoch_ms_from_created_at` parses any time); None when it has neither field or the one it
    is dated by is unparseable."""
    return epoch_ms_from_created_at(metadata.get(row_time_field(metadata)))


def _epoch_number_to_ms(number: float) -> int | None:
    if not math.isfinite(number) or number < 0:
        return None
    return int(number if number >= _SECONDS_MS_BOUNDARY else number * 1000)


def iso_from_ms(epoch_ms: int) -> str:
    """A compact UTC ISO-8601 form of epoch milliseconds, for logs and status output."""
    return datetime.fromtimestamp(epoch_ms / 1000, UTC).isoformat(timespec="seconds").replace(
        "+00:00", "Z"
    )


def span_in_words(seconds: float) -> str:
    """A span as a person reads it: `3 s`, `4 min 12 s`, `58 min 49 s`, `2 h 5 min`, `3 d 4 h`
    (two units at most, rounded down)."""
    whole = max(0, int(seconds))
    days, rest = divmod(whole, 86_400)
    hours, rest = divmod(rest, 3_600)
    minutes, secs = divmod(rest, 60)
    parts = [(days, "d"), (hours, "h"), (minutes, "min"), (secs, "s")]
    first = next((i for i, (value, _) in enumerate(parts) if value), len(parts) - 1)
    shown = [f"{value} {unit}" for value, unit in parts[first:first + 2] if value]
    return " ".join(shown) or "0 s"
