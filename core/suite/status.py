"""Where things stand, gathered: the queue, the dead letters, the graph, each daemon's last tick,
each tenant's drift, the recent alerts and the archive folder, as one typed `StatusReport`
(its JSON is what `status --json` prints; `core.suite.status_text` renders it for a person).

Status is what an operator runs while the daemons are busy, often because something looks
wrong, so it must never make things worse:
- it never opens Chroma (an embedded store admits one process, the daemons' own), and never
  imports it (seconds of start-up for nothing);
- it never writes: SQLite is opened read-only, the queue files are only read. A missing
  database or queue file means "nothing yet", not an error;
- it reads files as streams of bounded lines, so a queue of millions of lines, or one
  runaway line, costs a read and not the memory to hold it; of the archive folder it reads
  one `stat` per file and the newest archive's header line.

Everything it shows comes from what the daemons already record (`daemon_ticks`, each
drainer's `drainer_ticks` row, telemetry, `alerts_fired`, the files), so it is exactly as
fresh as the last tick; the one live question is who leads the reconcile passes on a
PostgreSQL state, asked of the server's lock table (`current_leader`).
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from core.alerting.rules.alert_evaluation import Delivery
from core.alerting.stores.alert_records import recent_alerts
from core.base.config.alert_channels import channel_label, scrub_secrets
from core.base.config.config import Settings
from core.base.io.clock import now_ms
from core.base.reports.graph_status import GraphStatus, graph_status
from core.base.rules.camel_json import omitted_when_none
from core.base.rules.telemetry import StaleReport
from core.base.rules.timestamps import iso_from_ms
from core.base.state.daemon_state import DRAIN_JOB, TickRecord, last_drainer_ticks, last_ticks
from core.base.state.graph_db import GraphDB
from core.base.state.postgres.leader_lock import current_leader
from core.base.state.state import open_graph, state_location
from core.base.state.telemetry import last_stale_counts
from core.base.state.tenants import list_tenants
from core.drain.rules.drainers import is_gone
from core.drain.stores.dead_letter_file import DeadLetterCounts, count_dead_letters
from core.drain.stores.drainer_queue import local_drainer
from core.drain.stores.queue_files import QueueFileCounts, describe_queue_file
from core.reconcile.stores.archives.folder import ArchiveFolder, describe_archive_folder
from core.reconcile.stores.restore_holds import hold_counts


def _iso(epoch_ms: int | None) -> str | None:
    return iso_from_ms(epoch_ms) if epoch_ms is not None else None


@dataclass(frozen=True, slots=True)
class ConfigShown:
    """Which configuration the figures come from."""

    source: str | None
    data_dir: str
    chroma: str
    #: The memory core's own server (`memoryCoreChromaUrl`); omitted when it is `chroma`'s.
    memory_core_chroma: str | None = field(default=None, metadata=omitted_when_none())


@dataclass(frozen=True, slots=True)
class QueueFileStatus:
    """A queue file (`lazy-edges.jsonl` or its `.draining`): size and age."""

    path: Path
    present: bool
    lines: int
    bytes: int
    #: Lines the drainer put back after a failed attempt (they carry `_drain`).
    retried_lines: int
    oldest_timestamp: int | None
    oldest_timestamp_iso: str | None
    #: Where `oldest_timestamp` came from: "timestamp", "lastAttemptAt", or "mtime".
    oldest_from: str | None

    @classmethod
    def of(cls, path: Path, counts: QueueFileCounts) -> QueueFileStatus:
        """The status of `path` from what the store counted."""
        return cls(path, counts.present, counts.lines, counts.bytes, counts.retried_lines,
                   counts.oldest_ms, _iso(counts.oldest_ms), counts.oldest_from)


@dataclass(frozen=True, slots=True)
class DeadLetterStatus:
    """The dead-letter file: how many lines, by reason, and the latest."""

    path: Path
    present: bool
    total: int
    bytes: int
    by_reason: dict[str, int]
    last_dead_at: int | None
    last_dead_at_iso: str | None

    @classmethod
    def of(cls, path: Path, counts: DeadLetterCounts) -> DeadLetterStatus:
        """The status of `path` from what the store counted (reasons sorted)."""
        return cls(path, counts.present, counts.total, counts.bytes,
                   dict(sorted(counts.by_reason.items())), counts.last_dead_ms,
                   _iso(counts.last_dead_ms))


@dataclass(frozen=True, slots=True)
class TickShown:
    """A daemon's last completed tick, with the figures it recorded."""

    started_at: int
    started_at_iso: str
    finished_at: int
    duration_ms: int
    ok: bool
    #: The figures as recorded (by this version or an earlier one), URL credentials removed.
    figures: dict[str, Any]


