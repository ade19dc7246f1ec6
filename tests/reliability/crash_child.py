"""A drain tick that kills itself with SIGKILL at a chosen point (the crash harness's child).

    python -m tests.reliability.crash_child CONFIG POINT HIT [BATCH_LINES]

POINT names where the process dies, the HIT-th time it gets there; `none` runs a clean tick.
The points wrap real functions of the drainer; nothing else is changed. A SIGKILL leaves the
disk exactly as a power cut of the process would: open transactions are lost, files stay.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import core.drain.batches as drain_batches
import core.drain.queue_drain as drain_tick
import core.drain.stores.queue_files as lazy_queue
import core.drain.stores.queue_reader as queue_reader
from core.base.runtime.config_file import load_config
from core.base.runtime.logs import configure_logging
from core.drain.rem_tick import rem_tick
from core.suite.tick import open_context, run_tick
from tests.support import patch_target

#: Each crash point: the function wrapped (owner, name: patched where the drain looks it up)
#: and whether the process dies before the call (else after it returns).
TARGETS: dict[str, tuple[Any, str, bool]] = {
    "before-rename": (drain_tick, "rotate_queue", True),
    # the segment's sidecar is written, the queue not renamed
    "after-sidecar": (lazy_queue, "write_sidecar", False),
    "after-rename": (drain_tick, "rotate_queue", False),
    # an over-limit line's side file is complete
    "after-spill": (queue_reader._Spill, "finish", False),
    # edges written, not committed
    "mid-transaction": (drain_batches, "link_edges", False),
    # dead letters (re-queued lines) appended and fsynced, not committed
    "after-dead-letters": (drain_batches, "append_locked", False),
    "after-requeue": (drain_batches, "append_locked", False),
    "after-commit": (drain_batches.BatchSettler, "_write", False),
    "before-remove": (drain_tick, "hand_back_late_bytes", True),
    # `.draining` unlinked; sidecar and offset row still there
    "after-remove": (queue_reader.QueueReader, "remove_and_collect_late_bytes", False),
}
POINTS = ("none", *TARGETS)


def _die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def _arm(point: str, hit: int) -> None:
    """Wrap the function that marks `point` so that its `hit`-th call kills the process."""
    calls = {"n": 0}

    def due() -> bool:
        calls["n"] += 1
        return calls["n"] == hit

    def around(owner: Any, name: str, *, before: bool) -> None:
        real: Callable[..., Any] = patch_target(owner, name)
        if asyncio.iscoroutinefunction(real):
            async def wrapped_async(*args: Any, **kwargs: Any) -> Any:
                if before and due():
                    _die()
                result = await real(*args, **kwargs)
                if not before and due():
                    _die()
                return result
            setattr(owner, name, wrapped_async)
        else:
            def wrapped(*args: Any, **kwargs: Any) -> Any:
                if before and due():
                    _die()
                result = real(*args, **kwargs)
                if not before and due():
                    _die()
                return result
            setattr(owner, name, wrapped)

    if point == "none":
        return
    if point not in TARGETS:
        raise SystemExit(f"unknown crash point {point!r}; one of {', '.join(POINTS)}")
    owner, name, before = TARGETS[point]
    if point in ("after-dead-letters", "after-requeue"):
        real_append: Callable[..., int] = patch_target(owner, name)
        to_dead_letters = point == "after-dead-letters"  # else: re-queued lines to the queue

        def append(path: Path, lines: Any, **kwargs: Any) -> int:
            size = real_append(path, lines, **kwargs)
            if path.name.endswith(".dead.jsonl") == to_dead_letters and due():
                _die()
            return size

        setattr(owner, name, append)
    else:
        around(owner, name, before=before)


async def _tick(config: str) -> None:
    settings = load_config(config, environ={}).settings
    configure_logging("json")
    async with open_context(settings) as stores:
        await run_tick("drain", stores, rem_tick, dry_run=False)


def main(argv: list[str]) -> int:
    config, point, hit = argv[0], argv[1], int(argv[2])
    if len(argv) > 3:
        patch_target(drain_tick, "DRAIN_BATCH_LINES")
        drain_tick.DRAIN_BATCH_LINES = int(argv[3])
    _arm(point, hit)
    asyncio.run(_tick(config))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
