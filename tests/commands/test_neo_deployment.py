"""The commands on a neo.mjs deployment's own graph, as an operator runs them: `neoRoot` names
the checkout, every command works on the original's file, the original's `sqlite_master`
entries stay byte for byte after each, its triggers log the daemons' writes, its boot run
again afterwards breaks nothing; and every bad layout is exit 2 with the file unchanged."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import subprocess
import sys
from contextlib import closing
from pathlib import Path

import pytest

from core.base.chroma import VectorStore
from core.base.rules.graph_schema import NeoEra
from tests.neo_graphs import (
    SEED_NODES,
    agent_memory,
    assert_original_schema_unchanged,
    boot,
    build_neo_graph,
    documents,
    file_bytes,
    graph_log,
    schema_entries,
    tenant_config,
)
from tests.support import REPO, child_env, make_settings, run_module, seed

GRAPH = ".neo-ai-data/sqlite/memory-core-graph.sqlite"
#: 2023-11-14T22:13:20Z
INGESTED_MS = 1_700_000_000_000


def checkout(root: Path, era: NeoEra) -> Path:
    """A neo.mjs checkout the platform ran in: its data folder and its graph."""
    build_neo_graph(root / "neo" / GRAPH, era,
                    nodes=[*SEED_NODES, agent_memory("m1"), tenant_config("acme", version=4)])
    return root / "neo" / GRAPH


def write_config(root: Path, extra: str = "") -> Path:
    config = root / "kb.toml"
    config.write_text('[knowledgeBase]\ndataDir = "data"\nneoRoot = "neo"\nchromaUrl = ""\n'
                      'reconciliationEnabled = true\nreconciliationAutoTombstone = true\n'
                      f'reconciliationMaxStaleFraction = 1.0\nlogFormat = "json"\n{extra}')
    return config


async def seed_chroma(root: Path) -> None:
    settings = make_settings(root, dataDir=str(root / "data"))
    vectors = await VectorStore.open(settings.chroma)
    try:
        await seed(vectors, settings.chroma.memory_collection,
                   [(f"m{i}", {"sessionId": "s1", "timestamp": INGESTED_MS, "userId": "tobiu",
                               "createdAt": "2026-08-01T00:00:00Z"}) for i in (1, 2)])
        await seed(vectors, settings.chroma.summary_collection,
                   [("summary_s1", {"sessionId": "s1", "title": "First", "userId": "tobiu",
                                    "createdAt": "2099-01-01T00:00:00Z"})])
        await seed(vectors, settings.chroma.knowledge_base_collection, [
            (f"c{v}", {"tenantId": "acme", "repoSlug": "github.com/acme/repo",
                       "sourcePath": f"f{v}.md", "tenantConfigVersion": v,
                       "ingestedAt": INGESTED_MS + v}) for v in (1, 2, 4)])
    finally:
        await vectors.close()


def command(root: Path, config: Path, *args: str) -> dict[str, object]:
    done = run_module(*args, "--config", str(config), home=root / "home", timeout=180)
    assert done.returncode == 0, (args, done.stdout, done.stderr[-3000:])
    parsed: dict[str, object] = json.loads(done.stdout)
    return parsed


def test_every_command_works_on_the_originals_graph_and_leaves_its_schema_byte_for_byte(
    tmp_path: Path,
) -> None:
    graph = checkout(tmp_path, NeoEra.E3)
    asyncio.run(seed_chroma(tmp_path))
    config = write_config(tmp_path)
    queue = tmp_path / "neo" / ".neo-ai-data/memory-core/lazy-edges.jsonl"
    queue.parent.mkdir(parents=True, exist_ok=True)
    queue.write_text(json.dumps({"source": "CONCEPT:a", "target": "MEMORY:m2",
                                 "relationship": "MENTIONED_IN"}) + "\n")
    before, log = schema_entries(graph), len(graph_log(graph))
    runs = [("daemons.status", "--json"), ("daemons.drain", "--tick", "--dry-run", "--json"),
            ("daemons.drain", "--tick", "--json"),
            ("daemons.backfill", "--days", "30000", "--json"),
            ("daemons.tenants", "list", "--json"), ("daemons.tenants", "show", "acme", "--json"),
            ("daemons.reconcile", "explain", "acme", "--json"),
            ("daemons.reconcile", "--tick", "--json")]
    shown = {}
    for args in runs:
        shown[args] = command(tmp_path, config, *args)
        assert_original_schema_unchanged(before, graph)
    archives = shown[("daemons.reconcile", "--tick", "--json")]["archives"]
    assert isinstance(archives, list) and len(archives) == 1
    restored = command(tmp_path, config, "daemons.reconcile", "restore", archives[0], "--json")
    assert restored["restored"] == 2
    status = command(tmp_path, config, "daemons.status", "--json")
    assert_original_schema_unchanged(before, graph)

    assert shown[("daemons.drain", "--tick", "--json")]["drain"]["succeeded"] == 1  # type: ignore[index]
    nodes = documents(graph)
    assert nodes["m2"]["label"] == "AGENT_MEMORY" and "memory:m2" not in nodes
    assert len(graph_log(graph)) > log, "the original's triggers logged the daemons' writes"
    tenants = shown[("daemons.tenants", "list", "--json")]["tenants"]
    assert isinstance(tenants, list)
    assert [(t["tenantId"], t["version"]) for t in tenants] == [("acme", 4)]
    graph_shown = status["graph"]
    assert isinstance(graph_shown, dict)
    assert graph_shown["schema"] == "neo" and graph_shown["neo"]["era"] == "E3"
    assert graph_shown["neo"]["nodes"] == len(nodes) == graph_shown["nodes"]
    with closing(sqlite3.connect(graph)) as conn:
        rows = conn.execute("SELECT event_type, tenant_id FROM kb_ingestion_metrics").fetchall()
    assert ("reconcile", "acme") in rows

    boot(graph, NeoEra.E3)  # the platform starts again: nothing breaks, the daemons go on
    queue.write_text(json.dumps({"source": "CONCEPT:b", "target": "memory:m1",
                                 "relationship": "MENTIONED_IN"}) + "\n")
    again = command(tmp_path, config, "daemons.drain", "--tick", "--json")
    assert again["drain"]["succeeded"] == 1  # type: ignore[index]
    assert_original_schema_unchanged(before, graph)


def test_on_an_e1_checkout_the_queue_is_in_the_checkout_and_an_upgrade_breaks_nothing(
    tmp_path: Path,
) -> None:
    graph = checkout(tmp_path, NeoEra.E1)
    asyncio.run(seed_chroma(tmp_path))
    config = write_config(tmp_path)
    queue = tmp_path / "neo" / "ai/data/memory-core/lazy-edges.jsonl"
    queue.parent.mkdir(parents=True, exist_ok=True)
    queue.write_text(json.dumps({"source": "CONCEPT:a", "target": "memory:m2",
                                 "relationship": "MENTIONED_IN"}) + "\n")
    before = schema_entries(graph)
    drained = command(tmp_path, config, "daemons.drain", "--tick", "--json")
    assert drained["drain"]["succeeded"] == 1  # type: ignore[index]
    assert_original_schema_unchanged(before, graph)
    assert documents(graph)["memory:m2"]["label"] == "MEMORY"
    for version in (NeoEra.E1, NeoEra.E2):  # its own boot again, then an upgrade to E2
        boot(graph, version)
    queue.write_text(json.dumps({"source": "CONCEPT:b", "target": "memory:m1",
                                 "relationship": "MENTIONED_IN"}) + "\n")
    again = command(tmp_path, config, "daemons.drain", "--tick", "--json")
    assert again["drain"]["succeeded"] == 1  # type: ignore[index]
    with closing(sqlite3.connect(graph)) as conn:
        assert conn.execute("SELECT COUNT(*) FROM kb_daemons_drain_generations"
                            ).fetchone()[0] >= 1, "the daemons' own state survived both boots"


def refused(root: Path, config: Path, *args: str, env: dict[str, str] | None = None) -> str:
    """Run a command that must be refused: exit 2, one line on stderr (returned)."""
    environ = {**child_env(root / "home"), **(env or {})}
    done = subprocess.run([sys.executable, "-m", *args, "--config", str(config)], cwd=REPO,
                          env=environ, capture_output=True, text=True, timeout=120,
                          check=False)
    assert done.returncode == 2, (done.returncode, done.stdout, done.stderr)
    [line] = done.stderr.splitlines()
    assert f"{config}:" in line, line
    return line


def everything(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): (p.read_bytes() if p.is_file() else b"")
            for p in sorted(root.rglob("*")) if "home" not in p.relative_to(root).parts}


@pytest.mark.parametrize(("layout", "words"), [
    ("missing-root", "neoRoot: {root}/neo: not a folder (a neo.mjs checkout)"),
    ("no-data-folder", "holds no .neo-ai-data folder"),
    ("no-graph", "no neo.mjs graph there (neoRoot is set)"),
    ("foreign", "cannot be used as the graph: found tables users"),
    ("kb-named", 'graphSchema = "kb" but the file holds neo.mjs graph (E3'),
    ("memory-variable", "$NEO_MEMORY_DB_PATH=:memory:"),
    ("state-url", "stateUrl cannot go with neoRoot"),
])
def test_a_bad_layout_is_exit_2_in_one_line_and_nothing_is_written(
    tmp_path: Path, layout: str, words: str,
) -> None:
    env: dict[str, str] = {}
    extra = ""
    if layout != "missing-root":
        (tmp_path / "neo").mkdir()
    if layout not in ("missing-root", "no-data-folder"):
        (tmp_path / "neo" / ".neo-ai-data").mkdir()
    if layout in ("foreign", "kb-named", "memory-variable", "state-url"):
        if layout == "foreign":
            (tmp_path / "neo" / GRAPH).parent.mkdir(parents=True)
            with closing(sqlite3.connect(tmp_path / "neo" / GRAPH)) as conn:
                conn.execute("CREATE TABLE users (id TEXT)")
                conn.commit()
        else:
            checkout(tmp_path, NeoEra.E3)
    if layout == "kb-named":
        extra = 'graphSchema = "kb"\n'
    if layout == "memory-variable":
        env = {"NEO_MEMORY_DB_PATH": ":memory:"}
    if layout == "state-url":
        extra = 'stateUrl = "postgresql://127.0.0.1:9/kb"\n'
    config = write_config(tmp_path, extra)
    graph = tmp_path / "neo" / GRAPH
    schema = schema_entries(graph) if graph.exists() else None
    before = everything(tmp_path)
    args = ("daemons.drain", "--tick", "--json") if len(layout) % 2 else ("daemons.status",)
    line = refused(tmp_path, config, *args, env=env)
    assert words.format(root=tmp_path) in line, line
    assert everything(tmp_path) == before
    if schema is not None:
        assert schema_entries(graph) == schema and file_bytes(graph)


def test_graph_schema_neo_on_this_projects_graph_is_refused_untouched(tmp_path: Path) -> None:
    first = tmp_path / "kb.toml"
    first.write_text('[knowledgeBase]\ndataDir = "data"\n')
    command(tmp_path, first, "daemons.tenants", "set-config", "acme", "--json")
    graph = tmp_path / "data" / "graph.sqlite"
    before = file_bytes(graph), schema_entries(graph)
    config = tmp_path / "neo.toml"
    config.write_text('[knowledgeBase]\ndataDir = "data"\ngraphSchema = "neo"\n')
    line = refused(tmp_path, config, "daemons.drain", "--tick", "--json")
    assert "graphSchema = \"neo\" but the file holds this project's graph" in line
    assert (file_bytes(graph), schema_entries(graph)) == before
