"""The daemons' commands with `stateUrl` set, run as an operator runs them (subprocesses, a
real config file, the session's real PostgreSQL, an embedded Chroma in a temp folder):
`status` (text and `--json`), a drain `--tick`, a reconcile `--tick` (dry and tombstoning) and
`kb-tenants` all work on the database, and nothing lands in a `graph.sqlite`."""

from __future__ import annotations

import asyncio
import json
import subprocess
from pathlib import Path
from typing import Any

from core.base.chroma import VectorStore
from core.base.config.config import Settings
from core.base.runtime.config_file import load_config
from core.base.state.state import open_graph
from tests.postgres_server import PostgresServer
from tests.support import count_rows, read_edge, run_module, seed

_databases = iter(range(1, 1_000_000))


def write_config(tmp_path: Path, state_url: str, **keys: Any) -> Path:
    """A config file in tmp_path: `dataDir = "data"`, the `stateUrl`, and the given keys."""
    lines = ["[knowledgeBase]", 'dataDir = "data"', f"stateUrl = {json.dumps(state_url)}"]
    lines += [f"{k} = {json.dumps(v)}" for k, v in keys.items()]
    path = tmp_path / "kb.toml"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def run(tmp_path: Path, module: str, *args: str, stdin: str | None = None
        ) -> subprocess.CompletedProcess[str]:
    return run_module(module, *args, "--config", str(tmp_path / "kb.toml"),
                      home=tmp_path / "home", stdin=stdin)


async def _seed_chroma(settings: Settings) -> None:
    """A memory and a session summary to back-fill, and four chunks of tenant `acme`
    stamped with versions 1..4."""
    vectors = await VectorStore.open(settings.chroma)
    try:
        await seed(vectors, settings.chroma.memory_collection,
                   [("m1", {"sessionId": "s1", "createdAt": 1_000, "userId": "u"})])
        await seed(vectors, settings.chroma.summary_collection,
                   [("sum1", {"sessionId": "s1", "title": "t", "createdAt": 1_000,
                              "userId": "u"})])
        await seed(vectors, settings.chroma.knowledge_base_collection, [
            (i, {"tenantId": "acme", "tenantConfigVersion": v, "ingestedAt": 1_000 + v})
            for i, v in (("old1", 1), ("old2", 2), ("grace", 3), ("now", 4))])
    finally:
        await vectors.close()


async def _edge_and_counts(settings: Settings) -> tuple[Any, int]:
    graph = await open_graph(settings.state, read_only=True)
    try:
        edge = await read_edge(graph, "memory:m1", "session:s1", "MENTIONS")
        return edge, await count_rows(graph, "kb_ingestion_metrics")
    finally:
        await graph.close()


def test_every_command_runs_on_postgresql_and_writes_its_state_there(
    tmp_path: Path, postgres_server: PostgresServer
) -> None:
    url = postgres_server.create_database(f"daemons{next(_databases)}")
    config = write_config(tmp_path, url, reconciliationEnabled=True,
                          reconciliationAutoTombstone=True, reconciliationMaxStaleFraction=1.0)
    settings = load_config(str(config)).settings
    asyncio.run(_seed_chroma(settings))

    for _ in range(4):  # version 4
        made = run(tmp_path, "daemons.tenants", "set-config", "acme", "--repo-slug", "acme/r")
        assert made.returncode == 0, made.stderr
    listed = run(tmp_path, "daemons.tenants", "show", "acme", "--json")
    assert listed.returncode == 0, listed.stderr
    assert json.loads(listed.stdout)["version"] == 4

    line = json.dumps({"source": "memory:m1", "target": "session:s1",
                       "relationship": "MENTIONS"}) + "\n"
    assert run(tmp_path, "daemons.enqueue", stdin=line).returncode == 0
    drained = run(tmp_path, "daemons.drain", "--tick", "--json")
    assert drained.returncode == 0, drained.stderr
    assert json.loads(drained.stdout)["drain"]["succeeded"] == 1

    dry = run(tmp_path, "daemons.reconcile", "--tick", "--dry-run", "--json")
    assert dry.returncode == 0, dry.stderr
    dry_figures = json.loads(dry.stdout)
    assert (dry_figures["staleCount"], dry_figures["tombstonedCount"]) == (3, 0)

    ticked = run(tmp_path, "daemons.reconcile", "--tick", "--json")
    assert ticked.returncode == 0, ticked.stderr
    assert json.loads(ticked.stdout)["tombstonedCount"] == 2  # gap 2: versions 1 and 2

    edge, reports = asyncio.run(_edge_and_counts(settings))
    assert edge is not None and reports == 1  # one reconcile row (the dry run writes none)
    assert not settings.state.graph_db_path.exists()

    shown = run(tmp_path, "daemons.status", "--json")
    assert shown.returncode == 0, shown.stderr
    status = json.loads(shown.stdout)
    assert status["graph"]["path"] == url and status["graph"]["present"] is True
    assert status["graph"]["edges"] == 2  # MENTIONS, and the back-fill's ORIGINATES_IN
    assert set(status["ticks"]) >= {"drain", "reconcile"}
    assert [t["currentVersion"] for t in status["tenants"]] == [4]

    text = run(tmp_path, "daemons.status")
    assert text.returncode == 0, text.stderr
    assert f"Graph: {status['graph']['nodes']} nodes, 2 edges" in text.stdout and url in text.stdout
    assert "not created yet" not in text.stdout and "graph.sqlite" not in text.stdout


def test_status_on_an_empty_database_shows_it_present_and_empty(
    tmp_path: Path, postgres_server: PostgresServer
) -> None:
    url = postgres_server.create_database(f"daemons{next(_databases)}")
    write_config(tmp_path, url)
    shown = run(tmp_path, "daemons.status", "--json")
    assert shown.returncode == 0, shown.stderr
    status = json.loads(shown.stdout)
    assert status["graph"]["path"] == url and status["graph"]["nodes"] == 0
    assert status["ticks"] == {}
