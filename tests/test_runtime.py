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

from core.jobs.context import TickContext
from core.rules.config import Settings
from core.runtime.metrics import Metrics
from core.runtime.scheduler import (
    MAX_BACKOFF_FACTOR,
    DaemonRunner,
    DaemonSpec,
    RuntimeOptions,
    _supervise,
    backoff_delay_ms,
    first_run_delay_ms,
    serve,
)
from core.runtime.systemd import Notifier
from core.runtime.tick import Job
from core.stores.chroma import VectorStore
from core.stores.daemon_state import TickRecord, last_ticks, record_tick
from core.stores.sqlite import GraphDB
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


async def wait_until(predicate: Any, within: float = 5.0) -> None:
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
    graph = await GraphDB.open(settings.graph_db_path)
    started = int(time.time() * 1000) - 1500
    await record_tick(graph, TickRecord("d", started, started + 10, 10, True, {}))
    await graph.close()
    ticks = Ticks()
    begun = time.monotonic()
    await served([DaemonSpec("d", (Job("d", ticks, 2000),))])
    await wait_until(lambda: len(ticks.calls) == 1)
    waited = ticks.calls[0] - begun
    assert 0.3 < waited < 1.5, f"first tick after the ~0.5 s remainder, not at once ({waited})"


async def test_ticks_are_recorded_so_the_next_start_knows(served: Any,
                                                           settings: Settings) -> None:
    ticks = Ticks()
    _, stop = await served([DaemonSpec("d", (Job("d", ticks, 10_000),))])
    await wait_until(lambda: len(ticks.calls) == 1)
    await asyncio.sleep(0.1)
    stop.set()
    await asyncio.sleep(0.3)
    graph = await GraphDB.open(settings.graph_db_path)
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


async def test_metrics_answer_on_loopback(served: Any, tmp_path: Path) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    settings = make_settings(tmp_path / "m", metricsPort=port)
    ticks = Ticks()
    await served([DaemonSpec("d", (Job("d", ticks, 10_000),))], use_settings=settings)
    await wait_until(lambda: len(ticks.calls) == 1)
    await asyncio.sleep(0.1)
    body = await asyncio.to_thread(
        lambda: urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read())
    text = body.decode()
    assert 'kb_ticks_total{job="d",outcome="ok"} 1' in text
    assert "kb_queue_lines 0" in text
