"""The demo's own data folder: how it recognizes it, and how it puts it back to the start.

`make demo` must tell the same story every time it runs: the same lines linked, re-queued and
dead-lettered, the same drift. A re-run on the state the last run left would not (its
re-queued lines would have aged toward the dead-letter file, its queue would be spent). So the
demo starts each run from nothing, but only in a folder it can prove is its own:

- a run that finds no graph file and no queue writes, when it is done, a footprint file
  `<dataDir>/.kb-demo.json`: the graph's node and edge counts and the queue files' sizes;
- a later run whose folder still matches that footprint exactly removes the graph and the
  queue files (never Chroma: its demo rows are upserted again unchanged) and seeds afresh;
- a folder that changed since (a daemon drained the queue, a producer appended a line, real
  nodes arrived) or that has no footprint is never reset: the demo runs on it as it is and
  says so.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path

from core.base.chroma import STORE_LOCK_NAME
from core.base.config.config import Settings
from core.base.io.files import create_private_file, file_size
from core.base.io.locks import ProcessLock
from core.base.rules.errors import LockHeld
from core.base.state.graph import count_nodes_and_edges
from core.base.state.state import open_graph
from core.drain.stores.dead_letter_file import spill_dir

#: The demo's footprint file, in the data folder it owns.
FOOTPRINT_FILE = ".kb-demo.json"


@dataclass(frozen=True, slots=True)
class DemoFootprint:
    """What the demo's last run left: anything else means someone else wrote here since."""

    nodes: int
    edges: int
    queue_bytes: int
    draining_bytes: int
    dead_letter_bytes: int


#: A folder with no node, edge or queue line (what the daemons leave when they ran on nothing).
EMPTY_FOOTPRINT = DemoFootprint(0, 0, 0, 0, 0)


def _footprint_path(settings: Settings) -> Path:
    return settings.data_dir / FOOTPRINT_FILE


async def measure(settings: Settings) -> DemoFootprint:
    """The folder's footprint now (the graph read-only; a missing file counts as empty)."""
    nodes = edges = 0
    if settings.graph_db_path.exists():
        graph = await open_graph(settings, read_only=True)
        try:
            nodes, edges = await count_nodes_and_edges(graph, await graph.table_names())
        finally:
            await graph.close()
    return DemoFootprint(nodes, edges, file_size(settings.lazy_edges_queue_path),
                         file_size(settings.draining_path), file_size(settings.dead_letter_path))


def store_in_use(settings: Settings) -> bool:
    """Whether another process (a running daemon) holds the embedded store's lock."""
    if settings.server_mode or not (settings.chroma_path / STORE_LOCK_NAME).exists():
        return False
    try:
        ProcessLock(settings.chroma_path / STORE_LOCK_NAME, purpose="the store").acquire(
            ).release()
    except LockHeld:
        return True
    return False


def is_fresh(settings: Settings) -> bool:
    """No graph and no queue yet: a run here may call the folder its own."""
    return not any(p.exists() for p in (settings.graph_db_path, settings.lazy_edges_queue_path,
                                        settings.draining_path, settings.dead_letter_path))


def recorded(settings: Settings) -> DemoFootprint | None:
    """The footprint the demo's last run wrote, or None (none, or unreadable)."""
    try:
        data = json.loads(_footprint_path(settings).read_text(encoding="utf-8"))
        return DemoFootprint(**{k: int(data[k]) for k in DemoFootprint.__dataclass_fields__})
    except (OSError, ValueError, TypeError, KeyError):
        return None


def remember(settings: Settings, footprint: DemoFootprint) -> None:
    """Write the footprint (atomically: a torn file must not look like a match)."""
    path = _footprint_path(settings)
    temporary = path.with_suffix(".tmp")
    with os.fdopen(create_private_file(temporary, os.O_WRONLY | os.O_TRUNC), "w",
                   encoding="utf-8") as handle:
        handle.write(json.dumps(asdict(footprint), sort_keys=True) + "\n")
    temporary.replace(path)


def remove_demo_state(settings: Settings) -> None:
    """Remove what a demo run wrote outside Chroma: the graph (with its WAL files), the queue,
    its `.draining`, the dead letters and their side folder, the telemetry spool, and the
    footprint itself."""
    graph = settings.graph_db_path
    for path in (graph, graph.with_name(graph.name + "-wal"), graph.with_name(graph.name + "-shm"),
                 graph.with_name(graph.name + "-journal"), settings.lazy_edges_queue_path,
                 settings.draining_path, settings.dead_letter_path,
                 settings.telemetry_spool_path, _footprint_path(settings)):
        path.unlink(missing_ok=True)
    shutil.rmtree(spill_dir(settings.dead_letter_path), ignore_errors=True)
