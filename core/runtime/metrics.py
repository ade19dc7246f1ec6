"""Prometheus text exposition on 127.0.0.1 (`metricsPort` > 0), with no dependency.

Counters and last-tick gauges are updated by the runtime after each tick; the queue depth and
dead-letter counts are read from the files at scrape time, through the same readers status
uses (cached by size and mtime, so a scrape of an unchanged multi-GB queue costs two `stat`
calls).
"""

from __future__ import annotations

import asyncio
import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import structlog

from core.rules.config import Settings
from core.rules.figures import Figures
from core.rules.reconcile import ReconcileFigures
from core.stores.dead_letter_file import count_dead_letters
from core.stores.queue_files import count_newlines

log = structlog.get_logger(__name__)

#: How long a scrape connection may take to send its request line.
_REQUEST_TIMEOUT_S = 5.0


@dataclass(slots=True)
class _FileCount:
    key: tuple[int, int] = (-1, -1)
    lines: int = 0
    reasons: Counter[str] = field(default_factory=Counter)


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


class Metrics:
    """The daemons' metrics, rendered in the Prometheus text format."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.ticks: Counter[tuple[str, str]] = Counter()
        self.last_duration_s: dict[str, float] = {}
        self.last_success_ts: dict[str, float] = {}
        self.stale_chunks: dict[str, int] = {}
        self.tombstoned: Counter[str] = Counter()
        self._queue = _FileCount()
        self._dead = _FileCount()

    def observe_tick(self, job: str, *, outcome: str, duration_s: float,
                     figures: Figures | None = None, finished_ts: float) -> None:
        """Record one tick's outcome (`ok`, `failed`, `skipped`, `timeout`) and, for a
        reconcile pass, each tenant's stale and tombstoned chunks."""
        self.ticks[(job, outcome)] += 1
        self.last_duration_s[job] = duration_s
        if outcome == "ok":
            self.last_success_ts[job] = finished_ts
        if isinstance(figures, ReconcileFigures):
            for tenant in figures.tenants:
                self.stale_chunks[tenant.tenant_id] = tenant.stale_count
                self.tombstoned[tenant.tenant_id] += tenant.tombstoned_count

    def _count(self, path: Path, cache: _FileCount, *, reasons: bool) -> _FileCount:
        """A file's lines (and, for the dead letters, their reasons), re-read only when its
        size or mtime changed since the last scrape."""
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
        return _FileCount(key=key, lines=counts.total, reasons=counts.by_reason)

    def render(self) -> str:
        """The exposition text (blocking file reads: call through a thread)."""
        s = self.settings
        self._queue = self._count(s.lazy_edges_queue_path, self._queue, reasons=False)
        self._dead = self._count(s.dead_letter_path, self._dead, reasons=True)
        out: list[str] = []

        def metric(name: str, kind: str, doc: str, rows: list[tuple[str, float]]) -> None:
            out.append(f"# HELP {name} {doc}")
            out.append(f"# TYPE {name} {kind}")
            out.extend(f"{name}{labels} {value:g}" for labels, value in rows)

        metric("kb_ticks_total", "counter", "Ticks run, by job and outcome.",
               [(f'{{job="{_label(j)}",outcome="{_label(o)}"}}', n)
                for (j, o), n in sorted(self.ticks.items())])
        metric("kb_tick_failures_total", "counter", "Ticks that failed or timed out, by job.",
               [(f'{{job="{_label(j)}"}}', float(sum(n for (jj, o), n in self.ticks.items()
                                                     if jj == j and o in ("failed", "timeout"))))
                for j in sorted({j for j, _ in self.ticks})])
        metric("kb_tick_duration_seconds", "gauge", "Duration of the last tick, by job.",
               [(f'{{job="{_label(j)}"}}', v) for j, v in sorted(self.last_duration_s.items())])
        metric("kb_last_success_timestamp_seconds", "gauge",
               "When the last successful tick finished, by job.",
               [(f'{{job="{_label(j)}"}}', v) for j, v in sorted(self.last_success_ts.items())])
        metric("kb_queue_lines", "gauge", "Lines waiting in the lazy-edge queue.",
               [("", float(self._queue.lines))])
        metric("kb_queue_draining", "gauge", "1 while a .draining file exists.",
               [("", 1.0 if s.draining_path.exists() else 0.0)])
        metric("kb_dead_letters", "gauge", "Lines in the dead-letter file, by reason.",
               [(f'{{reason="{_label(r)}"}}', float(n))
                for r, n in sorted(self._dead.reasons.items())])
        metric("kb_stale_chunks", "gauge", "Stale chunks found by the last pass, by tenant.",
               [(f'{{tenant="{_label(t)}"}}', float(n))
                for t, n in sorted(self.stale_chunks.items())])
        metric("kb_tombstoned_chunks_total", "counter", "Chunks tombstoned, by tenant.",
               [(f'{{tenant="{_label(t)}"}}', float(n))
                for t, n in sorted(self.tombstoned.items())])
        return "\n".join(out) + "\n"

    async def serve(self, port: int) -> asyncio.Server:
        """Start answering `GET /metrics` on 127.0.0.1:`port` (loopback only, by design)."""

        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            try:
                request = await asyncio.wait_for(reader.readline(), _REQUEST_TIMEOUT_S)
                path = request.split(b" ")[1] if request.count(b" ") >= 2 else b""
                if path.split(b"?")[0] in (b"/metrics", b"/"):
                    body = (await asyncio.to_thread(self.render)).encode()
                    status = b"200 OK"
                    kind = b"text/plain; version=0.0.4; charset=utf-8"
                else:
                    body, status, kind = b"not found\n", b"404 Not Found", b"text/plain"
                writer.write(b"HTTP/1.1 " + status + b"\r\nContent-Type: " + kind +
                             b"\r\nContent-Length: " + str(len(body)).encode() +
                             b"\r\nConnection: close\r\n\r\n" + body)
                await writer.drain()
            except (TimeoutError, ConnectionError, OSError):
                pass
            except Exception:
                log.warning("metrics.request_failed", exc_info=True)
            finally:
                writer.close()

        server = await asyncio.start_server(handle, host="127.0.0.1", port=port)
        log.info("metrics.listening", address=f"http://127.0.0.1:{port}/metrics",
                 pid=os.getpid())
        return server
