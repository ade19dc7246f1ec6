"""Where things stand: the queue, the dead letters, the graph, each daemon's last tick, each
tenant's drift and the recent alerts, gathered into one plain dict (`gather_status`) and
rendered as a table for a person (`render_status_text`).

Status is what an operator runs while the daemons are busy, often because something looks
wrong, so it must never make things worse:
- it never opens Chroma (an embedded store admits one process, the daemons' own), and never
  imports it (seconds of start-up for nothing);
- it never writes: SQLite is opened read-only, the queue files are only read. A missing
  database or queue file means "nothing yet", not an error;
- it reads files as streams of bounded lines, so a queue of millions of lines, or one
  runaway line, costs a read and not the memory to hold it.

Everything it shows comes from what the daemons already record (`daemon_ticks`, telemetry,
`alerts_fired`, the files), so it is exactly as fresh as the last tick.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from core.alerting import recent_alerts
from core.rules.alert_rules import channel_label
from core.rules.config import Settings
from core.rules.nodes import MEMORY_LABEL, SESSION_LABEL
from core.rules.queue_lines import DRAIN_KEY, MAX_LINE_BYTES
from core.rules.timestamps import epoch_ms_from_created_at, iso_from_ms
from core.stores.clock import now_ms
from core.stores.daemon_state import last_ticks
from core.stores.queue_files import DEAD_LETTER_RECORD_LIMIT, iter_bounded_lines
from core.stores.sqlite import GraphDB
from core.stores.telemetry import last_stale_counts
from core.stores.tenants import list_tenants

#: The reason shown for a dead-letter line that is not a readable record (a torn write).
UNREADABLE_DEAD_LETTER = "unreadable"

# --------------------------------------------------------------------------------------------
# Files (blocking; called through asyncio.to_thread)
# --------------------------------------------------------------------------------------------


def line_time(raw: bytes) -> tuple[int, str] | None:
    """When a queue line was written, as (epoch ms, which field said so): its `timestamp`
    (ISO-8601 or epoch), else the drainer's `_drain.lastAttemptAt`; None when neither."""
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


@dataclass(slots=True)
class QueueFileStatus:
    """A queue file (`lazy-edges.jsonl` or its `.draining`): size and age."""

    path: Path
    present: bool = False
    lines: int = 0
    bytes: int = 0
    #: Lines the drainer put back after a failed attempt (they carry `_drain`).
    retried_lines: int = 0
    oldest_ms: int | None = None
    #: Where `oldest_ms` came from: "timestamp", "lastAttemptAt", or "mtime".
    oldest_from: str | None = None

    def as_dict(self) -> dict[str, Any]:
        """The JSON shape of `status --json`."""
        return {
            "path": str(self.path),
            "present": self.present,
            "lines": self.lines,
            "bytes": self.bytes,
            "retriedLines": self.retried_lines,
            "oldestTimestamp": self.oldest_ms,
            "oldestTimestampIso": iso_from_ms(self.oldest_ms) if self.oldest_ms is not None
            else None,
            "oldestFrom": self.oldest_from,
        }


@dataclass(frozen=True, slots=True)
class _OpenFile:
    """A file being read: its size and mtime when opened, and its non-blank lines."""

    size: int
    mtime_ms: int
    lines: Iterator[bytes | None]


@contextmanager
def _open_lines(path: Path, *, limit: int = MAX_LINE_BYTES) -> Iterator[_OpenFile | None]:
    """The non-blank bounded lines of `path` (see `iter_bounded_lines`); None when the file
    does not exist, which for every file status reads means "nothing yet"."""
    try:
        stream = open(path, "rb")  # noqa: SIM115 - closed by the with below
    except FileNotFoundError:
        yield None
        return
    with stream:
        info = os.fstat(stream.fileno())
        lines = (raw for raw in iter_bounded_lines(stream, limit=limit)
                 if raw is None or raw.strip())
        yield _OpenFile(info.st_size, int(info.st_mtime * 1000), lines)


def read_queue_file(path: Path) -> QueueFileStatus:
    """Count a queue file's non-blank lines and find its oldest line's time; the file's
    mtime stands in when no line carries one."""
    status = QueueFileStatus(path)
    drain_marker = b'"' + DRAIN_KEY.encode() + b'"'
    with _open_lines(path) as opened:
        if opened is None:
            return status
        status.present, status.bytes = True, opened.size
        for raw in opened.lines:
            status.lines += 1
            if raw is None:
                continue
            if drain_marker in raw:
                status.retried_lines += 1
            found = line_time(raw)
            if found is not None and (status.oldest_ms is None or found[0] < status.oldest_ms):
                status.oldest_ms, status.oldest_from = found
        if status.oldest_ms is None and status.lines:
            status.oldest_ms, status.oldest_from = opened.mtime_ms, "mtime"
    return status


