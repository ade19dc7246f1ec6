"""`/metrics` on 127.0.0.1 (`metricsPort` > 0), written by prometheus-client.

The library writes the text format (escaping, full-precision values, histograms) and the
`process_*` metrics; the registry is our own, so nothing another library registers globally
leaks in, and two runtimes in one test process do not collide.

What is exposed:
- per job: ticks by outcome (`kb_ticks_total`), a tick-duration histogram
  (`kb_tick_duration_seconds`), when the last *completed* tick finished
  (`kb_last_success_timestamp_seconds`; an interrupted or unsuccessful tick does not move it);
- read from the files at scrape time, through the same readers status uses, and re-read only
  when a file's size or mtime changed (a scrape of an unchanged multi-GB queue costs two
  `stat` calls): the queue's lines (`kb_queue_lines`), whether a `.draining` file is left
  (`kb_queue_draining`), dead letters by reason (`kb_dead_letters`);
- per tenant, from the last reconcile pass: stale chunks (`kb_stale_chunks`), chunks of paths
  the manifest no longer lists when the pass reports them (`kb_missing_paths`), and chunks
  tombstoned (`kb_tombstoned_chunks_total`).

Scrapes are answered on the library's own thread, so a slow file read never blocks the loop.
"""

from __future__ import annotations

import errno
import os
import threading
from collections.abc import Iterator
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

from core.rules.config import Settings
from core.rules.errors import ConfigError
from core.rules.figures import Figures
from core.rules.reconcile import ReconcileFigures
from core.stores.dead_letter_file import count_dead_letters
from core.stores.queue_files import count_newlines

log = structlog.get_logger(__name__)

#: Tick durations range from milliseconds (an empty queue) to the tick's time bound (an hour).
DURATION_BUCKETS_S = (0.05, 0.25, 1.0, 5.0, 15.0, 60.0, 300.0, 900.0, 3600.0, float("inf"))


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
        s = self.settings
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
                                      "reason.", labels=["reason"])
        for reason, n in sorted(dead.reasons.items()):
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
        self.tombstoned = Counter("kb_tombstoned_chunks", "Chunks tombstoned, by tenant.",
                                  ["tenant"], registry=r)
        r.register(_QueueFiles(settings))
        ProcessCollector(registry=r)
        self._server: Any = None

    def observe_tick(self, job: str, *, outcome: str, duration_s: float,
                     figures: Figures | None = None, finished_ts: float) -> None:
        """Record one tick's outcome and duration and, for a reconcile pass, each tenant's
        stale and manifest-orphaned chunks, missing paths and tombstoned chunks."""
        self.ticks.labels(job, outcome).inc()
        self.durations.labels(job).observe(duration_s)
        if outcome == "ok":
            self.last_success.labels(job).set(finished_ts)
        if isinstance(figures, ReconcileFigures):
            for tenant in figures.tenants:
                self.stale.labels(tenant.tenant_id).set(tenant.stale_count)
                self.manifest_orphans.labels(tenant.tenant_id).set(tenant.manifest_orphan_count)
                self.missing_paths.labels(tenant.tenant_id).set(tenant.missing_path_count)
                self.tombstoned.labels(tenant.tenant_id).inc(tenant.tombstoned_count)

    def serve(self, port: int) -> None:
        """Start answering `GET /metrics` on 127.0.0.1:`port` (loopback only, by design), on
        a thread of the library's. A port that is taken is a configuration error (exit 2)."""
        try:
            self._server, _thread = start_http_server(port, addr="127.0.0.1",
                                                      registry=self.registry)
        except OSError as exc:
            if exc.errno in (errno.EADDRINUSE, errno.EACCES):
                raise ConfigError(f"metricsPort = {port}: 127.0.0.1:{port} is "
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
