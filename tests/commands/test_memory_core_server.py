"""The original's older Chroma layout, on two real `chroma run` servers: the knowledge base on
one (`chromaUrl`), the memory core on the other (`memoryCoreChromaUrl`). The drain reads
memories and summaries from the memory server, a reconcile pass reads chunks from the
knowledge base's, and neither server gets the other's collections."""

from __future__ import annotations

import asyncio
import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from core.base.chroma import VectorStore
from core.base.config.config import Settings
from core.base.io.clock import now_ms
from core.base.rules.errors import StoreUnavailable
from core.base.runtime.config_file import load_config
from core.base.state.state import open_graph
from tests.chroma_server import ChromaServer, free_port
from tests.support import read_node, run_module, seed, seed_acme_drift


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ChromaServer, ...]]:
    """Two servers for the module: the knowledge base's and the memory core's."""
    root = tmp_path_factory.mktemp("two-servers")
    started: list[ChromaServer] = []
    try:
        for name in ("kb", "memory"):
            server = ChromaServer(root / name, home=root / "home")
            server.start()
            started.append(server)
        yield tuple(started)
    finally:
        for server in started:
            server.stop()


def write_config(folder: Path, *, kb_url: str, memory_url: str) -> Path:
    config = folder / "kb.toml"
    config.write_text("\n".join([
        "[knowledgeBase]", 'dataDir = "data"', f'chromaUrl = "{kb_url}"',
        f'memoryCoreChromaUrl = "{memory_url}"', "reconciliationEnabled = true",
        'logFormat = "json"']) + "\n", encoding="utf-8")
    return config


def collections_on(server: ChromaServer) -> dict[str, list[str]]:
    """Each collection of a server and its ids, read from the server itself."""
    import chromadb

    client = chromadb.HttpClient(host="127.0.0.1", port=server.port)
    return {c.name: sorted(c.get(include=[])["ids"]) for c in client.list_collections()}


