"""A restore stays restored (CONTRACT "Tombstones"): the chunks a restore put back are held in
the state from before they are written again, and the one deletion engine re-reads the holds
right before each delete, so neither a pass nor a retention run deletes them while the hold
is in force. Real SQLite (and PostgreSQL), real embedded Chroma, archives written by passes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from core.base.chroma import VectorStore
from core.base.io.clock import now_ms
from core.base.rules.tenants import TENANT_CONFIG_LABEL
from core.base.runtime.context import TickContext
from core.base.state.graph import upsert_node
from core.base.state.graph_db import GraphDB
from core.reconcile.archives.restore import restore_archive
from core.reconcile.deletion import DeletionPlan, TenantRule, TombstoneProgress, run_bands
from core.reconcile.deletion_inputs import DeletionTarget
from core.reconcile.retention import retention_tick
from core.reconcile.rules.manifests import RepoManifest
from core.reconcile.rules.restore_holds import tenant_evidence
from core.reconcile.rules.tombstone_bands import id_bands
from core.reconcile.run_pass import reconcile_tick
from core.reconcile.stores.restore_holds import RestoreHolds, RestoreHoldWriter, tenant_holds
from core.reconcile.stores.tenant_manifests import set_tenant_manifest
from core.suite.tick import run_tick
from tests.jobs.test_restore import store_refused_archive
from tests.support import make_settings, read_archived_chunks, seed

pytestmark = pytest.mark.both_backends

KB = "neo-knowledge-base"
IDS = [f"c{i}" for i in range(6)]


def chunk(row_id: str, stamp: int = 1, ingested: int = 1_000) -> tuple[str, dict[str, Any]]:
    return row_id, {"tenantId": "acme", "repoSlug": "acme/repo", "sourcePath": "a.md",
                    "tenantConfigVersion": stamp, "ingestedAt": ingested}


async def configure(graph: GraphDB, version: int) -> None:
    await upsert_node(graph, "kb-config:acme", TENANT_CONFIG_LABEL,
                      {"version": version, "repoSlug": "acme/repo"})


def tombstoning(tmp_path: Path, settings: Any, graph: GraphDB, vectors: VectorStore,
                **keys: Any) -> TickContext:
    state = {"stateUrl": settings.state.url} if settings.state.url else {}
    return TickContext(make_settings(tmp_path, reconciliationEnabled=True,
                                     reconciliationAutoTombstone=True,
                                     reconciliationMaxStaleFraction=1.0, **state, **keys),
                       graph, vectors)


async def tombstoned_then_restored(context: TickContext) -> Path:
    """A pass tombstones the tenant's stale chunks; the archive is restored with its holds."""
    figures = (await run_tick("reconcile", context, reconcile_tick, dry_run=False)).json()
    [archive] = figures["archives"]
    assert await live_ids(context.vectors) == set()
    result = await restore_archive(context.vectors, Path(archive), collection=KB,
                                   hold=RestoreHoldWriter(context.graph, Path(archive).name))
    assert result.restored == len(IDS)
    return Path(archive)


async def live_ids(vectors: VectorStore) -> set[str]:
    return {r.id for r in await vectors.get_by_ids(KB, IDS, include=())}


async def test_a_restore_commits_its_holds_before_it_writes_the_chunks_back(
    tmp_path: Path, settings: Any, graph: GraphDB, vectors: VectorStore
) -> None:
    context = tombstoning(tmp_path, settings, graph, vectors)
    await configure(graph, 4)
    await seed(vectors, KB, [chunk(i) for i in IDS])
    figures = (await run_tick("reconcile", context, reconcile_tick, dry_run=False)).json()
    [archive] = figures["archives"]
    seen: list[tuple[int, set[str]]] = []

    class Watched(RestoreHoldWriter):
        async def hold(self, tenant_id: str, ids: Any) -> None:
            await super().hold(tenant_id, ids)
            # Committed (a fresh read sees it) while none of its chunks exists yet.
            seen.append((len(await tenant_holds(graph, tenant_id)),
                         {r.id for r in await vectors.get_by_ids(KB, list(ids), include=())}))

    await restore_archive(vectors, Path(archive), collection=KB,
                          hold=Watched(graph, Path(archive).name))
    assert seen == [(len(IDS), set())]
    assert await live_ids(vectors) == set(IDS)