@dataclass(slots=True)
class DeadLetterStatus:
    """The dead-letter file: how many lines, by reason, and the latest."""

    path: Path
    present: bool = False
    total: int = 0
    bytes: int = 0
    by_reason: Counter[str] = field(default_factory=Counter)
    last_dead_ms: int | None = None

    def as_dict(self) -> dict[str, Any]:
        """The JSON shape of `status --json`."""
        return {
            "path": str(self.path),
            "present": self.present,
            "total": self.total,
            "bytes": self.bytes,
            "byReason": dict(sorted(self.by_reason.items())),
            "lastDeadAt": self.last_dead_ms,
            "lastDeadAtIso": iso_from_ms(self.last_dead_ms) if self.last_dead_ms is not None
            else None,
        }


def read_dead_letters(path: Path) -> DeadLetterStatus:
    """Count the dead-letter records by their `reason` (a torn record is `unreadable`). A
    record quotes a line of up to MAX_LINE_BYTES, escaped: it is read whole up to
    DEAD_LETTER_RECORD_LIMIT."""
    status = DeadLetterStatus(path)
    with _open_lines(path, limit=DEAD_LETTER_RECORD_LIMIT) as opened:
        if opened is None:
            return status
        status.present, status.bytes = True, opened.size
        for raw in opened.lines:
            status.total += 1
            reason, dead_at = _dead_letter_fields(raw)
            status.by_reason[reason] += 1
            if dead_at is not None and (status.last_dead_ms is None
                                        or dead_at > status.last_dead_ms):
                status.last_dead_ms = dead_at
    return status


def _dead_letter_fields(raw: bytes | None) -> tuple[str, int | None]:
    if raw is None:
        return UNREADABLE_DEAD_LETTER, None
    try:
        record = json.loads(raw)
    except ValueError:
        return UNREADABLE_DEAD_LETTER, None
    if not isinstance(record, dict):
        return UNREADABLE_DEAD_LETTER, None
    reason = record.get("reason")
    dead_at = record.get("deadAt")
    return (
        reason if isinstance(reason, str) and reason else UNREADABLE_DEAD_LETTER,
        dead_at if isinstance(dead_at, int) and not isinstance(dead_at, bool) else None,
    )


# --------------------------------------------------------------------------------------------
# SQLite (read-only)
# --------------------------------------------------------------------------------------------

_PROVENANCE_COUNTS = f"""
SELECT label,
       COUNT(*),
       SUM(CASE WHEN json_valid(properties) THEN json_extract(properties, '$.backfilled') = 1 END),
       SUM(CASE WHEN json_valid(properties) THEN json_extract(properties, '$.liveIngested') = 1
           END),
       SUM(CASE WHEN json_valid(properties) THEN json_extract(properties, '$.minimal') = 1 END)
FROM nodes WHERE label IN ('{MEMORY_LABEL}', '{SESSION_LABEL}') GROUP BY label
"""


def _empty_graph(path: Path, *, present: bool) -> dict[str, Any]:
    blank = {"total": 0, "backfilled": 0, "liveIngested": 0, "minimal": 0}
    return {"path": str(path), "present": present, "nodes": 0, "edges": 0,
            "memories": dict(blank), "sessions": dict(blank)}


async def _tables(graph: GraphDB) -> set[str]:
    rows = await graph.fetch_all("SELECT name FROM sqlite_master WHERE type = 'table'")
    return {str(r[0]) for r in rows}


async def _graph_counts(graph: GraphDB, tables: set[str], *, path: Path) -> dict[str, Any]:
    """Nodes, edges, and MEMORY / SESSION nodes by provenance marker."""
    result = _empty_graph(path, present=True)
    if "nodes" in tables:
        result["nodes"] = int((await graph.fetch_all("SELECT COUNT(*) FROM nodes"))[0][0])
        for label, total, backfilled, live, minimal in await graph.fetch_all(_PROVENANCE_COUNTS):
            key = "memories" if label == MEMORY_LABEL else "sessions"
            result[key] = {"total": int(total), "backfilled": int(backfilled or 0),
                           "liveIngested": int(live or 0), "minimal": int(minimal or 0)}
    if "edges" in tables:
        result["edges"] = int((await graph.fetch_all("SELECT COUNT(*) FROM edges"))[0][0])
    return result