@dataclass(frozen=True, slots=True)
class DrainerShown:
    """One drainer's last tick and the queue figures it recorded with it (a host cannot read
    another host's queue; this host's queue is read live in `queue`)."""

    #: Its id (`core.drain.stores.drainer_identity`); '' for a SQLite file's one drainer.
    drainer: str
    #: The host it ran on at its last tick; None for a tick recorded before drainers had rows.
    host: str | None
    #: Whether it is this host's drainer (the id beside this host's queue).
    local: bool
    last_tick: TickShown
    #: Its queue at the end of that tick (None: recorded before drainers had rows).
    queue_lines: int | None
    draining: bool | None
    dead_letters: int | None
    #: No tick for `drainerGoneIntervals` intervals (`core.drain.rules.drainers`): it may be
    #: forgotten (`kb-drain forget`).
    gone: bool = False


#: What `leader.election` says: the reconcile passes are elected through PostgreSQL's advisory
#: lock (`stateUrl`), or there is no election (SQLite: the passes run in whichever process
#: runs kb-reconcile on this host, its lock file keeping a second one out).
ELECTED = "postgresql"
NOT_ELECTED = "none"


@dataclass(frozen=True, slots=True)
class LeaderShown:
    """Who runs the reconcile, retention and alerting passes."""

    election: str
    #: The leading session's name (`kb-reconcile@host:pid`), None when nobody holds the lock
    #: (or there is no election).
    holder: str | None


@dataclass(frozen=True, slots=True)
class TenantDrift:
    """A tenant's version and its latest stale report (a clean pass writes none)."""

    tenant_id: str
    repo_slug: str | None
    current_version: int
    #: From the tenant's latest `reconcile` row: config-stale chunks, manifest orphans, their
    #: union (each chunk once: the row's `chunks_total`) and missing paths.
    last_stale_count: int | None
    last_manifest_orphan_count: int | None
    last_total_orphan_count: int | None
    last_missing_path_count: int | None
    last_tombstoned_count: int | None
    last_report_at: int | None
    last_report_at_iso: str | None
    #: The guard that held the tenant (or some of its repos) in its latest report, if any.
    last_guard: str | None = None
    #: Chunks a restore put back and holds now (`kb-tenants release` lifts the hold).
    restore_held_count: int = 0


@dataclass(frozen=True, slots=True)
class RecentAlert:
    """One recorded alert as status shows it: the channel redacted and the error scrubbed
    (again: a row stored by an older version may still hold the full URL)."""

    fired_at: int
    tenant_id: str
    repo_slug: str
    metric: str
    value: float
    threshold: float
    severity: str
    channel: str
    subject: str
    delivered: bool
    error: str | None
    fired_at_iso: str

    @classmethod
    def of(cls, recorded: Delivery) -> RecentAlert:
        """The status line of a recorded delivery."""
        a = recorded.alert
        error = scrub_secrets(recorded.error, a.channel) if recorded.error else None
        return cls(a.fired_at_ms, a.tenant_id, a.repo_slug, a.metric, a.value, a.threshold,
                   a.severity, channel_label(a.channel), recorded.subject, recorded.delivered,
                   error, iso_from_ms(a.fired_at_ms))


@dataclass(frozen=True, slots=True)
class StatusReport:
    """Everything `daemons.status` shows."""

    generated_at: int
    config: ConfigShown
    queue: QueueFileStatus
    draining: QueueFileStatus
    dead_letters: DeadLetterStatus
    graph: GraphStatus
    #: The tombstone archive folder of this host (`<dataDir>/tombstones/`).
    archives: ArchiveFolder
    ticks: dict[str, TickShown] = field(default_factory=dict)
    tenants: tuple[TenantDrift, ...] = ()
    alerts: tuple[RecentAlert, ...] = ()
    #: Every drainer of the state (one per host on PostgreSQL), by id.
    drainers: tuple[DrainerShown, ...] = ()
    leader: LeaderShown = LeaderShown(NOT_ELECTED, None)


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


def _tick_shown(record: TickRecord) -> TickShown:
    return TickShown(record.started_at, iso_from_ms(record.started_at), record.finished_at,
                     record.duration_ms, record.ok, without_url_credentials(record.figures))


async def _ticks(graph: GraphDB, tables: set[str]) -> dict[str, TickShown]:
    if "daemon_ticks" not in tables:
        return {}
    return {name: _tick_shown(record)
            for name, record in sorted((await last_ticks(graph)).items())}


async def _drainers(graph: GraphDB, ticks: dict[str, TickShown], settings: Settings, *,
                    local: str | None, now: int) -> tuple[DrainerShown, ...]:
    """Every drainer's row, each said gone or not; a state written before drainers had rows
    (a SQLite file of an earlier version) shows its one `drain` tick as its drainer, without
    queue figures."""

    def gone(finished_at: int) -> bool:
        return is_gone(finished_at, now, interval_ms=settings.drain.rem_interval_ms,
                       intervals=settings.drain.drainer_gone_intervals)

    rows = await last_drainer_ticks(graph)
    if rows:
        return tuple(DrainerShown(r.queue.drainer, r.queue.host, r.queue.drainer == local,
                                  _tick_shown(r.tick), r.queue.queue_lines, r.queue.draining,
                                  r.queue.dead_letters, gone(r.tick.finished_at))
                     for r in rows)
    drain = ticks.get(DRAIN_JOB)
    if drain is None:
        return ()
    return (DrainerShown("", None, local == "", drain, None, None, None,
                         gone(drain.finished_at)),)


