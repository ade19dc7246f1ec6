"""Manifest drift in a real pass (real SQLite, embedded Chroma): what is flagged and deleted,
what never is (a chunk re-ingested after the manifest, one re-ingested between the band's read
and its delete), the guards on the union, the grace and the per-tenant policy, telemetry for a
tenant with only missing paths, and `explain`'s plan against the pass's own figures."""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from core.base.chroma import VectorStore
from core.base.door.chroma_door import DELETE_UNCHANGED
from core.base.rules.camel_json import to_json
from core.base.rules.tenants import TENANT_CONFIG_LABEL
from core.base.runtime.context import TickContext
from core.base.state.graph import upsert_node
from core.base.state.graph_db import GraphDB
from core.base.state.tenants import set_tenant_policy
from core.reconcile.explain_tenant import explain_tenant
from core.reconcile.rules.manifests import RepoManifest
from core.reconcile.rules.reconcile import GUARD_STALE_FRACTION
from core.reconcile.rules.tenant_policy import policy_patch
from core.reconcile.run_pass import reconcile_tick
from core.reconcile.stores.tenant_manifests import set_tenant_manifest
from core.suite.tick import run_tick
from tests.support import DIM, make_settings, read_archived_chunks, seed

KB = "neo-knowledge-base"
NOW = int(time.time() * 1000)  # the pass reads the real clock: no chunk after it is deleted
MANIFEST_AT = NOW - 3_600_000  # an hour old


def chunk(row_id: str, path: str, *, stamp: Any = 3, ingested: Any = MANIFEST_AT - 1_000,
          repo: str = "r", tenant: str = "acme") -> tuple[str, dict[str, Any]]:
    metadata: dict[str, Any] = {"tenantId": tenant, "repoSlug": repo, "sourcePath": path,
                                "tenantConfigVersion": stamp}
    if ingested is not ...:
        metadata["ingestedAt"] = ingested
    return row_id, metadata


async def tenant(graph: GraphDB, paths: tuple[str, ...] = ("keep.md", "new.md"), *,
                 version: int = 3, updated_at: int = MANIFEST_AT, repo: str = "r") -> None:
    """Tenant `acme` at `version` with a manifest of `paths` for repo `r`."""
    await upsert_node(graph, "kb-config:acme", TENANT_CONFIG_LABEL,
                      {"version": version, "repoSlug": repo})
    await set_tenant_manifest(graph, "acme", RepoManifest(repo, paths, updated_at))


def context(tmp_path: Path, graph: GraphDB, vectors: VectorStore, **toml: Any) -> TickContext:
    settings = make_settings(tmp_path, reconciliationEnabled=True,
                             **{"reconciliationAutoTombstone": True,
                                "reconciliationMaxStaleFraction": 1.0,
                                "reconciliationManifestGraceMs": 0, **toml})
    return TickContext(settings, graph, vectors)


async def one_pass(stores: TickContext, *, dry_run: bool = False) -> dict[str, Any]:
    return (await run_tick("reconcile", stores, reconcile_tick, dry_run=dry_run)).json()


async def ids_left(vectors: VectorStore) -> set[str]:
    return {r.id for page in [p async for p in vectors.scan(KB, include=())] for r in page}


def acme(figures: Mapping[str, Any]) -> dict[str, Any]:
    return next(t for t in figures["tenants"] if t["tenantId"] == "acme")


async def reconcile_details(graph: GraphDB) -> list[tuple[int, dict[str, Any]]]:
    import json

    rows = await graph.query("SELECT chunks_total, detail FROM kb_ingestion_metrics "
                             "WHERE event_type = 'reconcile' ORDER BY timestamp, rowid")
    return [(r[0], json.loads(r[1])) for r in rows]


MIXED = [chunk("keep#0", "keep.md"), chunk("gone#0", "gone.md"), chunk("gone#1", "gone.md"),
         chunk("stale#0", "keep.md", stamp=1), chunk("both#0", "old.md", stamp=1),
         chunk("late#0", "later.md", ingested=MANIFEST_AT + 1),  # after the manifest
         chunk("nopath#0", "", stamp=3), chunk("notime#0", "gone.md", ingested=...)]


async def test_a_pass_deletes_exactly_the_orphans_and_actionable_stale_chunks_each_once(
    tmp_path: Path, graph: GraphDB, vectors: VectorStore
) -> None:
    await tenant(graph)
    await seed(vectors, KB, MIXED)
    figures = await one_pass(context(tmp_path, graph, vectors))
    assert {k: acme(figures)[k] for k in ("staleCount", "manifestOrphanCount",
            "totalOrphanCount", "missingPathCount", "actionableCount", "tombstonedCount")} == {
        "staleCount": 2, "manifestOrphanCount": 3, "totalOrphanCount": 4,
        "missingPathCount": 1, "actionableCount": 4, "tombstonedCount": 4}
    assert await ids_left(vectors) == {"keep#0", "late#0", "nopath#0", "notime#0"}
    [(total, detail)] = await reconcile_details(graph)
    assert total == 4  # chunks_total is the union: both#0 counts once
    assert (detail["manifestOrphanCount"], detail["totalOrphanCount"],
            detail["missingPathCount"], detail["missingPathsByRepo"]) == (3, 4, 1, {"r": 1})
    archived = {c.row.id for a in figures["archives"] for _, c in read_archived_chunks(Path(a))}
    assert archived == {"gone#0", "gone#1", "stale#0", "both#0"}


