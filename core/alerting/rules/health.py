"""The original's `KB Multi-Tenant Health` view (pure): rolled-up telemetry in, figures and the
Markdown section out.

The original renders, per (tenant, repo) over a window (7 days by default), the events
by kind, the errors, the error rate and the chunks embedded and deleted, as a GitHub table it
appends to a handoff file. This module keeps its figures and its text exactly:

- `errorRate` is `errorEvents / eventCount`, 0 when there are no events (never NaN);
- the rate is shown as JavaScript's `(rate * 100).toFixed(1) + "%"`: the product is the same
  double, and `toFixed` rounds the double's *exact* value half up (Python's `format` rounds
  half to even, so `1.25` would print `1.2` where the original prints `1.3`);
- the section's heading, intro line, header and alignment row are the original's, word for word.

The window is `timestamp >= now - days`, with no upper bound, as the original's rollup reads it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

from core.base.rules.camel_json import json_name
from core.base.rules.telemetry import KNOWN_METRICS

#: The window when `--days` is not given: the original's (the handoff's 7-day cadence).
DEFAULT_HEALTH_DAYS = 7
DAY_MS = 24 * 60 * 60 * 1000
#: The lowest timestamp a store holds (a signed 64-bit integer in SQLite and PostgreSQL): a
#: window longer than the epoch reaches back to it instead of overflowing the parameter.
_OLDEST_MS = -(2**63)

HEALTH_TITLE = "KB Multi-Tenant Health"
#: The table's columns, as the original names them, in its order.
HEALTH_COLUMNS: tuple[str, ...] = (
    "Tenant", "Repo", "Events", "Ingest", "Tombstone", "Reconcile", "Errors", "Error rate",
    "Embedded", "Deleted",
)
#: Every column but Tenant and Repo is right-aligned, as in the original's alignment row.
NUMERIC_COLUMNS: tuple[str, ...] = HEALTH_COLUMNS[2:]

_WHOLE_NUMBER = re.compile(r"[0-9]+")
_ONE_DECIMAL = Decimal("0.1")


def parse_days(text: str) -> int:
    """`--days`: a whole number of days >= 1 (ASCII digits only); ValueError otherwise, so a
    typo is a usage error and never a silent week."""
    if not _WHOLE_NUMBER.fullmatch(text) or int(text) < 1:
        raise ValueError(f"must be a whole number of days >= 1, got {text!r}")
    return int(text)


def window_start(now_ms: int, days: int) -> int:
    """The first timestamp inside a `days`-day window ending now (`timestamp >= start`); a
    window longer than the stored range starts at the lowest storable timestamp."""
    if days < 1:
        raise ValueError(f"a health window is at least 1 day, got {days}")
    return max(now_ms - days * DAY_MS, _OLDEST_MS)


def window_label(days: int) -> str:
    """The window in words, as the original's intro line says it (`last 7 days`)."""
    return "last 1 day" if days == 1 else f"last {days} days"


def error_rate(error_events: int, event_count: int) -> float:
    """`errorEvents / eventCount`, 0.0 for no events (the original's rollup)."""
    return error_events / event_count if event_count > 0 else 0.0


def format_error_rate(rate: float) -> str:
    """The rate as the original prints it: `(rate * 100).toFixed(1) + "%"`.

    `toFixed` rounds the double's exact value (`Decimal(float)`) half up, so `0.0125` prints
    `1.3%` (see the module docstring).
    """
    percent = Decimal(rate * 100).quantize(_ONE_DECIMAL, rounding=ROUND_HALF_UP)
    return f"{percent}%"


@dataclass(frozen=True, slots=True)
class HealthRow:
    """One (tenant, repo)'s figures over the window: one line of the table."""

    tenant_id: str
    repo_slug: str
    event_count: int
    ingest_events: int
    tombstone_events: int
    reconcile_events: int
    error_events: int
    #: errorEvents / eventCount, unrounded (0.0 for no events).
    error_rate: float
    #: The rate as the table shows it (`8.3%`).
    error_rate_shown: str = field(metadata=json_name("errorRatePercent"))
    chunks_embedded: int
    chunks_deleted: int

    def cells(self) -> tuple[Any, ...]:
        """The row's cells in HEALTH_COLUMNS order."""
        return (self.tenant_id, self.repo_slug, self.event_count, self.ingest_events,
                self.tombstone_events, self.reconcile_events, self.error_events,
                self.error_rate_shown, self.chunks_embedded, self.chunks_deleted)


def health_row(tenant_id: str, repo_slug: str, figures: Sequence[Any]) -> HealthRow:
    """A table line from a rollup's figures, given in KNOWN_METRICS order without errorRate
    (what the `health_by_repo` statement returns after tenant and repo); NULL counts are 0."""
    by_name = dict(zip(KNOWN_METRICS[:-1], (int(x or 0) for x in figures), strict=True))
    rate = error_rate(by_name["errorEvents"], by_name["eventCount"])
    return HealthRow(
        tenant_id=tenant_id,
        repo_slug=repo_slug,
        event_count=by_name["eventCount"],
        ingest_events=by_name["ingestEvents"],
        tombstone_events=by_name["tombstoneEvents"],
        reconcile_events=by_name["reconcileEvents"],
        error_events=by_name["errorEvents"],
        error_rate=rate,
        error_rate_shown=format_error_rate(rate),
        chunks_embedded=by_name["chunksEmbedded"],
        chunks_deleted=by_name["chunksDeleted"],
    )


def _code(value: str) -> str:
    """`value` as a Markdown code span inside a table cell: fenced by more backticks than it
    holds (a plain `` ` `` pair, as the original, when it holds none) and with `|` escaped,
    so an odd repo slug cannot end the cell or the span early."""
    escaped = value.replace("|", "\\|")
    longest = max((len(run) for run in re.findall(r"`+", escaped)), default=0)
    fence = "`" * (longest + 1)
    if longest:
        return f"{fence} {escaped} {fence}"
    return f"{fence}{escaped}{fence}"


def markdown_section(rows: Sequence[HealthRow], *, label: str | None = None) -> str:
    """The original's `## KB Multi-Tenant Health` section, line for line; `''` for no rows
    (the original omits the section; the command says "no events" itself)."""
    if not rows:
        return ""
    scope = f" ({label})" if label else ""
    lines = [
        f"## {HEALTH_TITLE}",
        "",
        f"Per-tenant Knowledge Base ingestion telemetry{scope}, rolled up from "
        "`kb_ingestion_metrics` (#11639).",
        "",
        "| " + " | ".join(HEALTH_COLUMNS) + " |",
        "|---|---|" + "--:|" * len(NUMERIC_COLUMNS),
    ]
    for row in rows:
        lines.append(
            f"| {_code(row.tenant_id)} | {_code(row.repo_slug)} | {row.event_count} | "
            f"{row.ingest_events} | {row.tombstone_events} | {row.reconcile_events} | "
            f"{row.error_events} | {row.error_rate_shown} | {row.chunks_embedded} | "
            f"{row.chunks_deleted} |"
        )
    lines.append("")
    return "\n".join(lines)
