"""`kb-status --health`: the original's `KB Multi-Tenant Health` view, gathered and rendered.

Like the rest of status (`core.suite.status`) it never opens Chroma and never writes; a
missing database or one without telemetry yet is an empty window, not an error.

Three renderings of one `HealthReport`: a text table for a person (`core.base.reports.tables`), the
original's Markdown section for pasting (`core.alerting.rules.health.markdown_section`), and its
JSON (`core.base.rules.camel_json.to_json`).
"""

from __future__ import annotations

from dataclasses import dataclass

from core.alerting.rules.health import (
    HEALTH_COLUMNS,
    HEALTH_TITLE,
    NUMERIC_COLUMNS,
    HealthRow,
    markdown_section,
    window_label,
    window_start,
)
from core.alerting.stores.health import health_rollup
from core.base.config.config import Settings
from core.base.io.clock import now_ms
from core.base.reports.tables import DEFAULT_WIDTH, as_text, table
from core.base.rules.timestamps import iso_from_ms
from core.base.state.state import open_graph

_TELEMETRY_TABLE = "kb_ingestion_metrics"


@dataclass(frozen=True, slots=True)
class HealthReport:
    """The health view of one window: `[sinceMs, now]`, one row per (tenant, repo)."""

    generated_at: int
    days: int
    since_ms: int
    since_iso: str
    rows: tuple[HealthRow, ...]


async def gather_health(settings: Settings, *, days: int, now: int | None = None) -> HealthReport:
    """The rolled-up telemetry of the last `days` days. Read-only; never opens Chroma; a store
    not created yet, or without the telemetry table, gives an empty window."""
    generated = now if now is not None else now_ms()
    since = window_start(generated, days)
    rows: tuple[HealthRow, ...] = ()
    if settings.state.url or settings.state.graph_db_path.exists():
        graph = await open_graph(settings.state, read_only=True)
        try:
            if _TELEMETRY_TABLE in await graph.table_names():
                rows = tuple(await health_rollup(graph, since))
        finally:
            await graph.close()
    return HealthReport(generated, days, since, _since_iso(since), rows)


def _since_iso(since_ms: int) -> str:
    try:
        return iso_from_ms(since_ms)
    except (OverflowError, ValueError, OSError):
        return "the oldest event"


def _no_events(report: HealthReport) -> str:
    return f"No telemetry events in the {window_label(report.days)} (since {report.since_iso})."


def render_health_text(report: HealthReport, *, width: int = DEFAULT_WIDTH) -> str:
    """The table for a person: the original's columns, numbers right-aligned, one line per
    (tenant, repo), or one sentence when the window holds no event."""
    title = f"{HEALTH_TITLE} ({window_label(report.days)}, since {report.since_iso})"
    if not report.rows:
        return as_text(title, _no_events(report), width=width)
    return as_text(table(title, HEALTH_COLUMNS, [row.cells() for row in report.rows],
                         numeric=NUMERIC_COLUMNS), width=width)


def render_health_markdown(report: HealthReport) -> str:
    """The original's Markdown section; for an empty window (where the original prints
    nothing) its heading and one sentence, so a pasted report still says it looked."""
    section = markdown_section(report.rows, label=window_label(report.days))
    if section:
        return section
    return f"## {HEALTH_TITLE}\n\n{_no_events(report)}\n"
