"""The daemon runtime: scheduling, supervision, systemd notify, watchdog, metrics, shutdown.

Intervals here are fractions of a second; nothing waits for real minutes.
"""

from __future__ import annotations

import asyncio
import json
import socket
import time
import urllib.request
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from core.base.chroma import VectorStore
from core.base.config.config import Settings
from core.base.runtime.context import TickContext
from core.base.runtime.systemd import Notifier
from core.base.runtime.waiting import MAX_BACKOFF_FACTOR, backoff_delay_ms, first_run_delay_ms
from core.base.state.daemon_state import TickRecord, last_ticks, record_tick
from core.base.state.state import open_graph
from core.suite.metrics import Metrics
from core.suite.scheduler import DaemonRunner, DaemonSpec, RuntimeOptions
from core.suite.serve import _supervise, serve
from core.suite.tick import Job
from tests.support import make_settings

FAST = RuntimeOptions(shutdown_grace_s=1.0, stall_limit_s=0.3, restart_backoff_max_s=0.2,
                      health_check_s=0.05)


@dataclass(frozen=True, slots=True)
class Counted:
    """A test tick's figures: how many times it ran."""

    n: int


class Ticks:
    """A tick function that records its calls and can be told to fail or hang."""

    def __init__(self, *, fail_first: int = 0, fail_always: bool = False,
                 hang: bool = False) -> None:
        self.calls: list[float] = []
        self.fail_first = fail_first
        self.fail_always = fail_always
        self.hang = hang

    async def __call__(self, stores: TickContext, dry_run: bool) -> Counted:
        self.calls.append(time.monotonic())
        if self.hang:
            await asyncio.Event().wait()
        if self.fail_always or len(self.calls) <= self.fail_first:
            raise RuntimeError(f"tick {len(self.calls)} failed on purpose")
        return Counted(len(self.calls))


async def wait_until(predicate: Any, within: float = 20.0) -> None:
    deadline = time.monotonic() + within
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.02)


@pytest.fixture
def notify_socket(tmp_path: Path) -> Iterator[tuple[socket.socket, dict[str, str]]]:
    """A datagram socket standing in for systemd's, and the environment that names it."""
    path = str(tmp_path / "notify.sock")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(path)
    sock.setblocking(False)
    yield sock, {"NOTIFY_SOCKET": path, "WATCHDOG_USEC": "100000"}
    sock.close()


def received(sock: socket.socket) -> list[str]:
    messages = []
    while True:
        try:
            messages.append(sock.recv(4096).decode())
        except BlockingIOError:
            return messages


@pytest.fixture
async def served(settings: Settings) -> AsyncIterator[Any]:
    """Start `serve()` in the background with given jobs; stop it cleanly afterwards."""
    tasks: list[tuple[asyncio.Task[int], asyncio.Event]] = []

    async def start(specs: list[DaemonSpec], *, notifier: Notifier | None = None,
                    options: RuntimeOptions = FAST,
                    use_settings: Settings = settings) -> tuple[asyncio.Task[int], asyncio.Event]:
        stop = asyncio.Event()
        task = asyncio.create_task(serve(use_settings, specs, options=options,
                                         notifier=notifier or Notifier({}), stop=stop))
        tasks.append((task, stop))
        return task, stop

    yield start
    for task, stop in tasks:
        stop.set()
        await asyncio.wait_for(task, 10)


def test_first_tick_is_immediate_without_history_or_after_a_full_interval() -> None:
    assert first_run_delay_ms(None, 1000, 5000) == 0
    assert first_run_delay_ms(3000, 1000, 5000) == 0


def test_a_restart_inside_the_interval_waits_for_the_remainder() -> None:
    assert first_run_delay_ms(4600, 1000, 5000) == 600
    assert first_run_delay_ms(9000, 1000, 5000) == 1000, "a clock gone backwards waits one interval"


