"""Tenant configuration nodes: versions, normalization, listing, and the admin command."""

from __future__ import annotations

import asyncio
import json
import subprocess
from pathlib import Path

import pytest

from core.base.config.config import Settings
from core.base.rules.tenants import TENANT_CONFIG_LABEL, normalize_tenant_id
from core.base.state.graph import upsert_node
from core.base.state.graph_db import GraphDB
from core.base.state.state import open_graph
from core.base.state.tenants import list_tenants, set_tenant_config, tenant_version
from tests.support import read_node, run_module

pytestmark = pytest.mark.both_backends


async def test_a_tenant_without_a_config_node_is_at_version_zero(graph: GraphDB) -> None:
    assert await tenant_version(graph, "nobody") == 0


async def test_the_first_write_gives_version_one_and_each_later_write_one_more(
    graph: GraphDB,
) -> None:
    assert (await set_tenant_config(graph, "acme", repo_slug="acme/kb")).version == 1
    assert (await set_tenant_config(graph, "acme")).version == 2
    assert await tenant_version(graph, "acme") == 2


async def test_the_node_follows_the_contract_shape(graph: GraphDB) -> None:
    await set_tenant_config(graph, "acme", repo_slug="acme/kb")
    node = await read_node(graph, "kb-config:acme")
    assert node is not None
    assert node.label == TENANT_CONFIG_LABEL
    assert node.properties["version"] == 1
    assert node.properties["repoSlug"] == "acme/kb"


async def test_a_later_write_without_a_repo_slug_keeps_the_old_one(graph: GraphDB) -> None:
    await set_tenant_config(graph, "acme", repo_slug="acme/kb")
    config = await set_tenant_config(graph, "acme")
    assert config.repo_slug == "acme/kb"
    assert [t.repo_slug for t in await list_tenants(graph)] == ["acme/kb"]


async def test_properties_written_by_the_platform_are_kept(graph: GraphDB) -> None:
    await upsert_node(graph, "kb-config:acme", TENANT_CONFIG_LABEL,
                            {"version": 3, "chunkSize": 800})
    assert (await set_tenant_config(graph, "acme")).version == 4
    node = await read_node(graph, "kb-config:acme")
    assert node is not None and node.properties["chunkSize"] == 800


async def test_a_leading_at_sign_names_the_same_tenant(graph: GraphDB) -> None:
    await set_tenant_config(graph, "@acme")
    await set_tenant_config(graph, " acme ")
    assert await tenant_version(graph, "@acme") == 2
    assert [t.tenant_id for t in await list_tenants(graph)] == ["acme"]


def test_an_empty_tenant_id_is_refused() -> None:
    for raw in ("", "  ", "@", " @ "):
        with pytest.raises(ValueError, match="empty"):
            normalize_tenant_id(raw)


async def test_an_unreadable_stored_version_counts_as_unconfigured(graph: GraphDB) -> None:
    for tenant, version in (("a-str", "3"), ("b-bool", True), ("c-zero", 0), ("d-float", 2.5)):
        await upsert_node(graph, f"kb-config:{tenant}", TENANT_CONFIG_LABEL, {"version": version})
    assert [t.version for t in await list_tenants(graph)] == [0, 0, 0, 0]
    # The next write starts again at 1 rather than trusting the garbage.
    assert (await set_tenant_config(graph, "a-str")).version == 1


async def test_listing_is_by_tenant_id_and_ignores_other_nodes(graph: GraphDB) -> None:
    for tenant in ("zeta", "alpha", "mid"):
        await set_tenant_config(graph, tenant)
    await upsert_node(graph, "CONCEPT:kb-config:x", "CONCEPT", {})
    await upsert_node(graph, "KB-CONFIG:upper", TENANT_CONFIG_LABEL, {"version": 1})
    assert [t.tenant_id for t in await list_tenants(graph)] == ["alpha", "mid", "zeta"]


async def test_concurrent_writers_each_get_their_own_version(settings: Settings) -> None:
    writers = [await open_graph(settings.state) for _ in range(4)]
    try:
        results = await asyncio.gather(*(set_tenant_config(w, "acme") for w in writers))
    finally:
        for writer in writers:
            await writer.close()
    assert sorted(r.version for r in results) == [1, 2, 3, 4]


def _run(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_module("daemons.tenants", *args, home=tmp_path / "home")


def test_the_admin_command_sets_and_lists_versions(tmp_path: Path) -> None:
    config = tmp_path / "kb.toml"
    config.write_text('[knowledgeBase]\ndataDir = "data"\n', encoding="utf-8")
    first = _run(tmp_path, "set-config", "@acme", "--repo-slug", "acme/kb", "--config", str(config))
    second = _run(tmp_path, "set-config", "acme", "--json", "--config", str(config))
    assert first.returncode == 0
    assert first.stdout.startswith("tenant acme (repo acme/kb): config version 1;")
    assert second.returncode == 0
    assert json.loads(second.stdout) == {"tenantId": "acme", "version": 2, "repoSlug": "acme/kb"}
    listed = _run(tmp_path, "list", "--json", "--config", str(config))
    assert listed.returncode == 0
    assert json.loads(listed.stdout) == {
        "tenants": [{"tenantId": "acme", "version": 2, "repoSlug": "acme/kb"}]
    }


def test_the_admin_command_refuses_an_empty_tenant_in_one_line(tmp_path: Path) -> None:
    result = _run(tmp_path, "set-config", "@")
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "empty" in result.stderr