#: `scheme://user:password@` in free text: what an older version's alerting figures could hold.
_URL_CREDENTIALS = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*://)[^/\s@]+@")


def without_url_credentials(value: Any) -> Any:
    """`value` (figures: dicts, lists, strings) with any URL user-info removed and every
    `channel` redacted. Figures recorded by this version hold none; an alerting tick recorded
    by an older one may, until the next alerting tick replaces it."""
    if isinstance(value, str):
        return _URL_CREDENTIALS.sub(r"\1", value)
    if isinstance(value, list):
        return [without_url_credentials(v) for v in value]
    if isinstance(value, dict):
        return {k: channel_label(v) if k == "channel" and isinstance(v, str)
                else without_url_credentials(v) for k, v in value.items()}
    return value


async def _ticks(graph: GraphDB, tables: set[str]) -> dict[str, Any]:
    if "daemon_ticks" not in tables:
        return {}
    return {
        name: {
            "startedAt": record.started_at,
            "startedAtIso": iso_from_ms(record.started_at),
            "finishedAt": record.finished_at,
            "durationMs": record.duration_ms,
            "ok": record.ok,
            "figures": without_url_credentials(record.figures),
        }
        for name, record in sorted((await last_ticks(graph)).items())
    }


async def _tenants(graph: GraphDB, tables: set[str]) -> list[dict[str, Any]]:
    """Every configured tenant with its version and latest stale report, plus any tenant that
    has a report but no configuration node (version 0: it was removed or never configured)."""
    configs = {t.tenant_id: t for t in await list_tenants(graph)} if "nodes" in tables else {}
    reports = (await last_stale_counts(graph)
               if "kb_ingestion_metrics" in tables else {})
    tenants: list[dict[str, Any]] = []
    for tenant_id in sorted(set(configs) | set(reports)):
        config = configs.get(tenant_id)
        report = reports.get(tenant_id)
        tenants.append({
            "tenantId": tenant_id,
            "repoSlug": (config.repo_slug if config is not None else None)
            or (report.repo_slug if report is not None else None),
            "currentVersion": config.version if config is not None else 0,
            "lastStaleCount": report.stale_count if report is not None else None,
            "lastTombstonedCount": report.tombstoned_count if report is not None else None,
            "lastReportAt": report.timestamp_ms if report is not None else None,
            "lastReportAtIso": iso_from_ms(report.timestamp_ms) if report is not None else None,
        })
    return tenants


async def _alerts(graph: GraphDB, tables: set[str]) -> list[dict[str, Any]]:
    if "alerts_fired" not in tables:
        return []
    alerts = []
    for alert in await recent_alerts(graph):
        shown = alert.as_dict()
        shown["firedAtIso"] = iso_from_ms(alert.fired_at_ms)
        alerts.append(shown)
    return alerts


# --------------------------------------------------------------------------------------------
# Gathering
# --------------------------------------------------------------------------------------------


async def gather_status(settings: Settings, *, now: int | None = None) -> dict[str, Any]:
    """Everything `daemons.status` shows, as one JSON-ready dict. Read-only; never opens
    Chroma; a missing file or database is shown as absent, not raised."""
    queue, draining, dead = await asyncio.gather(
        asyncio.to_thread(read_queue_file, settings.lazy_edges_queue_path),
        asyncio.to_thread(read_queue_file, settings.draining_path),
        asyncio.to_thread(read_dead_letters, settings.dead_letter_path),
    )
    status: dict[str, Any] = {
        "generatedAt": now if now is not None else now_ms(),
        "config": {
            "source": str(settings.source) if settings.source is not None else None,
            "dataDir": str(settings.data_dir),
            "chroma": settings.chroma_url if settings.server_mode else str(settings.chroma_path),
        },
        "queue": queue.as_dict(),
        "draining": draining.as_dict(),
        "deadLetters": dead.as_dict(),
    }
    path = settings.graph_db_path
    if not path.exists():
        status.update(graph=_empty_graph(path, present=False), ticks={}, tenants=[], alerts=[])
        return status
    graph = await GraphDB.open(path, read_only=True)
    try:
        tables = await _tables(graph)
        status["graph"] = await _graph_counts(graph, tables, path=path)
        status["ticks"] = await _ticks(graph, tables)
        status["tenants"] = await _tenants(graph, tables)
        status["alerts"] = await _alerts(graph, tables)
    finally:
        await graph.close()
    return status


