"""The demo's own data folder: how it proves a folder is its own, and how it puts it back to the
start.

`make demo` must tell the same story every time it runs: the same lines linked, re-queued and
dead-lettered, the same drift. A re-run on the state the last run left would not (its
re-queued lines would have aged toward the dead-letter file, its queue would be spent). So the
demo starts each run from nothing, but only in a folder it can prove is its own, and nothing
it did not write is ever written over (`judge_folder`, the one judgement):

- a fresh folder (no graph, no queue file), or one that holds no node, edge or queue line (the
  daemons ran on it before any data arrived: their tick records stay) is its own;
- each run leaves, when it is done, a footprint file `<dataDir>/.kb-demo.json`: a digest of
  every node, edge and queue file (`core.suite.demo.footprint`). A later run whose folder
  still matches it exactly removes the graph and the queue files (never Chroma: its demo rows
  are upserted again unchanged) and seeds afresh;
- any other folder is not the demo's: it changed since (a tenant's policy or manifest set with
  `kb-tenants`, a drained queue, a producer's line, real nodes), it holds data and no
  footprint, its state is in PostgreSQL, or running daemons use it. The demo then refuses
  (exit 2) and names what changed: it never runs on such a folder, so it changes nothing there.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import shutil
from pathlib import Path

from core.base.chroma import STORE_LOCK_NAME
from core.base.config.config import Settings
from core.base.io.files import create_private_file, file_size
from core.base.io.locks import ProcessLock
from core.base.rules.errors import LockHeld
from core.base.state.graph import count_nodes_and_edges, edge_pages, node_pages
from core.base.state.state import open_graph
from core.drain.stores.dead_letter_file import spill_dir
from core.drain.stores.queue_files import producers_held
from core.suite.demo.footprint import (
    FILE_NAMES,
    DemoFootprint,
    FootprintBuilder,
    changes,
    describe,
)
from core.suite.migrate import daemons_stopped

#: The demo's footprint file, in the data folder it owns.
FOOTPRINT_FILE = ".kb-demo.json"
#: Bytes read from a queue file at a time while hashing it.
READ_BYTES = 1 << 20

#: Why a folder is not the demo's own, as its refusal says it (after "<folder> ").
NOT_OURS_FOREIGN = ("holds graph nodes or queue lines the demo did not write (and no footprint "
                    f"{FOOTPRINT_FILE} of a demo run)")
NOT_OURS_UNREADABLE = (f"holds data, and its footprint {FOOTPRINT_FILE} is not one this demo "
                       "wrote (torn, edited, or an older demo's), so nothing proves the data is "
                       "the demo's")
NOT_OURS_POSTGRES = ("holds state in PostgreSQL (stateUrl), which the demo never resets; only "
                     "an empty database is the demo's")
NOT_OURS_IN_USE = "is in use by running daemons (stop them to start the story again)"


def _footprint_path(settings: Settings) -> Path:
    return settings.data_dir / FOOTPRINT_FILE


def _file_digest(path: Path) -> str | None:
    """A file's sha256, read in bounded chunks; None when it is absent or empty."""
    digest = hashlib.sha256()
    try:
        with path.open("rb") as stream:
            while chunk := stream.read(READ_BYTES):
                digest.update(chunk)
    except (FileNotFoundError, NotADirectoryError):
        return None
    return digest.hexdigest() if path.stat().st_size else None


def _folder_digest(folder: Path) -> str | None:
    """A digest of every file under `folder` (names and content); None when there is none."""
    files = sorted(p for p in folder.rglob("*") if p.is_file()) if folder.is_dir() else []
    if not files:
        return None
    digest = hashlib.sha256()
    for path in files:
        digest.update(json.dumps([str(path.relative_to(folder)),
                                  _file_digest(path)]).encode() + b"\n")
    return digest.hexdigest()


def _queue_file_digests(settings: Settings) -> dict[str, str | None]:
    return {"queue": _file_digest(settings.drain.lazy_edges_queue_path),
            "draining": _file_digest(settings.drain.draining_path),
            "deadLetters": _file_digest(settings.drain.dead_letter_path),
            "spilled": _folder_digest(spill_dir(settings.drain.dead_letter_path))}


def _has_graph(settings: Settings) -> bool:
    return bool(settings.state.url) or settings.state.graph_db_path.exists()


async def measure(settings: Settings) -> DemoFootprint:
    """The folder's footprint now: every node and edge (the graph read-only, a page at a
    time; a missing file counts as empty) and every queue file."""
    builder = FootprintBuilder()
    if _has_graph(settings):
        graph = await open_graph(settings.state, read_only=True)
        try:
            tables = await graph.table_names()
            if {"nodes", "edges"} <= tables:
                async for page in node_pages(graph):
                    builder.add_nodes(page)
                async for page in edge_pages(graph):
                    builder.add_edges(page)
        finally:
            await graph.close()
    for key, digest in (await asyncio.to_thread(_queue_file_digests, settings)).items():
        builder.add_file(key, digest)
    return builder.footprint()


