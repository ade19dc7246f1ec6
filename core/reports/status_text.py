"""The status as a few readable tables for a terminal (pure: a `StatusReport` in, text out)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from core.reports.status import QueueFileStatus, StatusReport
from core.rules.timestamps import iso_from_ms


def ago(then_ms: int | None, now_ms: int) -> str:
    """`2026-11-29T14:20:01Z (3m ago)`, or `-` when unknown."""
    if then_ms is None:
        return "-"
    seconds = max(0, (now_ms - then_ms) // 1000)
    if seconds < 120:
        age = f"{seconds}s"
    elif seconds < 7200:
        age = f"{seconds // 60}m"
    elif seconds < 172_800:
        age = f"{seconds // 3600}h"
    else:
        age = f"{seconds // 86_400}d"
    return f"{iso_from_ms(then_ms)} ({age} ago)"


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]], *, indent: str = "  "
          ) -> list[str]:
    """Left-aligned columns as wide as their widest cell (None shows as `-`)."""
    cells = [[str(h) for h in headers], *[[("-" if c is None else str(c)) for c in r]
                                         for r in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    return [indent + "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
            for row in cells]


def flatten_figures(figures: Mapping[str, Any], prefix: str = "") -> list[str]:
    """`key=value` for every scalar figure, nested keys joined by dots; a list shows its
    length (the per-tenant details are in the tenants table and in `--json`)."""
    parts: list[str] = []
    for key, value in figures.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            parts.extend(flatten_figures(value, prefix=f"{name}."))
        elif isinstance(value, list):
            parts.append(f"{name}=<{len(value)} items>")
        else:
            parts.append(f"{name}={value}")
    return parts


def _wrap(parts: Sequence[str], *, indent: str, width: int = 100) -> list[str]:
    lines: list[str] = []
    current = indent
    for part in parts:
        if current.strip() and len(current) + 1 + len(part) > width:
            lines.append(current)
            current = indent
        current += (" " if current.strip() else "") + part
    if current.strip():
        lines.append(current)
    return lines


def _graph_section(status: StatusReport) -> list[str]:
    graph = status.graph
    out = ["", f"Graph  {graph.path}" + ("" if graph.present else "  (not created yet)")]
    if graph.present:
        out.append(f"  {graph.nodes} nodes, {graph.edges} edges")
        out.extend(table(
            ["kind", "total", "live-ingested", "back-filled", "of which minimal"],
            [[kind, p.total, p.live_ingested, p.backfilled, p.minimal]
             for kind, p in (("memories", graph.memories), ("sessions", graph.sessions))],
        ))
    return out


def _queue_row(name: str, f: QueueFileStatus, now: int) -> list[Any]:
    oldest = (ago(f.oldest_timestamp, now) + f" [{f.oldest_from}]"
              if f.oldest_timestamp is not None else None)
    if not f.present:
        return [name, "absent", None, None, oldest, f.path]
    return [name, f.lines, f.bytes, f.retried_lines, oldest, f.path]


def _queue_section(status: StatusReport, now: int) -> list[str]:
    out = ["", "Lazy-edge queue"]
    out.extend(table(["file", "lines", "bytes", "retried", "oldest line", "path"],
                     [_queue_row("queue", status.queue, now),
                      _queue_row(".draining", status.draining, now)]))
    dead = status.dead_letters
    reasons = ", ".join(f"{r} {n}" for r, n in dead.by_reason.items()) or "none"
    out.append(f"  dead letters: {dead.total} ({reasons})"
               + (f", last {ago(dead.last_dead_at, now)}" if dead.last_dead_at else "")
               + f"  {dead.path}")
    return out


def _ticks_section(status: StatusReport, now: int) -> list[str]:
    out = ["", "Last ticks"]
    if not status.ticks:
        out.append("  none recorded yet")
    for daemon, tick in status.ticks.items():
        out.append(f"  {daemon}: {'ok' if tick.ok else 'FAILED'}, started "
                   f"{ago(tick.started_at, now)}, took {tick.duration_ms} ms")
        out.extend(_wrap(flatten_figures(tick.figures), indent="    "))
    return out


def _tenants_section(status: StatusReport, now: int) -> list[str]:
    out = ["", "Tenants (stale counts from each tenant's latest reconcile report; "
           "a clean pass writes none)"]
    if not status.tenants:
        out.append("  none configured")
        return out
    out.extend(table(
        ["tenant", "repo", "version", "last stale", "orphaned", "missing paths", "tombstoned",
         "reported"],
        [[t.tenant_id, t.repo_slug, t.current_version, t.last_stale_count,
          t.last_manifest_orphan_count, t.last_missing_path_count, t.last_tombstoned_count,
          ago(t.last_report_at, now)] for t in status.tenants],
    ))
    return out


def _alerts_section(status: StatusReport, now: int) -> list[str]:
    out = ["", "Recent alerts"]
    if not status.alerts:
        out.append("  none")
        return out
    out.extend(table(
        ["fired", "tenant", "repo", "metric", "value", "threshold", "severity", "channel",
         "delivered"],
        [[ago(a.fired_at, now), a.tenant_id, a.repo_slug, a.metric, a.value, a.threshold,
          a.severity, a.channel, "yes" if a.delivered else f"no: {a.error}"]
         for a in status.alerts],
    ))
    return out


def render_status_text(status: StatusReport) -> str:
    """The status as a few readable tables for a terminal."""
    now = status.generated_at
    config = status.config
    out = [f"kb-daemons status at {iso_from_ms(now)}  "
           f"(config: {config.source or 'built-in defaults'}; data: {config.data_dir})"]
    out += _graph_section(status)
    out += _queue_section(status, now)
    out += _ticks_section(status, now)
    out += _tenants_section(status, now)
    out += _alerts_section(status, now)
    return "\n".join(out) + "\n"