# --------------------------------------------------------------------------------------------
# Rendering (pure)
# --------------------------------------------------------------------------------------------


def _ago(then_ms: int | None, now_ms_: int) -> str:
    """`2026-11-29T14:20:01Z (3m ago)`, or `-` when unknown."""
    if then_ms is None:
        return "-"
    seconds = max(0, (now_ms_ - then_ms) // 1000)
    if seconds < 120:
        age = f"{seconds}s"
    elif seconds < 7200:
        age = f"{seconds // 60}m"
    elif seconds < 172_800:
        age = f"{seconds // 3600}h"
    else:
        age = f"{seconds // 86_400}d"
    return f"{iso_from_ms(then_ms)} ({age} ago)"


def _table(
    headers: Sequence[str], rows: Sequence[Sequence[Any]], *, indent: str = "  "
) -> list[str]:
    """Left-aligned columns as wide as their widest cell."""
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


def render_status_text(status: Mapping[str, Any]) -> str:
    """The status as a few readable tables for a terminal."""
    now = int(status["generatedAt"])
    config = status["config"]
    out = [f"kb-daemons status at {iso_from_ms(now)}  "
           f"(config: {config['source'] or 'built-in defaults'}; data: {config['dataDir']})"]

    graph = status["graph"]
    out.append("")
    out.append(f"Graph  {graph['path']}" + ("" if graph["present"] else "  (not created yet)"))
    if graph["present"]:
        out.append(f"  {graph['nodes']} nodes, {graph['edges']} edges")
        out.extend(_table(
            ["kind", "total", "live-ingested", "back-filled", "of which minimal"],
            [[kind, graph[key]["total"], graph[key]["liveIngested"], graph[key]["backfilled"],
              graph[key]["minimal"]] for kind, key in (("memories", "memories"),
                                                       ("sessions", "sessions"))],
        ))

    out.append("")
    out.append("Lazy-edge queue")
    files = [("queue", status["queue"]), (".draining", status["draining"])]
    out.extend(_table(
        ["file", "lines", "bytes", "retried", "oldest line", "path"],
        [[name, f["lines"] if f["present"] else "absent", f["bytes"] if f["present"] else None,
          f["retriedLines"] if f["present"] else None,
          (_ago(f["oldestTimestamp"], now) + f" [{f['oldestFrom']}]")
          if f["oldestTimestamp"] is not None else None, f["path"]] for name, f in files],
    ))
    dead = status["deadLetters"]
    reasons = ", ".join(f"{r} {n}" for r, n in dead["byReason"].items()) or "none"
    out.append(f"  dead letters: {dead['total']} ({reasons})"
               + (f", last {_ago(dead['lastDeadAt'], now)}" if dead["lastDeadAt"] else "")
               + f"  {dead['path']}")

    out.append("")
    out.append("Last ticks")
    if not status["ticks"]:
        out.append("  none recorded yet")
    for daemon, tick in status["ticks"].items():
        out.append(f"  {daemon}: {'ok' if tick['ok'] else 'FAILED'}, started "
                   f"{_ago(tick['startedAt'], now)}, took {tick['durationMs']} ms")
        out.extend(_wrap(flatten_figures(tick["figures"]), indent="    "))

    out.append("")
    out.append("Tenants (stale counts from each tenant's latest reconcile report; "
               "a clean pass writes none)")
    if not status["tenants"]:
        out.append("  none configured")
    else:
        out.extend(_table(
            ["tenant", "repo", "version", "last stale", "tombstoned", "reported"],
            [[t["tenantId"], t["repoSlug"], t["currentVersion"], t["lastStaleCount"],
              t["lastTombstonedCount"], _ago(t["lastReportAt"], now)] for t in status["tenants"]],
        ))

    out.append("")
    out.append("Recent alerts")
    if not status["alerts"]:
        out.append("  none")
    else:
        out.extend(_table(
            ["fired", "tenant", "repo", "metric", "value", "threshold", "severity", "channel",
             "delivered"],
            [[_ago(a["firedAt"], now), a["tenantId"], a["repoSlug"], a["metric"], a["value"],
              a["threshold"], a["severity"], a["channel"],
              "yes" if a["delivered"] else f"no: {a['error']}"] for a in status["alerts"]],
        ))
    return "\n".join(out) + "\n"