async def test_a_tenant_with_only_missing_paths_still_gets_a_row_and_nothing_is_deleted(
    tmp_path: Path, graph: GraphDB, vectors: VectorStore
) -> None:
    await tenant(graph, ("keep.md", "never-ingested.md", "also-missing.md"))
    await seed(vectors, KB, [chunk("keep#0", "keep.md")])
    figures = await one_pass(context(tmp_path, graph, vectors))
    assert (acme(figures)["totalOrphanCount"], acme(figures)["missingPathCount"]) == (0, 2)
    [(total, detail)] = await reconcile_details(graph)
    assert (total, detail["missingPathCount"], detail["tombstonedCount"]) == (0, 2, 0)
    assert await ids_left(vectors) == {"keep#0"}


async def test_a_chunk_re_ingested_between_the_read_and_the_delete_is_never_deleted(
    tmp_path: Path, graph: GraphDB, vectors: VectorStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The writer re-ingests gone#1 (same path, a new ingestedAt) right before the delete
    # request: the band's `ingestedAt <= updatedAt` and its range no longer match it.
    await tenant(graph)
    await seed(vectors, KB, [chunk("gone#0", "gone.md"), chunk("gone#1", "gone.md"),
                             chunk("keep#0", "keep.md")])
    real = vectors._call_on_collection
    fresh = dict(chunk("gone#1", "gone.md", ingested=NOW - 5)[1])

    def wrapped(name: str, method: str, kwargs: Mapping[str, Any]) -> Any:
        if name == KB and method == DELETE_UNCHANGED:
            real(name, "upsert", {"ids": ["gone#1"], "metadatas": [fresh],
                                  "documents": ["rewritten"], "embeddings": [[0.5] * DIM]})
        return real(name, method, kwargs)

    monkeypatch.setattr(vectors, "_call_on_collection", wrapped)
    figures = await one_pass(context(tmp_path, graph, vectors))
    assert acme(figures)["tombstonedCount"] == 1
    [kept] = await vectors.get_by_ids(KB, ["gone#1"], include=("metadatas", "documents"))
    assert (kept.document, kept.metadata["ingestedAt"]) == ("rewritten", NOW - 5)
    assert await ids_left(vectors) == {"gone#1", "keep#0"}


@pytest.mark.parametrize(("fraction", "guarded", "deleted"), [(0.7, True, 0), (0.8, False, 3)])
async def test_the_stale_fraction_guard_judges_the_union_counting_each_chunk_once(
    tmp_path: Path, graph: GraphDB, vectors: VectorStore, fraction: float, guarded: bool,
    deleted: int,
) -> None:
    # 4 chunks: stale only, orphan only, both, clean. The union is 3/4 = 0.75; counted twice
    # (stale 2 + orphans 2) it would be 4/4 and the guard would hold at 0.8 too.
    await tenant(graph)
    await seed(vectors, KB, [chunk("stale", "keep.md", stamp=1), chunk("orphan", "gone.md"),
                             chunk("both", "gone.md", stamp=1), chunk("clean", "keep.md")])
    figures = await one_pass(context(tmp_path, graph, vectors,
                                     reconciliationMaxStaleFraction=fraction))
    assert (acme(figures)["guard"] == GUARD_STALE_FRACTION) is guarded
    assert acme(figures)["tombstonedCount"] == deleted


async def test_the_delete_cap_counts_stale_and_orphaned_deletions_together(
    tmp_path: Path, graph: GraphDB, vectors: VectorStore
) -> None:
    await tenant(graph)
    await seed(vectors, KB, [chunk("stale", "keep.md", stamp=1), chunk("o1", "gone.md"),
                             chunk("o2", "gone2.md"), chunk("clean", "keep.md")])
    figures = await one_pass(context(tmp_path, graph, vectors,
                                     reconciliationMaxDeletesPerTick=2))
    assert acme(figures)["tombstonedCount"] == 2
    assert len(await ids_left(vectors)) == 2


async def test_a_young_manifests_orphans_wait_for_its_grace(
    tmp_path: Path, graph: GraphDB, vectors: VectorStore
) -> None:
    await tenant(graph, updated_at=NOW)  # just recorded
    await seed(vectors, KB, [chunk("o1", "gone.md")])
    stores = context(tmp_path, graph, vectors, reconciliationManifestGraceMs=86_400_000)
    figures = await one_pass(stores)
    assert (acme(figures)["manifestOrphanCount"], acme(figures)["actionableCount"],
            acme(figures)["tombstonedCount"]) == (1, 0, 0)


async def test_a_tenant_policy_overrides_the_grace_and_off_exempts_it_from_tombstoning(
    tmp_path: Path, graph: GraphDB, vectors: VectorStore
) -> None:
    await tenant(graph)
    await seed(vectors, KB, [chunk("o1", "gone.md"), chunk("keep", "keep.md")])
    stores = context(tmp_path, graph, vectors, reconciliationManifestGraceMs=86_400_000)
    await set_tenant_policy(graph, "acme", policy_patch(gap=None, grace_ms=0,
                                                        auto_tombstone="off"))
    figures = await one_pass(stores)
    assert (acme(figures)["actionableCount"], acme(figures)["tombstonedCount"]) == (1, 0)
    await set_tenant_policy(graph, "acme", policy_patch(gap=None, grace_ms=None,
                                                        auto_tombstone="inherit"))
    figures = await one_pass(stores)
    assert acme(figures)["tombstonedCount"] == 1


async def test_an_invalid_stored_gap_stops_deletion_by_version_but_not_by_manifest(
    tmp_path: Path, graph: GraphDB, vectors: VectorStore
) -> None:
    # Another program wrote a gap of "1": falling back to the global 2 could loosen what the
    # tenant meant; the pass acts on nothing by version and says why.
    await tenant(graph, version=5)
    await upsert_node(graph, "kb-config:acme", TENANT_CONFIG_LABEL,
                      {"reconciliationPolicy": {"orphanVersionGap": "1"}})
    await seed(vectors, KB, [chunk("stale", "keep.md", stamp=1), chunk("o1", "gone.md",
                                                                         stamp=5)])
    figures = await one_pass(context(tmp_path, graph, vectors))
    assert (acme(figures)["staleCount"], acme(figures)["tombstonedCount"]) == (1, 1)
    assert await ids_left(vectors) == {"stale"}
    [(_, detail)] = await reconcile_details(graph)
    assert detail["invalidPolicy"] == ["orphanVersionGap"]
    assert detail["orphanVersionGap"] is None


async def test_an_invalid_global_gap_stops_deletion_by_version_in_a_real_pass(
    tmp_path: Path, graph: GraphDB, vectors: VectorStore
) -> None:
    from core.base.config.config import resolve_config

    await tenant(graph, version=5)
    await seed(vectors, KB, [chunk("stale", "keep.md", stamp=1), chunk("o1", "gone.md",
                                                                         stamp=5)])
    loaded = resolve_config({"knowledgeBase": {
        "dataDir": str(tmp_path / "data"), "reconciliationEnabled": True,
        "reconciliationAutoTombstone": True, "reconciliationMaxStaleFraction": 1.0,
        "reconciliationManifestGraceMs": 0, "reconciliationOrphanVersionGap": 0}},
        base_dir=tmp_path)
    figures = await one_pass(TickContext(loaded.settings, graph, vectors))
    assert acme(figures)["tombstonedCount"] == 1
    assert await ids_left(vectors) == {"stale"}


async def test_explain_has_the_numbers_of_a_real_pass_and_changes_nothing(
    tmp_path: Path, graph: GraphDB, vectors: VectorStore
) -> None:
    await tenant(graph)
    await seed(vectors, KB, MIXED)
    stores = context(tmp_path, graph, vectors)
    plan = to_json(await explain_tenant(stores, "acme"))
    assert await ids_left(vectors) == {i for i, _ in MIXED}
    figures = await one_pass(stores)
    planned = dict(plan["figures"])
    assert planned.pop("tombstonedCount") == 0
    done = dict(acme(figures))
    assert done.pop("tombstonedCount") == plan["guards"]["wouldDelete"] == 4
    assert planned == done
    assert sorted(c["id"] for c in plan["chunks"]) == sorted(
        ["gone#0", "gone#1", "stale#0", "both#0"])
    both = next(c for c in plan["chunks"] if c["id"] == "both#0")
    assert both["reasons"] == ["config-stale", "manifest-orphan"] and both["actionable"]
    assert plan["manifests"][0]["missingPaths"] == ["new.md"]


async def test_explain_names_the_guard_that_would_hold_the_pass_while_tombstoning_is_off(
    tmp_path: Path, graph: GraphDB, vectors: VectorStore
) -> None:
    await tenant(graph)
    # Stale by version (a manifest orphaning 2 of its repo's 3 chunks would be held by the
    # manifest-mismatch guard first: see test_manifest_cli).
    await seed(vectors, KB, [chunk("o1", "keep.md", stamp=1), chunk("o2", "new.md", stamp=1),
                             chunk("keep", "keep.md")])
    stores = context(tmp_path, graph, vectors, reconciliationAutoTombstone=False,
                     reconciliationMaxStaleFraction=0.5)
    plan = to_json(await explain_tenant(stores, "acme"))
    assert plan["guards"]["guard"] == GUARD_STALE_FRACTION
    assert (plan["guards"]["actionableCount"], plan["guards"]["totalChunks"]) == (2, 3)
    assert plan["guards"]["wouldDelete"] == 0
    assert "reconciliationAutoTombstone is false" in plan["guards"]["whyNot"]


