"""`/metrics` on 127.0.0.1 (`metricsPort` > 0), written by prometheus-client.

The library writes the text format (escaping, full-precision values, histograms) and the
`process_*` metrics; the registry is our own, so nothing another library registers globally
leaks in, and two runtimes in one test process do not collide.

The series are listed in docs/operating.md ("Metrics"). The files (queue, dead letters) are
read at scrape time through the readers status uses, again only when a file's size or mtime
changed. What other processes record on the same state (a `--tick` pass, another host's
passes, every drainer's tick record) shows within `FOLLOW_INTERVAL_S`
(`core.suite.metrics_reads`), each pass counted once by its id. From the first scrape every
job's series exist, restored from the state where they can be (`core.suite.restored_metrics`).

Scrapes are answered on the library's own thread, so a slow file read never blocks the loop.
"""

from __future__ import annotations

import errno
import os
import threading
from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog
from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    ProcessCollector,
    start_http_server,
)
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from core.base.config.config import Settings
from core.base.io.clock import now_ms
from core.base.rules.camel_json import Figures
from core.base.rules.errors import ConfigError, StoreUnavailable
from core.base.state.daemon_state import DrainerTick, last_drainer_ticks
from core.base.state.graph_db import GraphDB
from core.drain.rules.drainers import is_gone
from core.drain.stores.dead_letter_file import count_dead_letters
from core.drain.stores.queue_files import count_newlines
from core.reconcile.rules.reconcile_outcome import ReconcileFigures, TenantFigures
from core.suite.restored_metrics import RestoredMetrics
from core.suite.tick import Job

log = structlog.get_logger(__name__)

#: Tick durations range from milliseconds (an empty queue) to the tick's time bound (an hour).
DURATION_BUCKETS_S = (0.05, 0.25, 1.0, 5.0, 15.0, 60.0, 300.0, 900.0, 3600.0, float("inf"))
#: Every `outcome` of `kb_ticks_total` (the scheduler's): each is exported from the start, at 0,
#: so `increase()` sees a tick of any outcome from the first one on.
OUTCOMES = ("ok", "incomplete", "failed", "timeout", "skipped")
#: How many of the latest pass ids are remembered as counted (each pass is counted once).
PASSES_REMEMBERED = 64


@dataclass(slots=True)
class _FileCount:
    key: tuple[int, int] = (-1, -1)
    lines: int = 0
    reasons: dict[str, int] = field(default_factory=dict)


