"""One drain tick in a process of its own, reporting its peak memory (the memory test's child).

    python -m tests.drain_memory_child CONFIG

Opens the stores as a tick does, drains, and prints one JSON object: the drain's figures and
`ru_maxrss` (KiB on Linux) measured after the stores were opened and after the drain. A parent
compares it with the same child run on an empty queue, so imports and open stores cancel out.
"""

from __future__ import annotations

import asyncio
import json
import resource
import sys

from core.base.rules.camel_json import to_json
from core.base.runtime.config_file import load_config
from core.base.runtime.logs import configure_logging
from core.drain.queue_drain import drain_queue
from core.suite.tick import open_context


def _peak_kib() -> int:
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)


async def _tick(config: str) -> dict[str, object]:
    settings = load_config(config, environ={}).settings
    async with open_context(settings) as stores:
        opened = _peak_kib()
        stats = await drain_queue(stores)
        return {"openedPeakKiB": opened, "peakKiB": _peak_kib(), "drain": to_json(stats)}


def main(argv: list[str]) -> int:
    configure_logging("json")
    print(json.dumps(asyncio.run(_tick(argv[0]))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