def test_backoff_starts_at_the_second_failure_and_is_capped() -> None:
    assert backoff_delay_ms(1, 100) is None
    assert backoff_delay_ms(2, 100) == 200
    assert backoff_delay_ms(3, 100) == 400
    assert backoff_delay_ms(10, 100) == 100 * MAX_BACKOFF_FACTOR


async def test_notify_socket_receives_ready_watchdog_and_stopping(
    served: Any, notify_socket: tuple[socket.socket, dict[str, str]]
) -> None:
    sock, env = notify_socket
    ticks = Ticks()
    task, stop = await served([DaemonSpec("d", (Job("d", ticks, 10_000),))],
                              notifier=Notifier(env))
    await wait_until(lambda: len(ticks.calls) == 1)
    await asyncio.sleep(0.35)
    stop.set()
    assert await asyncio.wait_for(task, 5) == 0
    messages = received(sock)
    assert messages[0].startswith("READY=1")
    assert messages.count("WATCHDOG=1") >= 2
    assert messages[-1] == "STOPPING=1"


async def test_a_hung_tick_stops_the_watchdog_pings(
    served: Any, notify_socket: tuple[socket.socket, dict[str, str]]
) -> None:
    sock, env = notify_socket
    ticks = Ticks(hang=True)
    await served([DaemonSpec("d", (Job("d", ticks, 10_000, timeout_s=30),))],
                 notifier=Notifier(env))
    await wait_until(lambda: len(ticks.calls) == 1)
    await asyncio.sleep(0.5)  # past the 0.3 s stall limit
    received(sock)  # discard what came before the stall was noticed
    await asyncio.sleep(0.4)
    assert "WATCHDOG=1" not in received(sock)