class _QueueFiles(Collector):
    """The queue's depth and the dead letters by reason, read when scraped."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._lock = threading.Lock()  # concurrent scrapes share the caches
        self._queue = _FileCount()
        self._dead = _FileCount()

    def collect(self) -> Iterator[Metric]:
        s = self.settings.drain
        with self._lock:
            self._queue = _count(s.lazy_edges_queue_path, self._queue, reasons=False)
            self._dead = _count(s.dead_letter_path, self._dead, reasons=True)
            queue, dead = self._queue, self._dead
        yield GaugeMetricFamily("kb_queue_lines", "Lines waiting in the lazy-edge queue.",
                                value=queue.lines)
        yield GaugeMetricFamily("kb_queue_draining",
                                "1 while a .draining file is left for the next tick.",
                                value=1 if s.draining_path.exists() else 0)
        by_reason = GaugeMetricFamily("kb_dead_letters", "Lines in the dead-letter file, by "
                                      "reason (one series, reason=\"\", at 0 while there "
                                      "are none).", labels=["reason"])
        for reason, n in sorted(dead.reasons.items()) or [("", 0)]:
            by_reason.add_metric([reason], n)
        yield by_reason


def _count(path: Path, cache: _FileCount, *, reasons: bool) -> _FileCount:
    """A file's lines (and, for the dead letters, their reasons), re-read only when its size
    or mtime changed since the last scrape."""
    try:
        stat = path.stat()
    except FileNotFoundError:
        return _FileCount()
    key = (stat.st_size, stat.st_mtime_ns)
    if key == cache.key:
        return cache
    if not reasons:
        return _FileCount(key=key, lines=count_newlines(path))
    counts = count_dead_letters(path)
    return _FileCount(key=key, lines=counts.total, reasons=dict(counts.by_reason))


class Metrics:
    """The daemons' metrics on a registry of their own."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.registry = CollectorRegistry()
        r = self.registry
        self.ticks = Counter("kb_ticks", "Ticks run, by job and outcome (ok, incomplete: "
                             "stopped or unsuccessful, failed, timeout, skipped).",
                             ["job", "outcome"], registry=r)
        self.durations = Histogram("kb_tick_duration_seconds", "How long ticks ran, by job.",
                                   ["job"], buckets=DURATION_BUCKETS_S, registry=r)
        self.last_success = Gauge("kb_last_success_timestamp_seconds",
                                  "When the last completed, successful tick finished, by job.",
                                  ["job"], registry=r)
        self.stale = Gauge("kb_stale_chunks", "Stale chunks found by the last pass, by tenant.",
                           ["tenant"], registry=r)
        self.manifest_orphans = Gauge("kb_manifest_orphan_chunks", "Chunks of paths the "
                                      "tenant's manifest no longer lists, by tenant (last "
                                      "pass).", ["tenant"], registry=r)
        self.missing_paths = Gauge("kb_missing_paths", "Paths a manifest lists that have no "
                                   "chunks, by tenant (last pass).", ["tenant"], registry=r)
        self.orphans = Gauge("kb_orphan_chunks", "Orphaned chunks (stale, manifest or "
                             "generation orphans, each once), by tenant (last pass).",
                             ["tenant"], registry=r)
        self.held = Gauge("kb_tenant_held", "1 when a guard held the tenant's tombstoning in "
                          "the last pass (guard names it), else 0 with guard=\"\".",
                          ["tenant", "guard"], registry=r)
        self.tombstoned = Counter("kb_tombstoned_chunks", "Chunks tombstoned, by tenant.",
                                  ["tenant"], registry=r)
        self.interval = Gauge("kb_job_interval_seconds", "How often the job ticks.", ["job"],
                              registry=r)
        self.in_progress = Gauge("kb_tick_in_progress", "1 while a tick of the job runs.",
                                 ["job"], registry=r)
        self.drainer_gauges = _drainer_gauges(r)
        self.is_leader = Gauge("kb_reconcile_is_leader", "1 while this process leads the "
                               "reconcile passes (PostgreSQL advisory lock; on SQLite, the "
                               "one process running them), else 0.", registry=r)
        self.leader = Gauge("kb_reconcile_leader", "1 with holder naming the session that "
                            "leads the reconcile passes, as this process last saw it; 0 with "
                            "holder=\"\" when nobody held the lock.", ["holder"],
                            registry=r)
        r.register(_QueueFiles(settings))
        ProcessCollector(registry=r)
        self._guards: dict[str, str] = {}  # each tenant's `guard` label now shown
        self._drainer_hosts: dict[str, str] = {}  # each drainer's `host` label now shown
        self._leader_shown: str | None = None  # the `holder` label now shown
        self._last_success: dict[str, float] = {}  # each job's `kb_last_success` now shown
        # The passes whose tenants are shown and tombstones counted (this process's, or
        # another's recorded on the same state: `follow`), so none is counted twice.
        self._passes_counted: deque[str] = deque(maxlen=PASSES_REMEMBERED)
        self._server: Any = None

    def start(self, jobs: Sequence[Job], restored: RestoredMetrics) -> None:
        """Export every series of `jobs` before their first tick: the recorded last success
        and tenant gauges as `restored`, each interval, no tick running, and the counters and
        the histogram at 0 (a labelled series does not exist until it is first touched)."""
        for job in jobs:
            self.interval.labels(job.name).set(job.interval_ms / 1000)
            self.in_progress.labels(job.name).set(0)
            self.durations.labels(job.name)
            for outcome in OUTCOMES:
                self.ticks.labels(job.name, outcome)
            if job.name in restored.last_success_s:
                self._show_success(job.name, restored.last_success_s[job.name])
        for tenant in restored.tenants:
            self._show_tenant(tenant)
            self.tombstoned.labels(tenant.tenant_id)
        if restored.pass_id is not None:  # counted before this start
            self._passes_counted.append(restored.pass_id)

    def follow(self, recorded: RestoredMetrics) -> None:
        """Show what other processes recorded on the same state since (a `--tick` beside
        the daemon, another host): a later last success, and a pass not counted yet (its
        tenants' gauges, its tombstones added to the counter)."""
        for job, finished_s in recorded.last_success_s.items():
            if finished_s > self._last_success.get(job, float("-inf")):
                self._show_success(job, finished_s)
        if recorded.pass_id is not None and recorded.pass_id not in self._passes_counted:
            self._count_pass(recorded.pass_id, recorded.tenants)

    def _show_success(self, job: str, finished_s: float) -> None:
        self.last_success.labels(job).set(finished_s)
        self._last_success[job] = finished_s

    def _count_pass(self, pass_id: str, tenants: Sequence[TenantFigures]) -> None:
        for tenant in tenants:
            self._show_tenant(tenant)
            self.tombstoned.labels(tenant.tenant_id).inc(tenant.tombstoned_count)
        self._passes_counted.append(pass_id)

    def tick_started(self, job: str) -> None:
        """Say a tick of `job` is running (until `observe_tick`)."""
        self.in_progress.labels(job).set(1)

    def observe_tick(self, job: str, *, outcome: str, duration_s: float,
                     figures: Figures | None = None, finished_ts: float) -> None:
        """Record one tick's outcome and duration and, for a reconcile pass, its tenants."""
        self.ticks.labels(job, outcome).inc()
        self.durations.labels(job).observe(duration_s)
        self.in_progress.labels(job).set(0)
        if outcome == "ok":
            self._show_success(job, finished_ts)
        if isinstance(figures, ReconcileFigures) and figures.pass_id not in self._passes_counted:
            self._count_pass(figures.pass_id, figures.tenants)

    def _show_tenant(self, tenant: TenantFigures) -> None:
        """A tenant's gauges from one pass's figures, live or restored (one writer of both)."""
        name = tenant.tenant_id
        self.stale.labels(name).set(tenant.stale_count)
        self.manifest_orphans.labels(name).set(tenant.manifest_orphan_count)
        self.orphans.labels(name).set(tenant.total_orphan_count)
        self.missing_paths.labels(name).set(tenant.missing_path_count)
        guard = tenant.guard or ""
        shown = self._guards.get(name)
        if shown is not None and shown != guard:
            self.held.remove(name, shown)  # one series per tenant: the guard of the last pass
        self.held.labels(name, guard).set(1 if guard else 0)
        self._guards[name] = guard

    def show_drainers(self, drainers: Sequence[DrainerTick], *, now: int) -> None:
        """Each drainer's gauges from its recorded tick, one series per drainer (a forgotten
        drainer loses its series)."""
        gauges, drain = self.drainer_gauges, self.settings.drain
        last_tick, ok, queue, dead, gone = gauges
        present = {d.queue.drainer for d in drainers}
        for name in [n for n in self._drainer_hosts if n not in present]:
            for gauge in gauges:
                gauge.remove(name, self._drainer_hosts[name])
            del self._drainer_hosts[name]
        for d in drainers:
            name, host = d.queue.drainer, d.queue.host
            shown = self._drainer_hosts.get(name)
            if shown is not None and shown != host:
                for gauge in gauges:
                    gauge.remove(name, shown)
            self._drainer_hosts[name] = host
            gone.labels(name, host).set(
                1 if is_gone(d.tick.finished_at, now, interval_ms=drain.rem_interval_ms,
                             intervals=drain.drainer_gone_intervals) else 0)
            last_tick.labels(name, host).set(d.tick.finished_at / 1000)
            ok.labels(name, host).set(1 if d.tick.ok else 0)
            queue.labels(name, host).set(d.queue.queue_lines)
            dead.labels(name, host).set(d.queue.dead_letters)

    def show_leadership(self, *, leads: bool, holder: str | None) -> None:
        """What this process's election saw at its last heartbeat: whether it leads, and who
        does (None: nobody)."""
        self.is_leader.set(1 if leads else 0)
        label = holder or ""
        if self._leader_shown is not None and self._leader_shown != label:
            self.leader.remove(self._leader_shown)
        self.leader.labels(label).set(1 if holder else 0)
        self._leader_shown = label

    def serve(self, port: int, *, key: str = "metricsPort") -> None:
        """Start answering `GET /metrics` on 127.0.0.1:`port` (loopback only, by design); a
        port that is taken is a ConfigError naming `key`."""
        try:
            self._server, _thread = start_http_server(port, addr="127.0.0.1",
                                                      registry=self.registry)
        except OSError as exc:
            if exc.errno in (errno.EADDRINUSE, errno.EACCES):
                raise ConfigError(f"{key} = {port}: 127.0.0.1:{port} is "
                                  f"{'taken' if exc.errno == errno.EADDRINUSE else 'not allowed'}"
                                  " (choose another port, or 0 to turn metrics off)") from None
            raise
        log.info("metrics.listening", address=f"http://127.0.0.1:{port}/metrics",
                 pid=os.getpid())

    def close(self) -> None:
        """Stop answering scrapes and free the port."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None


def _drainer_gauges(r: CollectorRegistry) -> tuple[Gauge, Gauge, Gauge, Gauge, Gauge]:
    """Each drainer's series (labels `drainer`, `host`)."""
    labels = ["drainer", "host"]
    return (
        Gauge("kb_drainer_last_tick_timestamp_seconds", "When each drainer's last tick "
              "finished (as it recorded it in the shared state), by drainer id and host.",
              labels, registry=r),
        Gauge("kb_drainer_last_tick_ok", "1 when the drainer's last tick completed "
              "successfully, else 0.", labels, registry=r),
        Gauge("kb_drainer_queue_lines", "Lines in the drainer's queue when its last tick "
              "ended.", labels, registry=r),
        Gauge("kb_drainer_dead_letters", "Lines in the drainer's dead-letter file when its "
              "last tick ended.", labels, registry=r),
        Gauge("kb_drainer_gone", "1 when the drainer has recorded no tick for "
              "drainerGoneIntervals x remIntervalMs (kb-drain forget removes its row), else 0.",
              labels, registry=r),
    )


async def refresh_drainers(metrics: Metrics, graph: GraphDB) -> None:
    """Show every drainer's recorded tick (best effort: never fails the daemon)."""
    try:
        drainers = await last_drainer_ticks(graph)
    except StoreUnavailable as exc:  # an outage: the tick's own line said so
        log.warning("metrics.drainers_unread", error=str(exc))
        return
    except Exception:
        log.warning("metrics.drainers_unread", exc_info=True)
        return
    metrics.show_drainers(drainers, now=now_ms())
