"""A pass over many tenants reads them by groups (one sweep of the collection, or one `where`
per version over `tenantId $in [...]`) and tombstones them with shared bands; every one of
those paths must reach exactly the per-tenant decisions, and anything unusual must delete
nothing outside the plan."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from core.base.chroma import VectorStore
from core.base.rules.rows import ChromaRow
from core.base.rules.tenants import TenantConfig
from core.base.runtime.context import TickContext
from core.base.state.graph_db import GraphDB
from core.base.state.tenants import set_tenant_policy
from core.reconcile.rules import reconcile_groups
from core.reconcile.rules.manifests import RepoManifest
from core.reconcile.rules.reconcile_groups import TenantGroup, group_tenants
from core.reconcile.rules.tenant_policy import policy_patch
from core.reconcile.rules.tombstone_bands import Band
from core.reconcile.stores.tenant_manifests import set_tenant_manifest
from tests.jobs.test_reconcile_pass import (
    archived_rows,
    chunk,
    configure,
    ids_in,
    one_pass,
    stores_for,
    tombstoning,
)
from tests.support import seed

#: Tenants (id, current version) and their chunks' stamps: stale, fresh, actionable or not,
#: stamps no rule acts on (a string, a bool, none, a float below), a tenant with no chunk.
FLEET: dict[str, tuple[int, list[Any]]] = {
    "t-a": (3, [1, 1, 2, 3, 3, "1", True, ...]),
    "t-b": (3, [1, 3, 3, 3]),
    "t-c": (5, [1, 2, 3, 4, 5, 0.5]),
    "t-d": (5, [5, 5]),
    "t-e": (2, [1, 1, 1, 2]),
    "t-empty": (4, []),
    "t-f": (3, [1.5, 2.5, 1]),
}
#: A chunk of a tenant with no config node: never touched.
STRAY = chunk("stray-0", "t-unconfigured", 1)


async def seed_fleet(graph: GraphDB, vectors: VectorStore, collection: str) -> None:
    for tenant, (version, stamps) in FLEET.items():
        await configure(graph, tenant, version)
        if stamps:
            await seed(vectors, collection,
                       [chunk(f"{tenant}-{i}", tenant, stamp) for i, stamp in enumerate(stamps)])
    await seed(vectors, collection, [STRAY])


def without_sweep(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(reconcile_groups, "SWEEP_MAX_CHUNKS_PER_TENANT", 0)


@pytest.fixture(params=["sweep", "group reads"])
async def fleet(request: pytest.FixtureRequest, tmp_path: Path, graph: GraphDB,
                vectors: VectorStore, monkeypatch: pytest.MonkeyPatch) -> TickContext:
    """The fleet seeded, tombstoning on, read by one sweep or (sweep off) by group reads."""
    stores = tombstoning(tmp_path, graph, vectors)
    await seed_fleet(graph, vectors, stores.settings.chroma.knowledge_base_collection)
    if request.param == "group reads":
        without_sweep(monkeypatch)
    return stores


async def test_every_read_path_reaches_the_per_tenant_figures(fleet: TickContext) -> None:
    figures = await one_pass(fleet, dry_run=True)
    by_tenant = {t["tenantId"]: (t["scanned"], t["staleCount"], t["actionableCount"])
                 for t in figures["tenants"]}
    assert by_tenant == {
        "t-a": (3, 3, 2), "t-b": (1, 1, 1), "t-c": (5, 5, 4), "t-d": (0, 0, 0),
        "t-e": (3, 3, 0), "t-empty": (0, 0, 0), "t-f": (3, 3, 1),
    }
    assert [t["tenantId"] for t in figures["tenants"]] == sorted(FLEET)


async def test_shared_bands_delete_exactly_the_actionable_chunks_into_each_tenants_archive(
    fleet: TickContext, vectors: VectorStore,
) -> None:
    collection = fleet.settings.chroma.knowledge_base_collection
    before = await ids_in(vectors, collection)
    figures = await one_pass(fleet)
    gone = before - await ids_in(vectors, collection)
    assert gone == {"t-a-0", "t-a-1", "t-b-0", "t-c-0", "t-c-1", "t-c-2", "t-c-5", "t-f-2"}
    assert figures["tombstonedCount"] == len(gone) and figures["failedTenants"] == 0
    archived: dict[str, set[str]] = {}
    for path in figures["archives"]:
        rows = archived_rows(path)
        [tenant] = {r.metadata["tenantId"] for r in rows}
        assert tenant in Path(path).name
        archived.setdefault(tenant, set()).update(r.id for r in rows)
    assert archived == {"t-a": {"t-a-0", "t-a-1"}, "t-b": {"t-b-0"},
                        "t-c": {"t-c-0", "t-c-1", "t-c-2", "t-c-5"}, "t-f": {"t-f-2"}}


async def test_a_row_changed_under_a_shared_band_is_left_out_and_the_rest_of_the_band_goes(
    tmp_path: Path, graph: GraphDB, vectors: VectorStore, capsys: pytest.CaptureFixture[str],
) -> None:
    # Between the shared band's match and its fetch, a writer re-stamps one matched chunk at
    # its tenant's current version: the band's rule refuses it, one more read of the band shows
    # the store no longer matches it, and the band's delete takes the rest (the engine's one
    # failure policy, core.reconcile.deletion).
    stores = tombstoning(tmp_path, graph, vectors)
    collection = stores.settings.chroma.knowledge_base_collection
    await seed_fleet(graph, vectors, collection)
    real_get_page = vectors.get_page
    restamped: list[str] = []

    async def racing_get_page(name: str, **kwargs: Any) -> Any:
        if not restamped and kwargs.get("ids") and "t-a-0" in kwargs["ids"]:
            [row] = await vectors.get_by_ids(name, ["t-a-0"],
                                             include=("metadatas", "documents", "embeddings"))
            await vectors.upsert(name, [ChromaRow(row.id, {**row.metadata,
                                                           "tenantConfigVersion": 3},
                                                  row.document, row.embedding)])
            restamped.append(row.id)
        return await real_get_page(name, **kwargs)

    vectors.get_page = racing_get_page  # type: ignore[method-assign]
    figures = await one_pass(stores)
    assert restamped == ["t-a-0"]
    remaining = await ids_in(vectors, collection)
    assert "t-a-0" in remaining
    assert {"t-a-1", "t-b-0", "t-c-0", "t-c-1", "t-c-2", "t-c-5", "t-f-2"}.isdisjoint(remaining)
    assert figures["failedTenants"] == 0
    events = [json.loads(line)["event"] for line in capsys.readouterr().err.splitlines()
              if line.startswith("{")]
    assert "reconcile.band_rows_changed" in events
    assert "reconcile.band_refused" not in events


async def test_a_failing_group_read_falls_back_to_one_read_per_tenant(
    tmp_path: Path, graph: GraphDB, vectors: VectorStore, monkeypatch: pytest.MonkeyPatch,
) -> None:
    stores = stores_for(tmp_path, graph, vectors)
    await seed_fleet(graph, vectors, stores.settings.chroma.knowledge_base_collection)
    without_sweep(monkeypatch)
    real = vectors._call_on_collection

    def no_in_lists(name: str, method: str, kwargs: Any) -> Any:
        if "$in" in json.dumps(kwargs.get("where")):
            raise ConnectionError("injected: the store refuses $in")
        return real(name, method, kwargs)

    monkeypatch.setattr(vectors, "_call_on_collection", no_in_lists)
    figures = await one_pass(stores, dry_run=True)
    assert figures["failedTenants"] == 0
    assert figures["staleCount"] == 3 + 1 + 5 + 3 + 3


def test_groups_share_a_version_keep_order_and_respect_the_list_limit() -> None:
    tenants = [TenantConfig(f"t{i}", 2 if i % 3 else 1, None) for i in range(7)]
    tenants += [TenantConfig("bad", 0, None), TenantConfig("t1", 2, None)]
    groups = group_tenants(tenants, per_where=2)
    assert groups == [
        TenantGroup(1, (tenants[0], tenants[3])), TenantGroup(1, (tenants[6],)),
        TenantGroup(2, (tenants[1], tenants[2])), TenantGroup(2, (tenants[4], tenants[5])),
    ]


async def test_chroma_takes_a_full_groups_tenant_list_in_every_request_a_group_makes(
    vectors: VectorStore,
) -> None:
    # A group lists TENANTS_PER_WHERE tenants in one `$in`; the store must take that list in
    # the candidate scan, the band's ids read and the band's delete alike.
    collection = "kb-wide-in"
    await seed(vectors, collection, [chunk(f"c{i}", f"t{i}", 1) for i in range(3)])
    listed = [f"t{i}" for i in range(1, reconcile_groups.TENANTS_PER_WHERE + 1)]
    group = TenantGroup(3, tuple(TenantConfig(t, 3, None) for t in listed))
    scanned = [r.id async for page in vectors.scan(
        collection, where=reconcile_groups.group_candidate_where(group), include=()) for r in page]
    assert sorted(scanned) == ["c1", "c2"]
    band = reconcile_groups.group_band_where(listed, 1, Band(None, 1, 2))
    assert sorted(await vectors.ids_where(collection, where=band)) == ["c1", "c2"]
    assert await vectors.delete_where(collection, where=band) == 2
    assert await ids_in(vectors, collection) == {"c0"}


async def test_tenants_with_a_manifest_or_a_policy_of_their_own_go_per_tenant_beside_groups(
    fleet: TickContext, graph: GraphDB, vectors: VectorStore,
) -> None:
    # Beside the grouped tenants: t-a's own gap of 1 (its stamp-2 chunk goes too), t-c's
    # autoTombstone off (nothing of it goes), t-e's manifest claiming one of its four paths
    # (the other three are orphans; none is actionable by version). A group would read only
    # candidates and share one gap: each must be judged as on its own.
    await set_tenant_policy(graph, "t-a", policy_patch(gap=1, grace_ms=None,
                                                       auto_tombstone=None))
    await set_tenant_policy(graph, "t-c", policy_patch(gap=None, grace_ms=None,
                                                       auto_tombstone="off"))
    await set_tenant_manifest(graph, "t-e", RepoManifest("t-e/repo", ("docs/t-e-3.md",), 1_000))
    collection = fleet.settings.chroma.knowledge_base_collection
    before = await ids_in(vectors, collection)
    figures = await one_pass(fleet)
    gone = before - await ids_in(vectors, collection)
    assert gone == {"t-a-0", "t-a-1", "t-a-2", "t-b-0", "t-e-0", "t-e-1", "t-e-2", "t-f-2"}
    assert figures["failedTenants"] == 0 and figures["tombstonedCount"] == len(gone)
    by_tenant = {t["tenantId"]: t for t in figures["tenants"]}
    assert by_tenant["t-c"]["actionableCount"] == 4 and by_tenant["t-c"]["tombstonedCount"] == 0
    assert (by_tenant["t-e"]["manifestOrphanCount"], by_tenant["t-e"]["scanned"]) == (3, 4)
    assert [t["tenantId"] for t in figures["tenants"]] == sorted(FLEET)