async def _leader(settings: Settings) -> LeaderShown:
    """Who holds the reconcile leader lock now (a session of its own, which writes nothing)."""
    if not settings.state.url:
        return LeaderShown(NOT_ELECTED, None)
    return LeaderShown(ELECTED, await current_leader(settings.state.url))


def _detail_count(report: StaleReport | None, key: str, *, fallback: bool = False
                  ) -> int | None:
    """A count from the report's detail; a row written before the count existed has none (0
    for manifest figures, which it did not look for; `chunks_total` for the stale count,
    which it was then)."""
    if report is None:
        return None
    value = report.detail.get(key)
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    return report.stale_count if fallback else 0


def _detail_text(report: StaleReport | None, key: str) -> str | None:
    """A string from the report's detail (None when absent or not a string)."""
    value = report.detail.get(key) if report is not None else None
    return value if isinstance(value, str) else None


async def _tenants(graph: GraphDB, tables: set[str]) -> tuple[TenantDrift, ...]:
    """Every configured tenant with its version, latest stale report and restore holds, plus
    any tenant that has a report or holds but no configuration node (version 0: it was
    removed or never configured)."""
    configs = {t.tenant_id: t for t in await list_tenants(graph)} if "nodes" in tables else {}
    reports = await last_stale_counts(graph) if "kb_ingestion_metrics" in tables else {}
    holds = await hold_counts(graph)  # one aggregate query
    drift: list[TenantDrift] = []
    for tenant_id in sorted(set(configs) | set(reports) | set(holds)):
        config, report = configs.get(tenant_id), reports.get(tenant_id)
        drift.append(TenantDrift(
            tenant_id=tenant_id,
            repo_slug=(config.repo_slug if config is not None else None)
            or (report.repo_slug if report is not None else None),
            current_version=config.version if config is not None else 0,
            last_stale_count=_detail_count(report, "staleCount", fallback=True),
            last_manifest_orphan_count=_detail_count(report, "manifestOrphanCount"),
            last_total_orphan_count=report.stale_count if report is not None else None,
            last_missing_path_count=_detail_count(report, "missingPathCount"),
            last_tombstoned_count=report.tombstoned_count if report is not None else None,
            last_report_at=report.timestamp_ms if report is not None else None,
            last_report_at_iso=_iso(report.timestamp_ms if report is not None else None),
            last_guard=_detail_text(report, "guard"),
            restore_held_count=holds[tenant_id].chunks if tenant_id in holds else 0,
        ))
    return tuple(drift)


async def _alerts(graph: GraphDB, tables: set[str]) -> tuple[RecentAlert, ...]:
    if "alerts_fired" not in tables:
        return ()
    return tuple(RecentAlert.of(recorded) for recorded in await recent_alerts(graph))


async def gather_status(settings: Settings, *, now: int | None = None) -> StatusReport:
    """Everything `daemons.status` shows. Read-only; never opens Chroma; a missing file or
    database is shown as absent, not raised."""
    queue, draining, dead, archives = await asyncio.gather(
        asyncio.to_thread(describe_queue_file, settings.drain.lazy_edges_queue_path),
        asyncio.to_thread(describe_queue_file, settings.drain.draining_path),
        asyncio.to_thread(count_dead_letters, settings.drain.dead_letter_path),
        asyncio.to_thread(describe_archive_folder, settings.tombstones_dir),
    )
    report = StatusReport(
        leader=LeaderShown(ELECTED if settings.state.url else NOT_ELECTED, None),
        generated_at=now if now is not None else now_ms(),
        config=ConfigShown(
            str(settings.source) if settings.source is not None else None,
            str(settings.data_dir),
            settings.chroma.url_shown if settings.chroma.server_mode else str(settings.chroma.path),
            settings.chroma.memory_core_url if settings.chroma.memory_core_apart else None),
        queue=QueueFileStatus.of(settings.drain.lazy_edges_queue_path, queue),
        draining=QueueFileStatus.of(settings.drain.draining_path, draining),
        dead_letters=DeadLetterStatus.of(settings.drain.dead_letter_path, dead),
        graph=GraphStatus(state_location(settings.state), present=False),
        archives=archives,
    )
    # A database at `stateUrl` is always there to read (an unreachable one is an outage,
    # StoreUnavailable); only the SQLite file may not have been created yet.
    if not settings.state.url and not settings.state.graph_db_path.exists():
        return report
    graph = await open_graph(settings.state, read_only=True)
    try:
        tables = await graph.table_names()
        ticks = await _ticks(graph, tables)
        local = await asyncio.to_thread(local_drainer, settings)
        return StatusReport(
            report.generated_at, report.config, report.queue, report.draining,
            report.dead_letters,
            graph=await graph_status(graph, tables, path=report.graph.path),
            archives=report.archives,
            ticks=ticks, tenants=await _tenants(graph, tables),
            alerts=await _alerts(graph, tables),
            drainers=await _drainers(graph, ticks, settings, local=local,
                                     now=report.generated_at),
            leader=await _leader(settings))
    finally:
        await graph.close()