async def test_a_band_read_after_the_restore_withdraws_the_held_ids_and_deletes_nothing(
    tmp_path: Path, settings: Any, graph: GraphDB, vectors: VectorStore
) -> None:
    context = tombstoning(tmp_path, settings, graph, vectors)
    await configure(graph, 4)
    await seed(vectors, KB, [chunk(i) for i in IDS])
    await tombstoned_then_restored(context)
    await seed(vectors, KB, [chunk("other")])  # stale too, and not restored: it goes

    # A band planned from a read after the restore names the restored ids: the engine finds
    # their holds right before its delete.
    target = DeletionTarget(vectors, KB, context.settings.tombstones_dir, "race",
                            holds=RestoreHolds(graph))
    plan = DeletionPlan(
        "stale", ({"tenantId": "acme"}, {"tenantConfigVersion": {"$lte": 2}}),
        {"acme": TenantRule(lambda _m: True, now_ms(), tenant_evidence(4, {}))},
        id_bands([(1_000, i) for i in [*IDS, "other"]], band_rows=100))
    progress = {"acme": TombstoneProgress()}
    await run_bands(target, plan, cap=100, progress=progress, control=context.control)

    assert await live_ids(vectors) == set(IDS)
    assert await vectors.get_by_ids(KB, ["other"], include=()) == []
    done = progress["acme"]
    assert (done.tombstoned, done.archived, done.withdrawn) == (1, 1, len(IDS))
    assert done.archive is not None
    # The archive claims only what went: restoring it puts back "other" alone, and skips
    # the withdrawn lines of the held ones (not counted as kept live).
    again = await restore_archive(vectors, done.archive.path, collection=KB)
    assert (again.restored, again.withdrawn) == (1, len(IDS))


async def test_a_pass_after_the_restore_deletes_nothing_restored_until_the_version_is_raised(
    tmp_path: Path, settings: Any, graph: GraphDB, vectors: VectorStore
) -> None:
    context = tombstoning(tmp_path, settings, graph, vectors)
    await configure(graph, 4)
    await seed(vectors, KB, [chunk(i) for i in IDS])
    await tombstoned_then_restored(context)

    figures = (await run_tick("reconcile", context, reconcile_tick, dry_run=False)).json()
    assert figures["tombstonedCount"] == 0 and figures["archives"] == []
    [tenant] = figures["tenants"]
    assert (tenant["actionableCount"], tenant["restoreHeldCount"]) == (len(IDS), len(IDS))
    assert await live_ids(vectors) == set(IDS)

    await configure(graph, 5)  # the evidence changed after the restore: the hold lapses
    figures = (await run_tick("reconcile", context, reconcile_tick, dry_run=False)).json()
    assert figures["tombstonedCount"] == len(IDS)
    assert await live_ids(vectors) == set()
    assert await tenant_holds(graph, "acme") == []  # the lapsed holds are gone


async def test_retention_deletes_no_held_chunk(
    tmp_path: Path, settings: Any, graph: GraphDB, vectors: VectorStore
) -> None:
    context = tombstoning(tmp_path, settings, graph, vectors, gcEnabled=True,
                          gcAutoDelete=True, gcRetention={"maxCount": 1})
    await configure(graph, 4)
    await seed(vectors, KB, [chunk(i) for i in IDS])
    archive = await tombstoned_then_restored(context)
    await seed(vectors, KB, [chunk(f"new{i}", stamp=4, ingested=2_000 + i) for i in range(3)])

    figures = (await run_tick("gc", context, retention_tick, dry_run=False)).json()

    assert await live_ids(vectors) == set(IDS)  # expired (beyond the newest 1), but held
    assert {r.id for r in await vectors.get_by_ids(KB, ["new0", "new1", "new2"],
                                                    include=())} == {"new2"}
    assert figures["deletedCount"] == 2
    gc_archives = [p for p in context.settings.tombstones_dir.iterdir() if p != archive]
    archived = {c.row.id for p in gc_archives for _, c in read_archived_chunks(p)}
    assert archived >= {"new0", "new1"}


async def test_a_manifest_replaced_after_the_restore_lapses_the_hold(
    tmp_path: Path, settings: Any, graph: GraphDB, vectors: VectorStore
) -> None:
    context = tombstoning(tmp_path, settings, graph, vectors, reconciliationManifestGraceMs=0)
    await configure(graph, 4)
    await set_tenant_manifest(graph, "acme", RepoManifest("acme/repo", ("b.md",), 5_000))
    await seed(vectors, KB, [chunk(i, stamp=4) for i in IDS])  # orphans of that manifest
    await seed(vectors, KB, [("keep", {**chunk("keep", stamp=4)[1], "sourcePath": "b.md"})])
    await tombstoned_then_restored(context)

    figures = (await run_tick("reconcile", context, reconcile_tick, dry_run=False)).json()
    assert figures["tombstonedCount"] == 0
    assert await live_ids(vectors) == set(IDS)

    # The same claim set again after the restore: a new manifest, the hold lapses.
    await set_tenant_manifest(graph, "acme", RepoManifest("acme/repo", ("b.md",), now_ms()))
    figures = (await run_tick("reconcile", context, reconcile_tick, dry_run=False)).json()
    assert figures["tombstonedCount"] == len(IDS)
    assert await live_ids(vectors) == set()


async def test_a_line_the_store_refuses_is_not_held(
    tmp_path: Path, settings: Any, graph: GraphDB, vectors: VectorStore
) -> None:
    await seed(vectors, KB, [chunk("a-live")])  # the collection holds 4-number embeddings
    archive = store_refused_archive(tmp_path / "refused.jsonl")
    writer = RestoreHoldWriter(graph, archive.name)
    result = await restore_archive(vectors, archive, collection=KB, hold=writer)
    assert (result.restored, len(result.refused), result.held_count) == (2, 2, 2)
    assert [h.chunk_id for h in await tenant_holds(graph, "acme")] == ["a-good1", "a-good2"]
