"""The deletion engine with the state on PostgreSQL (the session's real server) and an
embedded Chroma: every band's archive rows are in the database before its delete, one part per
band, whichever plan of the pass wrote them (retention's too), and a host fenced before its
delete has shared its archive and deleted nothing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from core.base.chroma import VectorStore
from core.base.config.config import Settings
from core.base.rules.tenants import TENANT_CONFIG_LABEL
from core.base.runtime.context import TickContext
from core.base.runtime.fencing import fenced
from core.base.state.graph import upsert_node
from core.base.state.graph_db import GraphDB
from core.reconcile import deletion
from core.reconcile.retention import retention_tick
from core.reconcile.run_pass import reconcile_tick
from core.reconcile.stores.archives.shared import fetch
from core.suite.tick import run_tick
from tests.support import make_settings, seed

pytestmark = pytest.mark.parametrize("backend", ["postgres"], indirect=True)

STALE = [f"s{i}" for i in range(5)]
LEGACY = ["l1", "l2"]


async def seed_acme(graph: GraphDB, vectors: VectorStore, settings: Settings) -> None:
    """Five stale chunks with an `ingestedAt`, two legacy ones without (a plan of their own)."""
    await upsert_node(graph, "kb-config:acme", TENANT_CONFIG_LABEL,
                      {"version": 3, "repoSlug": "acme/repo"})
    rows: list[tuple[str, dict[str, Any]]] = [
        (i, {"tenantId": "acme", "repoSlug": "acme/repo", "tenantConfigVersion": 1,
             "ingestedAt": 10 + n})
        for n, i in enumerate(STALE)]
    rows += [(i, {"tenantId": "acme", "repoSlug": "acme/repo", "tenantConfigVersion": 1})
             for i in LEGACY]
    await seed(vectors, settings.chroma.knowledge_base_collection, rows)


def tombstoning(tmp_path: Path, graph: GraphDB) -> Settings:
    return make_settings(tmp_path, stateUrl=graph.location, reconciliationEnabled=True,
                         reconciliationAutoTombstone=True, reconciliationMaxStaleFraction=1.0)


async def one_pass(settings: Settings, graph: GraphDB, vectors: VectorStore) -> dict[str, Any]:
    """One pass through the same path as `--tick`."""
    context = TickContext(settings, graph, vectors)
    return (await run_tick("reconcile", context, reconcile_tick, dry_run=False)).json()


async def parts_of(graph: GraphDB, name: str) -> int:
    rows = await graph.query("SELECT count(*) FROM tombstone_archive_parts WHERE name = $1",
                             [name])
    return int(rows[0][0])


async def test_every_band_of_every_plan_is_shared_and_the_copy_is_the_file(
    tmp_path: Path, graph: GraphDB, vectors: VectorStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(deletion, "BAND_ROWS", 2)
    settings = tombstoning(tmp_path, graph)
    await seed_acme(graph, vectors, settings)

    figures = await one_pass(settings, graph, vectors)

    assert figures["tombstonedCount"] == 7
    [archive] = (Path(a) for a in figures["archives"])
    # The legacy plan's one band, then the stale plan's three (2 + 2 + 1).
    assert await parts_of(graph, archive.name) == 4
    assert await fetch(graph, archive.name) == archive.read_bytes()


class LostLead:
    """The fault a paused leader meets: another host leads by the time of the delete."""

    valid_for_s = 1.0

    async def lost_reason(self) -> str | None:
        return "another host took the lock"


async def test_a_host_fenced_before_its_delete_has_shared_the_archive_and_deleted_nothing(
    tmp_path: Path, graph: GraphDB, vectors: VectorStore
) -> None:
    settings = tombstoning(tmp_path, graph)
    await seed_acme(graph, vectors, settings)

    with fenced(LostLead()):
        figures = await one_pass(settings, graph, vectors)

    assert (figures["tombstonedCount"], figures["failedTenants"]) == (0, 1)
    assert await vectors.count(settings.chroma.knowledge_base_collection) == 7
    [archive] = (Path(a) for a in figures["archives"])
    assert await fetch(graph, archive.name) == archive.read_bytes()


async def test_retention_shares_its_archives_too(
    tmp_path: Path, graph: GraphDB, vectors: VectorStore
) -> None:
    settings = make_settings(tmp_path, stateUrl=graph.location, gcEnabled=True,
                             gcAutoDelete=True, gcRetention={"maxCount": 2})
    await seed_acme(graph, vectors, settings)

    figures = (await run_tick("gc", TickContext(settings, graph, vectors), retention_tick,
                              dry_run=False)).json()

    assert figures["deletedCount"] == 3  # the 3 oldest of the 5 with an `ingestedAt`
    [archive] = (Path(t["archive"]) for t in figures["tenants"] if t.get("archive"))
    assert await fetch(graph, archive.name) == archive.read_bytes()
