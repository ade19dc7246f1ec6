"""A stateful property test of the queue: appends, drains, store failures and crashes in any
order; after every step no line is lost or applied twice, and a final drain settles them all.

A crash is simulated in-process by a BaseException raised at a chosen point of the drain: it
unwinds like a killed process would leave things (the open transaction is rolled back, files
stay as written), and the next step reopens the stores as a restart does.
"""

from __future__ import annotations

import asyncio
import random
import shutil
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test

import core.drain.batches as drain_batches
import core.drain.queue_drain as drain_tick
from core.base.chroma import VectorStore
from core.base.rules.errors import StoreUnavailable
from core.base.runtime.context import TickContext
from core.base.state.graph import upsert_node
from core.base.state.state import open_graph
from core.drain.queue_drain import drain_queue
from core.drain.stores.queue_reader import QueueReader
from tests.reliability.harness import MAX_ATTEMPTS, MEMORIES, SESSIONS, World, audit
from tests.support import make_settings, patch_target, seed

CRASH_POINTS = ("rotate", "link_edges", "write", "remove", "append")


class SimulatedCrash(BaseException):
    """Stands for SIGKILL: not an Exception, so no handler of the drainer swallows it."""


def run_machine(shared: VectorStore, loop: asyncio.AbstractEventLoop) -> None:
    class QueueMachine(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            self.root = Path(tempfile.mkdtemp(prefix="kb-machine-"))
            s = make_settings(self.root, lazyEdgeMaxAttempts=MAX_ATTEMPTS)
            self.world = World(self.root, self.root / "unused.toml", s,
                               rng=random.Random(0))
            loop.run_until_complete(self._make_concepts())

        async def _make_concepts(self) -> None:
            graph = await open_graph(self.world.settings.state)
            for c in range(10):
                await upsert_node(graph, f"CONCEPT:c{c}", "CONCEPT")
            await graph.close()

        async def _drain(self, patches: Mapping[tuple[Any, str], Callable[..., Any]]) -> None:
            graph = await open_graph(self.world.settings.state)
            originals = {(owner, name): getattr(owner, name) for owner, name in patches}
            try:
                for (owner, name), replacement in patches.items():
                    setattr(owner, name, replacement)
                await drain_queue(TickContext(self.world.settings, graph, shared))
            except (StoreUnavailable, SimulatedCrash):
                pass
            finally:
                for (owner, name), original in originals.items():
                    setattr(owner, name, original)
                await graph.close()

        @rule(count=st.integers(1, 30), seed_value=st.integers(0, 2**16))
        def append_lines(self, count: int, seed_value: int) -> None:
            self.world.rng = random.Random(seed_value)
            self.world.append(count)

        @rule()
        def drain_cleanly(self) -> None:
            loop.run_until_complete(self._drain({}))

        @rule()
        def drain_while_chroma_fails(self) -> None:
            def failing(name: str, method: str, kwargs: Mapping[str, Any]) -> Any:
                raise ConnectionError("injected: Chroma unreachable")

            loop.run_until_complete(self._drain({(shared, "_call_on_collection"): failing}))

        @rule(point=st.sampled_from(CRASH_POINTS), after=st.booleans())
        def crash_mid_drain(self, point: str, after: bool) -> None:
            owner, name = {
                "rotate": (drain_tick, "rotate_queue"),
                "link_edges": (drain_batches, "link_edges"),
                "write": (drain_batches.BatchSettler, "_write"),
                "remove": (QueueReader, "remove_and_collect_late_bytes"),
                "append": (drain_batches, "append_locked"),
            }[point]
            real = patch_target(owner, name)

            if asyncio.iscoroutinefunction(real):
                async def crashing_async(*args: Any, **kwargs: Any) -> Any:
                    if after:
                        await real(*args, **kwargs)
                    raise SimulatedCrash(point)
                replacement: Callable[..., Any] = crashing_async
            else:
                def crashing(*args: Any, **kwargs: Any) -> Any:
                    if after:
                        real(*args, **kwargs)
                    raise SimulatedCrash(point)
                replacement = crashing
            loop.run_until_complete(self._drain({(owner, name): replacement}))

        @invariant()
        def nothing_lost_or_applied_twice(self) -> None:
            result = audit(self.world, allow_pending=True)
            assert not result.lost, result.lost
            assert not result.applied_twice, result.applied_twice
            assert not result.both, result.both

        def teardown(self) -> None:
            try:
                for _ in range(MAX_ATTEMPTS + 2):
                    loop.run_until_complete(self._drain({}))
                result = audit(self.world)
                assert result.ok, result
                assert result.pending == 0
            finally:
                shutil.rmtree(self.root, ignore_errors=True)

    run_state_machine_as_test(
        QueueMachine,
        settings=settings(max_examples=12, stateful_step_count=12, deadline=None,
                          suppress_health_check=list(HealthCheck)),
    )


def test_any_sequence_of_appends_drains_failures_and_crashes_loses_nothing(
    tmp_path: Path,
) -> None:
    loop = asyncio.new_event_loop()
    try:
        shared = loop.run_until_complete(VectorStore.open(make_settings(tmp_path).chroma))
        s = make_settings(tmp_path)
        loop.run_until_complete(seed(
            shared, s.chroma.memory_collection,
            [(f"m{i}", {"sessionId": f"s{i % SESSIONS}", "createdAt": i})
             for i in range(MEMORIES)]))
        loop.run_until_complete(seed(
            shared, s.chroma.summary_collection,
            [(f"sum{j}", {"sessionId": f"s{j}", "createdAt": 0}) for j in range(0, SESSIONS, 2)]))
        try:
            run_machine(shared, loop)
        finally:
            loop.run_until_complete(shared.close())
    finally:
        loop.close()
