"""Tenant nodes on real neo.mjs graph files of each of the original's schema versions, written
through the `kb-tenants` commands: each node is exactly what the original's `setTenantConfig` /
`setTenantManifest` would have left (label, properties), every key another writer put there is
kept, the original's `sqlite_master` entries stay byte for byte, its triggers log the write,
and its row-filtered read (research §2.2) finds the node without a request context. A
reconcile pass on such a graph reads the tenants and names each one's telemetry repo as the
original's reconciler does (the smallest repo of its recorded events)."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from core.base.chroma import VectorStore
from core.base.rules.graph_schema import NeoEra
from core.base.state.neo.schema import NEO_TELEMETRY_DDL
from tests.neo_graphs import (
    BARE_ERAS,
    ERAS,
    SEED_NODES,
    Node,
    assert_original_schema_unchanged,
    build_neo_graph,
    connected,
    documents,
    file_bytes,
    graph_log,
    node_rows,
    schema_entries,
    tenant_config,
    tenant_manifest,
)
from tests.support import make_settings, seed

REPO_A = "github.com/acme/repo"
REPO_B = "github.com/acme/b"
IDENTITY = "ab" * 32
#: The original's row filter with no request context (both user parameters NULL), as
#: `SQLite.loadNodeVicinitySync` adds it (E2/E3; research §2.2).
ROW_FILTERED_READ = (
    "SELECT id FROM Nodes WHERE id = ? AND (user_id = ? OR user_id = ? OR user_id IS NULL "
    "OR json_extract(data,'$.properties.sharedEntity') = 1 "
    "OR json_extract(data,'$.properties.visibility') = 'team')")


@pytest.fixture(params=ERAS, ids=str)
def era(request: pytest.FixtureRequest) -> NeoEra:
    return NeoEra(request.param)


def config_file(tmp_path: Path, extra: str = "") -> Path:
    path = tmp_path / "kb.toml"
    path.write_text(f'[knowledgeBase]\ndataDir = "{tmp_path / "data"}"\n'
                    f'graphDbPath = "{tmp_path / "neo.sqlite"}"\nchromaUrl = ""\n'
                    f'logFormat = "json"\n{extra}')
    return path


def kb_tenants(config: Path, capsys: pytest.CaptureFixture[str], *args: str) -> int:
    """`kb-tenants ARGS --config F` in this process; its exit code."""
    from daemons.tenants import main

    capsys.readouterr()
    with pytest.raises(SystemExit) as exited:
        main([*args, "--config", str(config)])
    code = exited.value.code
    return code if isinstance(code, int) else 1


def graph(tmp_path: Path, era: NeoEra, *nodes: Node) -> Path:
    path = tmp_path / "neo.sqlite"
    build_neo_graph(path, era, nodes=[*SEED_NODES, *nodes])
    return path


def properties(path: Path, node_id: str) -> dict[str, Any]:
    document = documents(path)[node_id]
    assert set(document) == {"id", "label", "properties"}
    props: dict[str, Any] = document["properties"]
    return props


def logged(path: Path, era: NeoEra, node_id: str) -> bool:
    """Whether the original's triggers logged a write of `node_id` (True where the schema
    has no `GraphLog`: nothing to log into)."""
    return era is NeoEra.V0 or any(e[1] == node_id for e in graph_log(path))


def visible_to_the_original(path: Path, node_id: str) -> bool:
    with closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as conn:
        return conn.execute(ROW_FILTERED_READ, (node_id, None, None)).fetchone() is not None


def test_set_config_creates_the_node_the_original_creates_and_raises_its_version(
    tmp_path: Path, era: NeoEra, capsys: pytest.CaptureFixture[str],
) -> None:
    path = graph(tmp_path, era)
    config = config_file(tmp_path)
    before = schema_entries(path)
    assert kb_tenants(config, capsys, "set-config", "@fresh", "--json") == 0
    assert json.loads(capsys.readouterr().out)["version"] == 1
    first = documents(path)["kb-config:fresh"]
    assert first == {"id": "kb-config:fresh", "label": "KnowledgeBaseTenantConfig",
                     "properties": {
                         "name": "kb-config:fresh", "description": "", "tenantId": "fresh",
                         "useDefaultSources": True, "rawRepoSource": False,
                         "useDefaultParsers": True, "customSources": [], "customParsers": [],
                         "sourcePaths": {}, "tenantRepos": [], "version": 1,
                         "visibility": "team"}}
    assert kb_tenants(config, capsys, "set-config", "fresh") == 0
    assert properties(path, "kb-config:fresh") == {**first["properties"], "version": 2}
    assert_original_schema_unchanged(before, path)
    assert logged(path, era, "kb-config:fresh")
    if era in BARE_ERAS:
        assert node_rows(path)["kb-config:fresh"][0] is None
        assert visible_to_the_original(path, "kb-config:fresh")


def test_set_config_on_the_originals_node_raises_its_version_and_keeps_every_key(
    tmp_path: Path, era: NeoEra, capsys: pytest.CaptureFixture[str],
) -> None:
    original = tenant_config("acme", version=3)
    custom = {**original.properties, "customSources": [{"id": "wiki"}], "userId": "alice",
              "sourcePaths": {"docs": ["a/"]}}
    path = graph(tmp_path, era, Node(original.id, original.label, custom))
    config = config_file(tmp_path)
    before, log = schema_entries(path), len(graph_log(path)) if era is not NeoEra.V0 else 0
    assert kb_tenants(config, capsys, "set-config", "acme") == 0
    assert properties(path, "kb-config:acme") == {**custom, "version": 4}
    assert "repoSlug" not in properties(path, "kb-config:acme")
    assert_original_schema_unchanged(before, path)
    if era is not NeoEra.V0:
        assert graph_log(path)[log:] == [(graph_log(path)[-1][0], "kb-config:acme", "nodes")]
    if era in BARE_ERAS:
        assert node_rows(path)["kb-config:acme"][0] == "alice", "its owner kept"
        assert visible_to_the_original(path, "kb-config:acme")


def test_set_config_with_a_repo_slug_on_a_neo_graph_is_exit_2_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    path = graph(tmp_path, NeoEra.E3, tenant_config("acme"))
    config = config_file(tmp_path)
    assert kb_tenants(config, capsys, "set-config", "acme") == 0  # the own tables exist now
    unchanged = file_bytes(path)
    assert kb_tenants(config, capsys, "set-config", "acme", "--repo-slug", REPO_A) == 2
    assert "tenantRepos" in capsys.readouterr().err
    assert file_bytes(path) == unchanged


def test_set_policy_makes_a_hidden_config_readable_and_keeps_its_owner_and_keys(
    tmp_path: Path, era: NeoEra, capsys: pytest.CaptureFixture[str],
) -> None:
    """A config a request wrote before the original marked them `visibility: 'team'`
    (PR #11717) is hidden from its context-free reads; a daemon's write makes it readable."""
    original = tenant_config("acme")
    hidden = {k: v for k, v in original.properties.items() if k != "visibility"}
    path = graph(tmp_path, era, Node(original.id, original.label, {**hidden, "userId": "bob"}))
    config = config_file(tmp_path)
    before = schema_entries(path)
    if era in BARE_ERAS:
        assert not visible_to_the_original(path, "kb-config:acme")
    assert kb_tenants(config, capsys, "set-policy", "acme", "--auto-tombstone", "off") == 0
    assert properties(path, "kb-config:acme") == {
        **hidden, "userId": "bob", "reconciliationPolicy": {"autoTombstone": "off"},
        "visibility": "team"}
    assert_original_schema_unchanged(before, path)
    assert logged(path, era, "kb-config:acme")
    if era in BARE_ERAS:
        assert node_rows(path)["kb-config:acme"][0] == "bob"
        assert visible_to_the_original(path, "kb-config:acme")


def test_set_manifest_and_set_yield_write_the_originals_entry_and_keep_the_other_repos(
    tmp_path: Path, era: NeoEra, capsys: pytest.CaptureFixture[str],
) -> None:
    original = tenant_manifest("acme", REPO_A, ["a.md", "b.md"], 1_000)
    receipt = {**original.properties["manifests"][REPO_A], "materializationReceipt": {"x": 1}}
    stored = {**original.properties, "manifests": {REPO_A: receipt}}
    path = graph(tmp_path, era, tenant_config("acme"),
                 Node(original.id, original.label, stored))
    config = config_file(tmp_path)
    before = schema_entries(path)
    (tmp_path / "paths.txt").write_text("z.md\ny.md\n")
    assert kb_tenants(config, capsys, "set-manifest", "acme", "--repo-slug", REPO_B,
                      "--paths-file", str(tmp_path / "paths.txt"), "--force",
                      "--create") == 0
    after = properties(path, "kb-manifest:acme")
    entry = after["manifests"][REPO_B]
    assert entry == {"repoSlug": REPO_B, "pathsAfterPush": ["y.md", "z.md"],
                     "updatedAt": entry["updatedAt"]}
    assert after == {**stored, "manifests": {REPO_A: receipt, REPO_B: entry},
                     "updatedAt": entry["updatedAt"], "visibility": "team"}
    assert documents(path)["kb-manifest:acme"]["label"] == "KnowledgeBaseTenantManifest"

    (tmp_path / "yield.txt").write_text("y.md\n")
    assert kb_tenants(config, capsys, "set-yield", "acme", "--repo-slug", REPO_B,
                      "--extraction-identity", IDENTITY,
                      "--paths-file", str(tmp_path / "yield.txt")) == 0
    yielded = properties(path, "kb-manifest:acme")
    snapshot = yielded["manifests"][REPO_B]["extractionSnapshot"]
    assert snapshot == {"yieldedSourcePaths": ["y.md"], "extractionIdentity": IDENTITY,
                        "updatedAt": snapshot["updatedAt"]}
    assert yielded["manifests"][REPO_B] == {**entry, "extractionSnapshot": snapshot}
    assert yielded == {**after, "manifests": {REPO_A: receipt, REPO_B: {
        **entry, "extractionSnapshot": snapshot}}}
    assert_original_schema_unchanged(before, path)
    assert logged(path, era, "kb-manifest:acme")
    if era in BARE_ERAS:
        assert visible_to_the_original(path, "kb-manifest:acme")


def test_remove_yield_and_remove_manifest_rewrite_the_map_and_keep_the_other_repos(
    tmp_path: Path, era: NeoEra, capsys: pytest.CaptureFixture[str],
) -> None:
    """The original's merge never deletes a key: a removal writes the node's whole
    `manifests` map without the entry (or its snapshot), through its triggers."""
    original = tenant_manifest("acme", REPO_A, ["a.md", "b.md"], 1_000)
    receipt = {**original.properties["manifests"][REPO_A], "materializationReceipt": {"x": 1}}
    snapshot = {"yieldedSourcePaths": ["y.md"], "extractionIdentity": IDENTITY,
                "updatedAt": 2_000}
    stray = {"repoSlug": REPO_B, "pathsAfterPush": ["y.md"], "updatedAt": 2_000,
             "extractionSnapshot": snapshot}
    stored = {**original.properties, "manifests": {REPO_A: receipt, REPO_B: stray}}
    path = graph(tmp_path, era, tenant_config("acme"),
                 Node(original.id, original.label, stored))
    config = config_file(tmp_path)
    before = schema_entries(path)
    assert kb_tenants(config, capsys, "remove-yield", "acme", "--repo-slug", REPO_B) == 0
    unsnapped = {k: v for k, v in stray.items() if k != "extractionSnapshot"}
    assert properties(path, "kb-manifest:acme") == {
        **stored, "manifests": {REPO_A: receipt, REPO_B: unsnapped}}
    assert kb_tenants(config, capsys, "remove-manifest", "acme", "--repo-slug", REPO_B) == 0
    assert properties(path, "kb-manifest:acme") == {**stored, "manifests": {REPO_A: receipt}}
    assert documents(path)["kb-manifest:acme"]["label"] == "KnowledgeBaseTenantManifest"
    assert_original_schema_unchanged(before, path)
    assert logged(path, era, "kb-manifest:acme")
    unchanged = file_bytes(path)
    assert kb_tenants(config, capsys, "remove-manifest", "acme", "--repo-slug", REPO_B) == 0
    assert "nothing to remove" in capsys.readouterr().out
    assert file_bytes(path) == unchanged


def test_set_repo_gives_the_platforms_entry_a_generation_and_refuses_an_undeclared_repo(
    tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    original = tenant_config("acme")
    path = graph(tmp_path, NeoEra.E3, original)
    config = config_file(tmp_path)
    assert kb_tenants(config, capsys, "set-repo", "acme", "--repo-slug", REPO_A,
                      "--parser-id", "md") == 0
    [declared] = properties(path, "kb-config:acme")["tenantRepos"]
    assert declared == {**original.properties["tenantRepos"][0], "parserId": "md",
                        "parserVersion": "1.0.0"}, "its cloneUrl and credentialRef kept"
    assert kb_tenants(config, capsys, "set-repo", "acme", "--repo-slug", REPO_A,
                      "--clear") == 0
    assert properties(path, "kb-config:acme")["tenantRepos"] == original.properties[
        "tenantRepos"]
    unchanged = file_bytes(path)
    assert kb_tenants(config, capsys, "set-repo", "acme", "--repo-slug", REPO_B,
                      "--parser-id", "md") == 2
    assert "cloneUrl" in capsys.readouterr().err
    assert file_bytes(path) == unchanged


async def seed_stale_chunks(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, dataDir=str(tmp_path / "data"))
    vectors = await VectorStore.open(settings.chroma)
    try:
        await seed(vectors, settings.chroma.knowledge_base_collection, [
            (f"{tenant}-{v}", {"tenantId": tenant, "repoSlug": f"github.com/{tenant}/repo",
                               "sourcePath": f"f{v}.md", "tenantConfigVersion": v,
                               "ingestedAt": 1_000 + v})
            for tenant in ("acme", "beta") for v in (1, 3)])
    finally:
        await vectors.close()


def record_ingestion(path: Path, tenant: str, repos: list[str]) -> None:
    """Telemetry rows as the original's KBRecorderService writes them on ingestion (its
    table created as it creates it)."""
    with connected(path) as conn:
        conn.executescript(NEO_TELEMETRY_DDL)
        for i, repo in enumerate(repos):
            conn.execute("INSERT INTO kb_ingestion_metrics (id, timestamp, tenant_id, "
                         "repo_slug, event_type, chunks_total) VALUES (?, ?, ?, ?, 'ingest', 1)",
                         (f"{tenant}-{i}", 1_000 + i, tenant, repo))


def test_reconcile_reads_the_originals_tenants_and_names_the_repo_as_the_original(
    tmp_path: Path, era: NeoEra, capsys: pytest.CaptureFixture[str],
) -> None:
    """`acme` has ingestion telemetry (repos `github.com/acme/c` and `github.com/acme/b`):
    the original's reconciler names the smallest; `beta` has none: named by its data."""
    from daemons.reconcile import main

    path = graph(tmp_path, era, tenant_config("acme"), tenant_config("beta"))
    config = config_file(tmp_path, "reconciliationEnabled = true\n")
    record_ingestion(path, "acme", ["github.com/acme/c", REPO_B])
    asyncio.run(seed_stale_chunks(tmp_path))
    before = schema_entries(path)
    capsys.readouterr()
    with pytest.raises(SystemExit) as exited:
        main(["--tick", "--json", "--config", str(config)])
    assert exited.value.code == 0
    figures = json.loads(capsys.readouterr().out)
    assert [(t["tenantId"], t["currentVersion"], t["staleCount"])
            for t in figures["tenants"]] == [("acme", 3, 1), ("beta", 3, 1)]
    with closing(sqlite3.connect(path)) as conn:
        named = dict(conn.execute("SELECT tenant_id, repo_slug FROM kb_ingestion_metrics "
                                  "WHERE event_type = 'reconcile'").fetchall())
    assert named == {"acme": REPO_B, "beta": "github.com/beta/repo"}
    assert_original_schema_unchanged(before, path)
