"""Store faults: a real Chroma server stopped before a tick or killed mid-pass, SQLite held by
another writer, a full disk while re-queueing. Each time: the tick fails cleanly, nothing is
lost or half-applied, and the next tick after the fault is gone completes the work."""

from __future__ import annotations

import errno
import json
import subprocess
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

import core.drain.batches as drain_batches
import core.drain.stores.queue_files as lazy_queue
from core.base.chroma import VectorStore
from core.base.config.config import Settings
from core.base.rules.camel_json import to_json
from core.base.rules.errors import StoreUnavailable
from core.base.runtime.context import TickContext
from core.base.state.graph import upsert_node
from core.base.state.graph_db import GraphDB
from core.base.state.state import open_graph
from core.base.state.tenants import set_tenant_config
from core.drain.queue_drain import drain_queue
from core.reconcile.archives.restore import restore_archive
from core.reconcile.run_pass import reconcile_tick
from tests.chroma_server import ChromaServer
from tests.support import (
    make_settings,
    patch_target,
    read_archived_chunks,
    read_edge,
    run_module,
    seed,
)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ChromaServer]:
    chroma = ChromaServer(tmp_path / "server-data", home=tmp_path / "home")
    chroma.start()
    yield chroma
    chroma.kill()


def edge_line(target: str, n: int) -> str:
    return json.dumps({"source": "CONCEPT:a", "target": target, "relationship": f"R{n}"})