async def holds_nothing(settings: Settings) -> bool:
    """No node, edge or queue line (what the daemons leave when they ran on nothing)."""
    nodes = edges = 0
    if _has_graph(settings):
        graph = await open_graph(settings.state, read_only=True)
        try:
            nodes, edges = await count_nodes_and_edges(graph, await graph.table_names())
        finally:
            await graph.close()
    drain = settings.drain
    files = (drain.lazy_edges_queue_path, drain.draining_path, drain.dead_letter_path)
    return nodes == edges == 0 and not any(file_size(path) for path in files) \
        and _folder_digest(spill_dir(settings.drain.dead_letter_path)) is None


async def claim_folder(settings: Settings, *, reset: bool = True) -> str | None:
    """None when this run may call the data folder its own (see the module docstring), else
    why not, as a phrase after the folder's name; nothing is changed then. The folder of the
    demo's last run exactly as it left it is put back to the start (`remove_demo_state`)
    unless `reset` is off (the neo demo empties its whole folder itself)."""
    if not settings.state.url and is_fresh(settings):
        return None
    if await holds_nothing(settings):
        return None
    if settings.state.url:
        return NOT_OURS_POSTGRES
    footprint = recorded(settings)
    if footprint is None:
        return NOT_OURS_UNREADABLE if _footprint_path(settings).exists() else NOT_OURS_FOREIGN
    found = changes(footprint, await measure(settings))
    if found:
        return f"holds data the demo did not write ({describe(found)} since its last run)"
    if not reset:
        return NOT_OURS_IN_USE if store_in_use(settings) else None
    return await asyncio.to_thread(_reset_unless_changed, settings, footprint)


def _reset_unless_changed(settings: Settings, footprint: DemoFootprint) -> str | None:
    """(blocking) `remove_demo_state`, holding the daemons' locks (none runs or starts
    meanwhile: removing the graph under a daemon would lose what it writes next) and the
    queue producers' lock, under which the queue files are compared once more with the
    footprint: a line appended since the folder was measured is seen, never removed."""
    queue = settings.drain.lazy_edges_queue_path
    try:
        with contextlib.ExitStack() as held:
            held.enter_context(daemons_stopped(settings, hint="stop them to start the "
                                               "story again"))
            if queue.parent.is_dir():
                held.enter_context(producers_held(queue))
            if _queue_file_digests(settings) != {key: footprint.files.get(key)
                                                  for key in FILE_NAMES}:
                return ("holds data the demo did not write (its queue files changed since "
                        "its last run)")
            remove_demo_state(settings)
    except LockHeld:
        return NOT_OURS_IN_USE
    return None


def store_in_use(settings: Settings) -> bool:
    """Whether another process (a running daemon) holds the embedded store's lock."""
    if settings.chroma.server_mode or not (settings.chroma.path / STORE_LOCK_NAME).exists():
        return False
    try:
        ProcessLock(settings.chroma.path / STORE_LOCK_NAME, purpose="the store").acquire(
            ).release()
    except LockHeld:
        return True
    return False


def is_fresh(settings: Settings) -> bool:
    """No graph and no queue yet: a run here may call the folder its own."""
    drain = settings.drain
    return not any(p.exists() for p in (settings.state.graph_db_path, drain.lazy_edges_queue_path,
                                        drain.draining_path, drain.dead_letter_path))


def recorded(settings: Settings) -> DemoFootprint | None:
    """The footprint the demo's last run wrote, or None (none, or unreadable)."""
    try:
        return DemoFootprint.from_json(
            json.loads(_footprint_path(settings).read_text(encoding="utf-8")))
    except (OSError, ValueError):
        return None


def remember(settings: Settings, footprint: DemoFootprint) -> None:
    """Write the footprint (atomically: a torn file must not look like a match)."""
    path = _footprint_path(settings)
    temporary = path.with_suffix(".tmp")
    with os.fdopen(create_private_file(temporary, os.O_WRONLY | os.O_TRUNC), "w",
                   encoding="utf-8") as handle:
        handle.write(json.dumps(footprint.to_json(), sort_keys=True) + "\n")
    temporary.replace(path)


def remove_demo_state(settings: Settings) -> None:
    """Remove what a demo run wrote outside Chroma: the graph (with its WAL files), the queue,
    its `.draining`, the dead letters and their side folder, the telemetry spool, and the
    footprint itself."""
    graph = settings.state.graph_db_path
    for path in (graph, graph.with_name(graph.name + "-wal"), graph.with_name(graph.name + "-shm"),
                 graph.with_name(graph.name + "-journal"), settings.drain.lazy_edges_queue_path,
                 settings.drain.draining_path, settings.drain.dead_letter_path,
                 settings.telemetry_spool_path, _footprint_path(settings)):
        path.unlink(missing_ok=True)
    shutil.rmtree(spill_dir(settings.drain.dead_letter_path), ignore_errors=True)
