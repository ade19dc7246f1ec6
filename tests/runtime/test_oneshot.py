"""One way in: a one-shot run takes the scheduler's path, with its time bound and its graceful
stop (real signals, real stores)."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from core.base.config.config import Settings
from core.base.io.clock import now_ms
from core.base.reports.progress import LogProgress
from core.base.runtime.context import TickContext
from core.base.state.daemon_state import last_ticks
from core.base.state.state import open_graph
from core.drain.eager_backfill import STOPPED, eager_backfill
from core.suite.oneshot import TimedOut, run_jobs_once
from core.suite.tick import Job, open_context
from tests.support import REPO, child_env, count_rows, make_settings, seed


@dataclass(frozen=True, slots=True)
class Units:
    """A test tick's figures: the units of work it did, and whether it was cut short."""

    units: int
    interrupted: bool = False


async def test_a_stop_signal_ends_the_tick_after_its_unit_without_a_keyboard_interrupt(
    settings: Settings,
) -> None:
    started = asyncio.Event()

    async def tick(context: TickContext, dry_run: bool) -> Units:
        started.set()
        units = 0
        while not context.control.stopping:
            await asyncio.sleep(0.01)  # one unit of work
            units += 1
        return Units(units, interrupted=True)

    async def interrupt() -> None:
        await started.wait()
        os.kill(os.getpid(), signal.SIGINT)

    sender = asyncio.create_task(interrupt())
    done = await run_jobs_once(settings, [Job("one", tick, 60_000)], dry_run=False)
    await sender
    assert done.figures["one"].json()["interrupted"] is True
    assert done.run.stopped_exit_code == 128 + signal.SIGINT
    graph = await open_graph(settings.state)
    try:
        assert (await last_ticks(graph))["one"].ok, "the stopped tick is recorded as done"
    finally:
        await graph.close()


async def test_jobs_after_a_stop_signal_are_not_started(settings: Settings) -> None:
    ran: list[str] = []

    async def first(context: TickContext, dry_run: bool) -> Units:
        ran.append("first")
        os.kill(os.getpid(), signal.SIGTERM)
        await asyncio.sleep(0.05)  # the handler runs on the loop
        return Units(1)

    async def second(context: TickContext, dry_run: bool) -> Units:
        ran.append("second")
        return Units(1)

    done = await run_jobs_once(settings, [Job("first", first, 60_000),
                                          Job("second", second, 60_000)], dry_run=False)
    assert ran == ["first"]
    assert done.run.stopped_exit_code == 128 + signal.SIGTERM


async def test_a_tick_past_its_jobs_bound_is_cancelled_and_says_so(settings: Settings) -> None:
    async def hangs(context: TickContext, dry_run: bool) -> Units:
        await asyncio.sleep(60)
        return Units(1)

    began = time.monotonic()
    with pytest.raises(TimedOut, match=r"the slow tick took longer than 0\.2 s"):
        await run_jobs_once(settings, [Job("slow", hangs, 60_000, timeout_s=0.2)],
                            dry_run=False)
    assert time.monotonic() - began < 10


def test_the_one_shot_bound_is_the_scheduled_jobs_bound() -> None:
    async def tick(context: TickContext, dry_run: bool) -> Units:
        return Units(0)

    assert Job("drain", tick, 3_600_000).effective_timeout_s == 3_600.0
    assert Job("alerting", tick, 60_000).effective_timeout_s == 300.0


def test_a_second_signal_exits_at_once(tmp_path: Path) -> None:
    script = textwrap.dedent(f"""
        import asyncio, sys
        from core.base.runtime.logs import configure_logging
        from core.suite.oneshot import run_jobs_once
        from core.suite.tick import Job
        from tests.support import make_settings
        from pathlib import Path

        async def stubborn(context, dry_run):
            print("ticking", flush=True)
            await asyncio.sleep(120)  # ignores the stop flag
            return {{}}

        configure_logging("json")  # on stderr: stdout carries only the handshake
        settings = make_settings(Path({str(tmp_path)!r}))
        asyncio.run(run_jobs_once(settings, [Job("t", stubborn, 60_000)], dry_run=False))
    """)
    child = subprocess.Popen([sys.executable, "-c", script], cwd=REPO,
                             env=child_env(tmp_path / "home"), stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "ticking"
        child.send_signal(signal.SIGINT)
        time.sleep(0.5)
        assert child.poll() is None, "the first signal only asks the tick to stop"
        child.send_signal(signal.SIGINT)
        assert child.wait(timeout=30) == 128 + signal.SIGINT
    finally:
        child.kill()
        child.wait()


async def test_a_stopped_eager_backfill_syncs_nothing_more_and_is_not_ok(tmp_path: Path) -> None:
    settings = make_settings(tmp_path)
    async with open_context(settings) as context:
        await seed(context.vectors, settings.chroma.summary_collection,
                   [("sum1", {"sessionId": "s1", "createdAt": now_ms()})])
        await seed(context.vectors, settings.chroma.memory_collection,
                   [("m1", {"sessionId": "s1", "createdAt": now_ms()})])
        context.control.request_stop()
        report = await eager_backfill(context, days=3, dry_run=False, skip_drain=False,
                                      progress=LogProgress())
        assert await count_rows(context.graph, "nodes") == 0
    assert report.window.session_ids == ["s1"]
    assert report.ingest_error == STOPPED
    assert report.drain_skipped == STOPPED and report.drain is None
    assert report.ok is False