def run_tick(module: str, config: Path, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    return run_module(module, "--tick", "--json", "--config", str(config),
                      home=tmp_path / "home")


async def test_a_stopped_server_fails_the_drain_tick_and_the_next_tick_completes(
    server: ChromaServer, tmp_path: Path
) -> None:
    settings = make_settings(tmp_path, chromaUrl=server.url)
    vectors = await VectorStore.open(settings.chroma)
    await seed(vectors, settings.chroma.memory_collection, [(f"m{i}", {"sessionId": "s"})
                                                     for i in range(5)])
    await vectors.ensure_collection(settings.chroma.summary_collection)
    await vectors.close()
    graph = await open_graph(settings.state)
    await upsert_node(graph, "CONCEPT:a", "CONCEPT")
    await graph.close()
    queue = settings.drain.lazy_edges_queue_path
    queue.parent.mkdir(parents=True, exist_ok=True)
    queue.write_text("".join(edge_line(f"memory:m{i}", i) + "\n" for i in range(5)))
    config = tmp_path / "kb.toml"
    config.write_text(f'[knowledgeBase]\ndataDir = "{settings.data_dir}"\n'
                      f'chromaUrl = "{server.url}"\nlogFormat = "json"\n')

    server.stop()
    failed = run_tick("daemons.drain", config, tmp_path)
    assert failed.returncode == 1
    assert json.loads(failed.stdout)["ok"] is False
    assert len(queue.read_text().splitlines()) == 5, "every line still on disk"

    server.start()
    done = run_tick("daemons.drain", config, tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout)["drain"]["succeeded"] == 5
    assert not queue.exists()


@pytest.fixture
async def kb(server: ChromaServer, tmp_path: Path) -> AsyncIterator[TickContext]:
    """A server-mode tenant `t1` at version 3 with 3,000 chunks at stamp 1 (actionable)
    and 1,000 at stamp 3 (current), plus 500 chunks of tenant `t2` with the same stamps."""
    settings = make_settings(tmp_path, chromaUrl=server.url, reconciliationEnabled=True,
                             reconciliationAutoTombstone=True,
                             reconciliationMaxStaleFraction=1.0)
    vectors = await VectorStore.open(settings.chroma)
    rows = [(f"t1-old-{i}", {"tenantId": "t1", "repoSlug": "r", "tenantConfigVersion": 1,
                             "ingestedAt": 1_000 + i}) for i in range(3000)]
    rows += [(f"t1-new-{i}", {"tenantId": "t1", "repoSlug": "r", "tenantConfigVersion": 3,
                              "ingestedAt": 1_000 + i}) for i in range(1000)]
    rows += [(f"t2-{i}", {"tenantId": "t2", "repoSlug": "r", "tenantConfigVersion": 1,
                          "ingestedAt": 1_000 + i}) for i in range(500)]
    await seed(vectors, settings.chroma.knowledge_base_collection, rows)
    graph = await open_graph(settings.state)
    for _ in range(3):
        await set_tenant_config(graph, "t1", repo_slug="r")
    yield TickContext(settings, graph, vectors)
    await graph.close()
    await vectors.close()


def archived_ids(settings: Settings) -> set[str]:
    return {chunk.row.id for archive in settings.tombstones_dir.glob("*.jsonl")
            for _header, chunk in read_archived_chunks(archive)}


async def test_a_server_killed_mid_pass_leaves_every_deleted_chunk_archived_and_the_next_pass_completes(  # noqa: E501
    kb: TickContext, server: ChromaServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = kb.settings
    # Three bands, three delete requests.
    monkeypatch.setattr("core.reconcile.deletion.BAND_ROWS", 1_000)
    real_delete = VectorStore.delete_unchanged
    requests = {"n": 0}

    async def delete_then_die(self: VectorStore, name: str, **kwargs: Any) -> Any:
        requests["n"] += 1
        if requests["n"] == 2:
            server.kill()  # the fault: the server dies between two delete requests (bands)
        return await real_delete(self, name, **kwargs)

    monkeypatch.setattr(VectorStore, "delete_unchanged", delete_then_die)
    figures = to_json(await reconcile_tick(kb, False))
    monkeypatch.setattr(VectorStore, "delete_unchanged", real_delete)
    [t1] = figures["tenants"]
    assert figures["failedTenants"] == 1
    first_pass_deleted = t1["tombstonedCount"]
    assert 0 < first_pass_deleted < 3000
    row = await kb.graph.query(
        "SELECT chunks_deleted, error_code FROM kb_ingestion_metrics WHERE tenant_id = 't1'")
    assert row[0][0] == first_pass_deleted, "telemetry records what actually went"
    assert row[0][1] is not None

    server.start()
    figures = to_json(await reconcile_tick(kb, False))
    assert figures["failedTenants"] == 0
    remaining = await kb.vectors.get_by_ids(
        settings.chroma.knowledge_base_collection,
        [f"t1-old-{i}" for i in range(3000)] + [f"t1-new-{i}" for i in range(1000)]
        + [f"t2-{i}" for i in range(500)], include=())
    remaining_ids = {r.id for r in remaining}
    assert remaining_ids == {f"t1-new-{i}" for i in range(1000)} | {f"t2-{i}" for i in range(500)}
    assert archived_ids(settings) >= {f"t1-old-{i}" for i in range(3000)}

    for archive in settings.tombstones_dir.glob("*.jsonl"):
        await restore_archive(kb.vectors, archive,
                              collection=settings.chroma.knowledge_base_collection)
    assert await kb.vectors.count(settings.chroma.knowledge_base_collection) == 4500


async def test_sqlite_held_past_busy_timeout_fails_the_tick_and_the_next_succeeds(
    vectors: VectorStore, tmp_path: Path
) -> None:
    import sqlite3

    settings = make_settings(tmp_path)
    graph = await open_graph(settings.state, busy_timeout_ms=200)
    await upsert_node(graph, "CONCEPT:a", "CONCEPT")
    await upsert_node(graph, "CONCEPT:b", "CONCEPT")
    queue = settings.drain.lazy_edges_queue_path
    queue.parent.mkdir(parents=True)
    queue.write_text(edge_line("CONCEPT:b", 1) + "\n")
    blocker = sqlite3.connect(settings.state.graph_db_path, isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")
    try:
        with pytest.raises(StoreUnavailable, match="database is locked"):
            await drain_queue(TickContext(settings, graph, vectors))
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()
    assert settings.drain.draining_path.exists(), "the lines wait on disk"
    stats = await drain_queue(TickContext(settings, graph, vectors))
    assert stats.orphan_recovered and stats.succeeded == 1
    await graph.close()


async def test_a_full_disk_while_requeueing_keeps_draining_and_the_next_tick_recovers(
    vectors: VectorStore, graph: GraphDB, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    await upsert_node(graph, "CONCEPT:a", "CONCEPT")
    await upsert_node(graph, "CONCEPT:b", "CONCEPT")
    queue = settings.drain.lazy_edges_queue_path
    queue.parent.mkdir(parents=True)
    queue.write_text(edge_line("CONCEPT:b", 1) + "\n" + edge_line("CONCEPT:ghost", 2) + "\n")
    real_append = lazy_queue.append_locked

    def no_space(path: Path, lines: Any, **kwargs: Any) -> None:
        if path == queue:
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        real_append(path, lines, **kwargs)

    patch_target(drain_batches, "append_locked")
    monkeypatch.setattr(drain_batches, "append_locked", no_space)
    with pytest.raises(StoreUnavailable, match="No space left on device"):
        await drain_queue(TickContext(settings, graph, vectors))
    monkeypatch.undo()
    assert settings.drain.draining_path.exists()

    # The re-queue failed before the batch's commit: nothing of it took effect.
    assert await read_edge(graph, "CONCEPT:a", "CONCEPT:b", "R1") is None
    assert not queue.exists() or queue.read_bytes() == b"", "no partial re-queue left behind"
    stats = await drain_queue(TickContext(settings, graph, vectors))
    assert stats.orphan_recovered and stats.succeeded == 1 and stats.requeued == 1
    assert stats.deferred == 1, "re-queued by the leftover, not retried again in this tick"
    [left] = [json.loads(x) for x in queue.read_text().splitlines()]
    assert left["relationship"] == "R2" and left["_drain"]["attempts"] == 1
    edge = await read_edge(graph, "CONCEPT:a", "CONCEPT:b", "R1")
    assert edge is not None and edge.weight == 1.0
