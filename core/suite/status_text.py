"""The status as a few tables a person reads in ten seconds (pure: a `StatusReport` in, text
out; rich draws the tables).

Every figure is said in words: a tick's figures become one phrase ("1,000 lines: 950 linked,
40 re-queued"), never a dump of `key=value` pairs (those are in `--json`); the node total is
shown beside a breakdown that adds up to it; the queue's oldest line is dated by the line's own
`timestamp` where it has one, and the table says which time it used.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from core.base.reports.tables import DEFAULT_WIDTH, as_text, table
from core.base.rules.timestamps import iso_from_ms
from core.drain.rules.drainers import shown_name
from core.suite.status import NOT_ELECTED, QueueFileStatus, StatusReport, TickShown

#: What the "oldest line" time was read from, in words.
_OLDEST_FROM = {"timestamp": "its timestamp", "lastAttemptAt": "its last attempt",
                "mtime": "the file's mtime"}


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


def _n(figures: Mapping[str, Any], key: str) -> int:
    value = figures.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _plural(number: int, noun: str, plural: str | None = None) -> str:
    return f"{number:,} {noun if number == 1 else (plural or noun + 's')}"


def _drain_phrase(drain: Mapping[str, Any]) -> str:
    if not _n(drain, "totalLines"):
        return "queue empty"
    phrase = (f"{_plural(_n(drain, 'totalLines'), 'line')}: {_n(drain, 'succeeded'):,} linked, "
              f"{_n(drain, 'requeued'):,} re-queued, {_n(drain, 'deadLettered'):,} "
              "dead-lettered")
    return phrase + (" (stopped mid-drain)" if drain.get("interrupted") else "")


def _ingest_phrase(live: Mapping[str, Any]) -> str:
    if "skipped" in live:
        return "ingestion skipped"
    return (f"{_plural(_n(live, 'sessionsUpserted'), 'session')} and "
            f"{_plural(_n(live, 'memoriesUpserted'), 'memory', 'memories')} ingested")


def tick_phrase(figures: Mapping[str, Any]) -> str:
    """What a recorded tick did, in words, from the figures it recorded (any daemon's, any
    version's: an unknown shape gives an empty phrase, never an error)."""
    parts: list[str] = []
    if isinstance(figures.get("error"), str):
        parts.append(f"error: {figures['error']}")
    live, drain = figures.get("liveIngest"), figures.get("drain")
    if isinstance(live, Mapping):
        parts.append(_ingest_phrase(live))
    if isinstance(drain, Mapping):
        parts.append(_drain_phrase(drain))
    if figures.get("enabled") is False and "tenants" in figures and "passId" not in figures:
        parts.append("disabled")
    elif isinstance(figures.get("tenants"), list):
        parts.append(f"{_plural(len(figures['tenants']), 'tenant')}, "
                     f"{_n(figures, 'staleCount'):,} stale, "
                     + (f"{_n(figures, 'manifestOrphanCount'):,} orphaned by path, "
                        if _n(figures, "manifestOrphanCount") else "")
                     + (f"{_plural(_n(figures, 'missingPathCount'), 'missing path')}, "
                        if _n(figures, "missingPathCount") else "")
                     + f"{_n(figures, 'tombstonedCount'):,} tombstoned"
                     + (f", {_n(figures, 'failedTenants'):,} failed"
                        if _n(figures, "failedTenants") else ""))
    if "fired" in figures and "rules" in figures:
        parts.append(f"{_plural(_n(figures, 'fired'), 'alert')} fired")
    if "days" in figures:
        parts.insert(0, f"last {_plural(_n(figures, 'days'), 'day')}")
    if isinstance(figures.get("incomplete"), str):
        parts.append(f"not complete: {figures['incomplete']}")
    return "; ".join(parts)


def _took(duration_ms: int) -> str:
    return f"{duration_ms} ms" if duration_ms < 1000 else f"{duration_ms / 1000:,.1f} s"


def _files_part(status: StatusReport) -> list[Any]:
    return [table("Files", ["what", "path"],
                  [["graph", status.graph.path], ["queue", status.queue.path],
                   ["dead letters", status.dead_letters.path],
                   ["archives", status.archives.path]])]


def _archives_part(status: StatusReport, now: int) -> list[Any]:
    """The archive folder in one line: how many, their bytes, and the newest (kb-reconcile
    archives lists them all)."""
    folder = status.archives
    if not folder.count:
        return ["Archives: none yet (a pass archives chunks before it tombstones them)"]
    newest = folder.newest
    said = ""
    if newest is not None:
        whose = (f"tenant {newest.tenant_id}, created {ago(newest.created_at, now)}"
                 if newest.problem is None else newest.problem)
        said = f"; newest {newest.name} ({whose})"
    return [f"Archives: {_plural(folder.count, 'file')}, {folder.bytes:,} bytes{said}; "
            "kb-reconcile archives lists them"]


def _result(tick: TickShown) -> str:
    if tick.ok:
        return "ok"
    return "not complete" if "incomplete" in tick.figures else "FAILED"


def _graph_part(status: StatusReport) -> list[Any]:
    graph = status.graph
    if not graph.present:
        return [f"Graph: not created yet ({graph.path})"]
    other = graph.nodes - graph.memories.total - graph.sessions.total
    rows = [[kind, p.total, p.live_ingested, p.backfilled, p.minimal]
            for kind, p in (("memories", graph.memories), ("sessions", graph.sessions))]
    rows.append(["other nodes (concepts, tenants, ...)", other, None, None, None])
    rows.append(["all nodes", graph.nodes, None, None, None])
    schema = "" if graph.neo is None else f" (neo.mjs graph, {graph.neo.era})"
    part: list[Any] = [table(
        f"Graph{schema}: {_plural(graph.nodes, 'node')}, {_plural(graph.edges, 'edge')}",
        ["nodes", "count", "live-ingested", "back-filled", "of which minimal"],
        rows, numeric=["count", "live-ingested", "back-filled", "of which minimal"])]
    return part + _original_tables_part(status)


def _original_tables_part(status: StatusReport) -> list[Any]:
    """A neo.mjs graph's own tables and its nodes by label (nothing for this project's)."""
    neo = status.graph.neo
    if neo is None:
        return []
    version = f", SchemaVersion {neo.schema_version}" if neo.schema_version is not None else ""
    log = neo.graph_log if neo.graph_log is not None else "absent"
    rows: list[list[Any]] = [["Nodes", neo.nodes], ["Edges", neo.edges], ["GraphLog", log]]
    rows += [[f"  label {label or '(none)'}", count]
             for label, count in neo.nodes_by_label.items()]
    return [table(f"neo.mjs tables ({neo.era}{version})", ["table", "rows"], rows,
                  numeric=["rows"])]


def _queue_row(name: str, f: QueueFileStatus, now: int) -> list[Any]:
    if not f.present:
        return [name, "absent", None, None, None]
    oldest = None
    if f.oldest_timestamp is not None:
        source = _OLDEST_FROM.get(str(f.oldest_from), str(f.oldest_from))
        oldest = f"{ago(f.oldest_timestamp, now)}, from {source}"
    return [name, f.lines, f.bytes, f.retried_lines, oldest]


def _queue_part(status: StatusReport, now: int) -> list[Any]:
    dead = status.dead_letters
    reasons = ", ".join(f"{r} {n:,}" for r, n in dead.by_reason.items()) or "none"
    last = f", last {ago(dead.last_dead_at, now)}" if dead.last_dead_at else ""
    return [table("Lazy-edge queue",
                  ["file", "lines", "bytes", "re-queued", "oldest line"],
                  [_queue_row("queue", status.queue, now),
                   _queue_row(".draining", status.draining, now)],
                  numeric=["lines", "bytes", "re-queued"]),
            f"dead letters: {dead.total:,} ({reasons}){last}"]


def _ticks_part(status: StatusReport, now: int) -> list[Any]:
    if not status.ticks:
        return ["Last ticks: none recorded yet"]
    return [table("Last ticks", ["job", "started", "result", "took", "what it did"],
                  [[name, ago(t.started_at, now), _result(t), _took(t.duration_ms),
                    tick_phrase(t.figures)] for name, t in status.ticks.items()])]


def _leader_part(status: StatusReport) -> list[Any]:
    leader = status.leader
    if leader.election == NOT_ELECTED:
        return ["Reconcile leader: no election (SQLite state: the passes run where "
                "kb-reconcile runs, on this host)"]
    if leader.holder is None:
        return ["Reconcile leader: nobody (no kb-reconcile daemon holds the PostgreSQL lock)"]
    return [f"Reconcile leader: {leader.holder} (holds the PostgreSQL lock)"]


def _drainers_part(status: StatusReport, now: int) -> list[Any]:
    """Every drainer's last tick and the queue figures it recorded (a SQLite file has one
    drainer, this host's; a shared PostgreSQL state has one per host)."""
    if not status.drainers:
        return ["Drainers: none has ticked yet"]
    rows = []
    for d in status.drainers:
        name = (shown_name(d.drainer) + (" (this host)" if d.local else "")
                + (" (gone)" if d.gone else ""))
        rows.append([name, d.host or "-", ago(d.last_tick.started_at, now),
                     _result(d.last_tick), _took(d.last_tick.duration_ms),
                     tick_phrase(d.last_tick.figures), d.queue_lines,
                     None if d.draining is None else ("left" if d.draining else "no"),
                     d.dead_letters])
    part: list[Any] = [table("Drainers (queue figures as each recorded them at its last tick)",
                             ["drainer", "host", "last tick", "result", "took", "what it did",
                              "queue lines", ".draining", "dead letters"],
                             rows, numeric=["queue lines", "dead letters"])]
    gone = [shown_name(d.drainer) for d in status.drainers if d.gone]
    if gone:
        part.append(f"Gone (no tick for drainerGoneIntervals x remIntervalMs): {', '.join(gone)}; "
                    "`kb-drain forget DRAINER` removes one's row")
    return part


def _tenants_part(status: StatusReport, now: int) -> list[Any]:
    if not status.tenants:
        return ["Tenants: none configured (kb-tenants set-config TENANT --repo-slug R)"]
    return [table("Tenants (counts from each tenant's latest reconcile report; a clean pass "
                  "writes none)",
                  ["tenant", "repo", "version", "last stale", "orphaned", "missing paths",
                   "tombstoned", "held by", "restore-held", "reported"],
                  [[t.tenant_id, t.repo_slug, t.current_version, t.last_stale_count,
                    t.last_manifest_orphan_count, t.last_missing_path_count,
                    t.last_tombstoned_count, t.last_guard, t.restore_held_count,
                    ago(t.last_report_at, now)]
                   for t in status.tenants],
                  numeric=["version", "last stale", "orphaned", "missing paths", "tombstoned",
                           "restore-held"]),
            *_holds_hint(status)]


def _holds_hint(status: StatusReport) -> list[str]:
    held = [t.tenant_id for t in status.tenants if t.restore_held_count]
    if not held:
        return []
    return [f"  restore-held: chunks a restore put back; no pass deletes them until the "
            f"tenant's evidence changes (kb-tenants release {held[0]} lifts the hold)"]


def _alerts_part(status: StatusReport, now: int) -> list[Any]:
    if not status.alerts:
        return ["Recent alerts: none"]
    return [table("Recent alerts",
                  ["fired", "tenant", "metric", "value", "threshold", "severity", "channel",
                   "delivered"],
                  [[ago(a.fired_at, now), a.tenant_id, a.metric, a.value, a.threshold,
                    a.severity, a.channel, "yes" if a.delivered else f"no: {a.error}"]
                   for a in status.alerts])]


def render_status_text(status: StatusReport, *, header: bool = True,
                       width: int = DEFAULT_WIDTH) -> str:
    """The status as a few readable tables for a terminal; `header` (when and from which
    config) is left out where the caller already said so (the demo)."""
    now = status.generated_at
    config = status.config
    parts: list[Any] = []
    if header:
        parts += [f"kb-daemons status at {iso_from_ms(now)}  (config: "
                  f"{config.source or 'built-in defaults'}; data: {config.data_dir}; "
                  f"chroma: {config.chroma}"
                  + (f"; memory core: {config.memory_core_chroma}"
                     if config.memory_core_chroma else "") + ")", ""]
    for section in (_graph_part(status), _queue_part(status, now), _ticks_part(status, now),
                    _drainers_part(status, now), _leader_part(status),
                    _tenants_part(status, now), _alerts_part(status, now),
                    _archives_part(status, now), _files_part(status)):
        parts += [*section, ""]
    return as_text(*parts[:-1], width=width)