def run(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_module(*args, home=tmp_path / "home")


async def prepare(settings: Settings) -> None:
    """The acme drift (chunks on the knowledge base's server) and, on the memory server, two
    sessions of the original's rows: `live` summarized now, `old` a month ago, whose memory a
    queued line names."""
    await seed_acme_drift(settings)
    vectors = await VectorStore.open(settings.chroma)
    try:
        now = now_ms()
        await seed(vectors, settings.chroma.summary_collection, [
            ("summary_live", {"sessionId": "live", "timestamp": now, "title": "Live"}),
            ("summary_old", {"sessionId": "old", "timestamp": now - 30 * 86_400_000})])
        await seed(vectors, settings.chroma.memory_collection, [
            ("m-live", {"sessionId": "live", "timestamp": now, "userId": "tobiu"}),
            ("m-old", {"sessionId": "old", "timestamp": 1, "userId": "tobiu"})])
    finally:
        await vectors.close()
    queue = settings.drain.lazy_edges_queue_path
    queue.parent.mkdir(parents=True, exist_ok=True)
    queue.write_text(json.dumps({"source": "memory:m-old", "target": "session:live",
                                 "relationship": "REFERENCED_BY"}) + "\n")


def test_drain_and_reconcile_each_read_their_own_server_and_create_nothing_on_the_other(
    tmp_path: Path, servers: tuple[ChromaServer, ChromaServer]
) -> None:
    kb, memory = servers
    config = write_config(tmp_path, kb_url=kb.url, memory_url=memory.url)
    settings = load_config(str(config), environ={}).settings
    assert settings.chroma.memory_core_apart
    asyncio.run(prepare(settings))
    assert set(collections_on(kb)) == {"neo-knowledge-base"}
    assert set(collections_on(memory)) == {"neo-agent-memory", "neo-agent-sessions"}

    drained = run(tmp_path, "daemons.drain", "--tick", "--json", "--config", str(config))
    assert drained.returncode == 0, drained.stderr
    figures = json.loads(drained.stdout)
    assert figures["liveIngest"]["sessionsUpserted"] == 1  # `live`, from the memory server
    assert figures["drain"]["succeeded"] == 1  # `m-old` and `old` back-filled from it

    reconciled = run(tmp_path, "daemons.reconcile", "--tick", "--json", "--config", str(config))
    assert reconciled.returncode == 0, reconciled.stderr
    [acme] = json.loads(reconciled.stdout)["tenants"]
    assert (acme["scanned"], acme["staleCount"], acme["actionableCount"]) == (3, 3, 2)

    async def nodes() -> dict[str, Any]:
        graph = await open_graph(settings.state, read_only=True)
        try:
            return {i: n.properties if (n := await read_node(graph, i)) else None
                    for i in ("session:live", "memory:m-live", "memory:m-old", "session:old")}
        finally:
            await graph.close()

    found = asyncio.run(nodes())
    assert found["memory:m-live"] is not None and found["memory:m-live"]["liveIngested"]
    assert found["memory:m-old"] is not None and found["memory:m-old"]["backfilled"]
    assert found["session:old"] is not None and found["session:old"]["chromaId"] == "summary_old"
    # Nothing was created on the wrong server, nor in an embedded store.
    assert set(collections_on(kb)) == {"neo-knowledge-base"}
    assert set(collections_on(memory)) == {"neo-agent-memory", "neo-agent-sessions"}
    assert not (tmp_path / "data/chroma").exists()

    status = run(tmp_path, "daemons.status", "--json", "--config", str(config))
    assert status.returncode == 0, status.stderr
    shown = json.loads(status.stdout)["config"]
    assert (shown["chroma"], shown["memoryCoreChroma"]) == (kb.url, memory.url)


def test_a_memory_server_that_does_not_answer_fails_the_drain_and_not_the_reconcile_pass(
    tmp_path: Path, servers: tuple[ChromaServer, ChromaServer]
) -> None:
    kb, _ = servers
    absent = f"http://127.0.0.1:{free_port()}"
    config = write_config(tmp_path, kb_url=kb.url, memory_url=absent)
    asyncio.run(seed_acme_drift(load_config(str(config), environ={}).settings))
    before = collections_on(kb)
    drained = run(tmp_path, "daemons.drain", "--tick", "--json", "--config", str(config))
    assert drained.returncode == 1, drained.stderr
    # An outage met mid-tick, as any store's: the tick's failure logged, then one line.
    line = drained.stderr.splitlines()[-1]
    assert line.startswith(f"daemons.drain: error: Chroma server {absent}: cannot open"), line
    assert json.loads(drained.stdout)["ok"] is False
    # The pass reads only the knowledge base: a memory server that is down does not stop it.
    reconciled = run(tmp_path, "daemons.reconcile", "--tick", "--json", "--config", str(config))
    assert reconciled.returncode == 0, reconciled.stderr
    assert json.loads(reconciled.stdout)["tenants"][0]["staleCount"] == 3
    assert collections_on(kb) == before


async def test_a_memory_server_that_failed_is_tried_again_and_never_after_close(
    tmp_path: Path, servers: tuple[ChromaServer, ChromaServer]
) -> None:
    kb, _ = servers
    config = write_config(tmp_path, kb_url=kb.url,
                          memory_url=f"http://127.0.0.1:{free_port()}")
    settings = load_config(str(config), environ={}).settings
    store = await VectorStore.open(settings.chroma)
    for _ in range(2):  # each call tries the server again; none leaves a connection behind
        with pytest.raises(StoreUnavailable, match="cannot open"):
            await store.count(settings.chroma.memory_collection)
    assert store._memory_core is None
    await store.close()
    with pytest.raises(StoreUnavailable, match="store is closed"):
        await store.count(settings.chroma.memory_collection)
    assert store._memory_core is None


def test_without_chroma_url_a_memory_server_is_exit_2_and_creates_nothing(
    tmp_path: Path,
) -> None:
    config = tmp_path / "kb.toml"
    config.write_text('[knowledgeBase]\ndataDir = "data"\n'
                      'memoryCoreChromaUrl = "http://127.0.0.1:8001"\n', encoding="utf-8")
    done = run(tmp_path, "daemons.drain", "--tick", "--json", "--config", str(config))
    assert done.returncode == 2, done.stderr
    [line] = done.stderr.splitlines()
    assert "knowledgeBase.memoryCoreChromaUrl" in line and "chromaUrl is empty" in line
    assert json.loads(done.stdout)["ok"] is False
    assert not (tmp_path / "data").exists()