async def test_a_raising_tick_does_not_stop_the_next_and_backs_off_then_recovers(
    served: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    ticks = Ticks(fail_first=3)
    await served([DaemonSpec("d", (Job("d", ticks, 200),))])
    await wait_until(lambda: len(ticks.calls) >= 5, within=10)
    events = [json.loads(x) for x in capsys.readouterr().err.splitlines() if x.startswith("{")]
    names = [e["event"] for e in events if e.get("job") == "d" or e.get("daemon") == "d"]
    assert names.count("tick.failed") == 3
    assert names.count("tick.backing_off") == 1, "said once"
    assert names.count("tick.recovered") == 1, "and again when they recover"
    failed = [e for e in events if e["event"] == "tick.failed"]
    assert "failed on purpose" in json.dumps(failed[0]), "logged with its traceback"
    gaps = [b - a for a, b in zip(ticks.calls, ticks.calls[1:], strict=False)]
    assert gaps[0] < 0.35 <= gaps[1], "the second failure doubles the wait"


async def test_a_restart_inside_the_interval_neither_skips_nor_doubles_the_pass(
    served: Any, settings: Settings
) -> None:
    graph = await open_graph(settings.state)
    started = int(time.time() * 1000) - 1500
    await record_tick(graph, TickRecord("d", started, started + 10, 10, True, {}))
    await graph.close()
    ticks = Ticks()
    begun = time.monotonic()
    await served([DaemonSpec("d", (Job("d", ticks, 2000),))])
    await wait_until(lambda: len(ticks.calls) == 1)
    waited = ticks.calls[0] - begun
    assert 0.3 < waited < 1.5, f"first tick after the ~0.5 s remainder, not at once ({waited})"


async def _record_last(settings: Settings, *, ok: bool, ago_ms: int) -> None:
    graph = await open_graph(settings.state)
    started = int(time.time() * 1000) - ago_ms
    await record_tick(graph, TickRecord("d", started, started + 10, 10, ok, {}))
    await graph.close()


async def first_ticks(specs: list[DaemonSpec], settings: Settings, vectors: VectorStore,
                      ticks: list[Ticks]) -> list[float]:
    """Run the daemons on an open store until each of `ticks` ran once; how long after the
    start each first ran (the store is open before the clock starts: opening Chroma is not
    what is measured)."""
    stop = asyncio.Event()
    runners = [DaemonRunner(spec, settings=settings, vectors=vectors, options=FAST,
                            metrics=Metrics(settings)) for spec in specs]
    begun = time.monotonic()
    running = [asyncio.create_task(r.run(stop)) for r in runners]
    try:
        await wait_until(lambda: all(t.calls for t in ticks))
    finally:
        stop.set()
        await asyncio.wait_for(asyncio.gather(*running), 5)
    return [t.calls[0] - begun for t in ticks]


async def test_a_last_tick_that_did_not_complete_runs_again_at_once(
    vectors: VectorStore, settings: Settings
) -> None:
    await _record_last(settings, ok=False, ago_ms=100)
    ticks = Ticks()
    [waited] = await first_ticks([DaemonSpec("d", (Job("d", ticks, 60_000),))], settings,
                                 vectors, [ticks])
    assert waited < 1.0, "not an interval later: the last tick was not done"


async def test_work_left_in_flight_runs_the_first_tick_at_once(
    vectors: VectorStore, settings: Settings
) -> None:
    await _record_last(settings, ok=True, ago_ms=100)
    ticks, quiet = Ticks(), Ticks()
    waited = await first_ticks(
        [DaemonSpec("d", (Job("d", ticks, 60_000, work_left=lambda _s: True),)),
         DaemonSpec("q", (Job("q", quiet, 60_000, work_left=lambda _s: False),))],
        settings, vectors, [ticks, quiet])
    assert max(waited) < 1.0, "work left, or no history: at once"


async def test_a_tick_stopped_before_its_end_is_recorded_not_ok(
    served: Any, settings: Settings
) -> None:
    from core.drain.rem_tick import RemTickFigures
    from core.drain.rules.drain_plan import DrainStats
    from core.drain.rules.ingest import LiveIngestSkipped

    async def stopped_drain(stores: TickContext, dry_run: bool) -> RemTickFigures:
        return RemTickFigures(LiveIngestSkipped(0, "none"), DrainStats(interrupted=True))

    ran: list[bool] = []

    async def tick(stores: TickContext, dry_run: bool) -> RemTickFigures:
        figures = await stopped_drain(stores, dry_run)
        ran.append(True)
        return figures

    task, stop = await served([DaemonSpec("d", (Job("d", tick, 60_000),))])
    await wait_until(lambda: ran)
    stop.set()
    assert await asyncio.wait_for(task, 10) == 0  # the record is written before serve returns
    graph = await open_graph(settings.state)
    record = (await last_ticks(graph))["d"]
    await graph.close()
    assert not record.ok
    assert "stopped mid-drain" in record.figures["incomplete"]


def test_a_pass_with_unrecorded_telemetry_or_stopped_is_incomplete() -> None:
    from dataclasses import replace

    from core.suite.tick import incomplete_reason

    done = _pass_figures(tombstoned=0, stale=0)
    assert incomplete_reason(done) is None
    assert "telemetry" in str(incomplete_reason(replace(done, unrecorded_rows=3)))
    assert "stopped" in str(incomplete_reason(replace(done, stopped=True)))
    assert "failed" in str(incomplete_reason(replace(done, failed_tenants=1)))


async def test_ticks_are_recorded_so_the_next_start_knows(served: Any,
                                                           settings: Settings) -> None:
    ticks = Ticks()
    _, stop = await served([DaemonSpec("d", (Job("d", ticks, 10_000),))])
    await wait_until(lambda: len(ticks.calls) == 1)
    await asyncio.sleep(0.1)
    stop.set()
    await asyncio.sleep(0.3)
    graph = await open_graph(settings.state)
    record = (await last_ticks(graph))["d"]
    await graph.close()
    assert record.ok and record.figures["n"] == 1


async def test_one_failing_daemon_never_stops_the_other(served: Any) -> None:
    broken, healthy = Ticks(fail_always=True), Ticks()
    await served([DaemonSpec("broken", (Job("broken", broken, 100),)),
                  DaemonSpec("healthy", (Job("healthy", healthy, 100),))])
    await wait_until(lambda: len(healthy.calls) >= 4 and len(broken.calls) >= 2, within=10)


async def test_a_daemon_whose_scheduler_dies_is_restarted(
    vectors: VectorStore, settings: Settings
) -> None:
    ticks = Ticks()
    runner = DaemonRunner(DaemonSpec("d", (Job("d", ticks, 100),)), settings=settings,
                          vectors=vectors, options=FAST, metrics=Metrics(settings))
    stop = asyncio.Event()
    supervisor = asyncio.create_task(_supervise(runner, stop, FAST))
    await wait_until(lambda: runner.scheduler is not None and len(ticks.calls) >= 1)
    dead = runner.scheduler
    dead.shutdown(wait=False)  # the fault: the scheduler stops under the daemon
    await wait_until(lambda: runner.scheduler is not None and runner.scheduler is not dead)
    calls = len(ticks.calls)
    await wait_until(lambda: len(ticks.calls) > calls)
    stop.set()
    await asyncio.wait_for(supervisor, 5)


async def test_shutdown_lets_the_running_tick_finish_its_batch(served: Any) -> None:
    finished: list[bool] = []

    async def long_batch(stores: TickContext, dry_run: bool) -> Counted:
        for n in range(10):  # ten "batches", checking the stop flag between them
            if stores.control.stopping:
                return Counted(n)
            await asyncio.sleep(0.05)
            stores.control.progress()
        finished.append(True)
        return Counted(10)

    task, stop = await served([DaemonSpec("d", (Job("d", long_batch, 10_000),))])
    await asyncio.sleep(0.15)
    stop.set()
    assert await asyncio.wait_for(task, 5) == 0
    assert finished == [], "the tick returned after its current batch, not at its end"


def scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of /metrics, parsed by prometheus-client's own parser."""
    from prometheus_client.parser import text_string_to_metric_families

    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    return {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(text) for sample in family.samples}


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def test_metrics_parse_with_full_precision_on_loopback(served: Any, tmp_path: Path) -> None:
    port = free_port()
    settings = make_settings(tmp_path / "m", metricsPort=port)
    settings.drain.lazy_edges_queue_path.parent.mkdir(parents=True, exist_ok=True)
    settings.drain.lazy_edges_queue_path.write_bytes(b"{}\n" * 1_234_567)
    ticks = Ticks()
    await served([DaemonSpec("d", (Job("d", ticks, 10_000),))], use_settings=settings)
    await wait_until(lambda: len(ticks.calls) == 1)
    await asyncio.sleep(0.1)
    values = await asyncio.to_thread(scrape, port)
    now = time.time()
    assert values[("kb_queue_lines", ())] == 1_234_567, "a value above 10^6, exactly"
    last = values[("kb_last_success_timestamp_seconds", (("job", "d"),))]
    assert now - 1.5 < last <= now, f"the last success to the second ({last} vs {now})"
    assert values[("kb_ticks_total", (("job", "d"), ("outcome", "ok")))] == 1
    assert values[("kb_tick_duration_seconds_count", (("job", "d"),))] == 1
    assert ("kb_queue_draining", ()) in values
    assert any(name.startswith("process_") for name, _ in values), "process metrics"
    with pytest.raises(OSError):  # loopback only
        await asyncio.to_thread(socket.create_connection, (_external_address(), port), 1)


def _external_address() -> str:
    """An address of this machine that is not loopback (a UDP connect sends nothing)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.1", 9))
            address = str(probe.getsockname()[0])
        except OSError:
            pytest.skip("no non-loopback address on this machine")
    if address.startswith("127."):
        pytest.skip("no non-loopback address on this machine")
    return address


async def test_a_counter_above_a_million_is_exact(tmp_path: Path) -> None:
    settings = make_settings(tmp_path / "m")
    metrics = Metrics(settings)
    figures = _pass_figures(tombstoned=1_234_567, stale=2_000_001, orphans=3_000_017,
                            missing=7)
    metrics.observe_tick("reconcile", outcome="ok", duration_s=1.0, figures=figures,
                         finished_ts=1_796_030_123.25)
    from prometheus_client import generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value for f in
               text_string_to_metric_families(generate_latest(metrics.registry).decode())
               for s in f.samples}
    assert samples[("kb_tombstoned_chunks_total", (("tenant", "t1"),))] == 1_234_567
    assert samples[("kb_stale_chunks", (("tenant", "t1"),))] == 2_000_001
    assert samples[("kb_manifest_orphan_chunks", (("tenant", "t1"),))] == 3_000_017
    assert samples[("kb_missing_paths", (("tenant", "t1"),))] == 7
    assert samples[("kb_last_success_timestamp_seconds", (("job", "reconcile"),))] \
        == 1_796_030_123.25


def _pass_figures(*, tombstoned: int, stale: int, orphans: int = 0, missing: int = 0) -> Any:
    from core.reconcile.rules.reconcile_outcome import ReconcileFigures, TenantFigures

    tenant = TenantFigures(tenant_id="t1", repo_slug=None, current_version=2, scanned=stale,
                           stale_count=stale, manifest_orphan_count=orphans,
                           total_orphan_count=stale + orphans, missing_path_count=missing,
                           actionable_count=stale, held_count=0, tombstoned_count=tombstoned,
                           guard=None)
    return ReconcileFigures(enabled=True, auto_tombstone=True, pass_id="p", tenants=(tenant,),
                            failed_tenants=0, stale_count=stale, manifest_orphan_count=orphans,
                            total_orphan_count=stale + orphans, missing_path_count=missing,
                            tombstoned_count=tombstoned, archives=(), spool_flushed=0,
                            unrecorded_rows=0, stopped=False)


async def test_a_taken_metrics_port_is_a_config_error_before_any_tick(tmp_path: Path) -> None:
    from core.base.rules.errors import ConfigError

    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        settings = make_settings(tmp_path / "m", metricsPort=port)
        ticks = Ticks()
        with pytest.raises(ConfigError, match=f"metricsPort = {port}: .*taken"):
            await asyncio.wait_for(serve(settings, [DaemonSpec("d", (Job("d", ticks, 10),))],
                                         options=FAST, notifier=Notifier({})), 10)
    assert ticks.calls == []
    assert not settings.state.graph_db_path.exists(), "it stopped before opening any store"


async def test_a_reconcile_pass_stopped_between_tenants_runs_again_at_once_on_restart(
    vectors: VectorStore, settings: Settings
) -> None:
    from dataclasses import replace

    from core.base.runtime.context import TickControl
    from core.base.state.tenants import set_tenant_config
    from core.reconcile.run_pass import reconcile_tick
    from core.suite.tick import run_tick

    enabled = replace(settings, reconcile=replace(settings.reconcile, enabled=True))
    graph = await open_graph(enabled.state)
    try:
        for tenant in ("acme", "globex"):
            await set_tenant_config(graph, tenant, repo_slug=f"{tenant}/kb")
        stopping = TickControl()
        stopping.request_stop()  # the daemon's stop arrives before the first tenant
        result = await run_tick("reconcile", TickContext(enabled, graph, vectors, stopping),
                                reconcile_tick, dry_run=False)
        record = (await last_ticks(graph))["reconcile"]
    finally:
        await graph.close()
    assert result.incomplete == "stopped between tenants"
    assert not record.ok and record.figures["stopped"] is True

    passes = Ticks()
    [waited] = await first_ticks([DaemonSpec("reconcile", (Job("reconcile", passes, 3_600_000),))],
                                 enabled, vectors, [passes])
    assert waited < 1.0, "not an hour later: the last pass did not finish"
