"""The reconciliation pass on real SQLite and embedded Chroma: what is reported, what is
deleted (and what never is), the guards, archives, paging, and dry runs. Restore has its own
file (test_restore.py), and so do deletes racing writers (test_tombstone_safety.py)."""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest
import structlog

from core.base.chroma import Include, VectorStore
from core.base.config.config import Settings
from core.base.door.chroma_door import DELETE_UNCHANGED
from core.base.rules.rows import ChromaRow
from core.base.rules.telemetry import EVENT_RECONCILE
from core.base.rules.tenants import TENANT_CONFIG_LABEL
from core.base.runtime.context import TickContext, TickControl
from core.base.state.graph import upsert_node
from core.base.state.graph_db import GraphDB
from core.reconcile.rules import reconcile_groups
from core.reconcile.rules.reconcile import GUARD_STALE_FRACTION
from core.reconcile.run_pass import reconcile_tick
from core.suite.tick import open_context, run_tick
from tests.support import count_rows, make_settings, read_archived_chunks, seed

FULL: tuple[Include, ...] = ("metadatas", "documents", "embeddings")


def chunk(row_id: str, tenant: str, stamp: Any = ...) -> tuple[str, dict[str, Any]]:
    """A knowledge-base chunk row as other programs write it; `...` leaves the stamp out."""
    metadata: dict[str, Any] = {"tenantId": tenant, "repoSlug": f"{tenant}/repo",
                                "sourcePath": f"docs/{row_id}.md", "ingestedAt": 1}
    if stamp is not ...:
        metadata["tenantConfigVersion"] = stamp
    return row_id, metadata


async def configure(graph: GraphDB, tenant: str, version: int) -> None:
    """Give a tenant a config node at `version` (as the platform would have left it)."""
    await upsert_node(graph, f"kb-config:{tenant}", TENANT_CONFIG_LABEL,
                            {"version": version, "repoSlug": f"{tenant}/repo"})


def stores_for(tmp_path: Path, graph: GraphDB, vectors: VectorStore, **toml: Any) -> TickContext:
    """A tick context on the fixtures' files with `[knowledgeBase]` overrides
    (reconciliation on)."""
    settings = make_settings(tmp_path, reconciliationEnabled=True, **toml)
    return TickContext(settings, graph, vectors)


def tombstoning(tmp_path: Path, graph: GraphDB, vectors: VectorStore, **toml: Any) -> TickContext:
    """A tick context with auto-tombstone on and the stale-fraction guard out of the way (unless the
    test sets it), for tests about what gets deleted."""
    return stores_for(tmp_path, graph, vectors, reconciliationAutoTombstone=True,
                      **{"reconciliationMaxStaleFraction": 1.0, **toml})


async def one_pass(stores: TickContext, *, dry_run: bool = False) -> dict[str, Any]:
    """One pass through the same path as `--tick`."""
    return (await run_tick("reconcile", stores, reconcile_tick, dry_run=dry_run)).json()


async def ids_in(vectors: VectorStore, collection: str) -> set[str]:
    return {r.id for page in [p async for p in vectors.scan(collection, include=())]
            for r in page}


async def reconcile_rows(graph: GraphDB) -> list[dict[str, Any]]:
    rows = await graph.query(
        "SELECT tenant_id, event_type, chunks_total, chunks_deleted, error_code, detail "
        "FROM kb_ingestion_metrics ORDER BY tenant_id, timestamp, rowid"
    )
    return [{"tenant": r[0], "event": r[1], "total": r[2], "deleted": r[3], "error": r[4],
             "detail": json.loads(r[5]) if r[5] else None} for r in rows]


def tenant_figures(figures: Mapping[str, Any], tenant: str) -> dict[str, Any]:
    [entry] = [t for t in figures["tenants"] if t["tenantId"] == tenant]
    return dict(entry)


def archived_rows(path: str) -> list[ChromaRow]:
    return [chunk.row for _header, chunk in read_archived_chunks(Path(path))]


# -- reporting --------------------------------------------------------------------------------


async def test_a_clean_tenant_writes_no_telemetry_row(
    tmp_path: Path, graph: GraphDB, vectors: VectorStore
) -> None:
    stores = stores_for(tmp_path, graph, vectors)
    await configure(graph, "acme", 3)
    await seed(vectors, stores.settings.chroma.knowledge_base_collection,
               [chunk("a", "acme", 3), chunk("b", "acme"), chunk("c", "acme", "1")])
    figures = await one_pass(stores)
    assert tenant_figures(figures, "acme") == {
        "tenantId": "acme", "repoSlug": "acme/repo", "currentVersion": 3, "scanned": 0,
        "staleCount": 0, "manifestOrphanCount": 0, "totalOrphanCount": 0,
        "missingPathCount": 0, "actionableCount": 0, "heldCount": 0, "tombstonedCount": 0,
        "guard": None, "malformedCount": 0,
    }
    assert await count_rows(graph, "kb_ingestion_metrics") == 0


async def test_with_auto_tombstone_off_nothing_goes_and_one_row_records_the_drift(
    tmp_path: Path, graph: GraphDB, vectors: VectorStore
) -> None:
    stores = stores_for(tmp_path, graph, vectors)
    collection = stores.settings.chroma.knowledge_base_collection
    await configure(graph, "acme", 5)
    await seed(vectors, collection, [chunk(i, "acme", s) for i, s in zip("abcd", (5, 4, 3, 1),
                                                                        strict=True)])
    figures = await one_pass(stores)
    assert await ids_in(vectors, collection) == set("abcd")
    assert figures["autoTombstone"] is False
    assert [(r["event"], r["total"], r["deleted"]) for r in await reconcile_rows(graph)] == [
        (EVENT_RECONCILE, 3, 0)
    ]
    [row] = await reconcile_rows(graph)
    assert row["detail"]["staleCount"] == 3
    assert row["detail"]["actionableCount"] == 2
    assert row["detail"]["tombstonedCount"] == 0
    assert row["detail"]["currentVersion"] == 5
    assert row["detail"]["autoTombstone"] is False
    assert not stores.settings.tombstones_dir.exists()


# -- tombstoning ------------------------------------------------------------------------------


async def test_with_auto_tombstone_on_exactly_the_actionable_chunks_go(
    tmp_path: Path, graph: GraphDB, vectors: VectorStore
) -> None:
    stores = tombstoning(tmp_path, graph, vectors)
    collection = stores.settings.chroma.knowledge_base_collection
    await configure(graph, "acme", 5)
    await seed(vectors, collection, [
        chunk("a", "acme", 5), chunk("b", "acme", 4), chunk("c", "acme", 3),
        chunk("d", "acme", 1), chunk("e", "acme"), chunk("f", "acme", "1"),
        chunk("g", "acme", True), chunk("h", "acme", 2.5),
        chunk("x", "unconfigured", 1), chunk("y", "@acme-lookalike", 1),
    ])
    figures = await one_pass(stores)
    assert await ids_in(vectors, collection) == {"a", "b", "e", "f", "g", "x", "y"}
    assert tenant_figures(figures, "acme")["tombstonedCount"] == 3
    [row] = await reconcile_rows(graph)
    assert (row["total"], row["deleted"]) == (4, 3)
    [archive] = figures["archives"]
    assert Path(archive).parent == stores.settings.tombstones_dir
    assert sorted(r.id for r in archived_rows(archive)) == ["c", "d", "h"]


async def test_orphans_within_the_grace_gap_are_reported_but_never_deleted(
    tmp_path: Path, graph: GraphDB, vectors: VectorStore
) -> None:
    stores = stores_for(tmp_path, graph, vectors, reconciliationAutoTombstone=True)
    collection = stores.settings.chroma.knowledge_base_collection
    await configure(graph, "acme", 7)
    await seed(vectors, collection, [chunk(f"c{i}", "acme", 6) for i in range(5)]
               + [chunk(f"n{i}", "acme", 7) for i in range(5)])
    figures = await one_pass(stores)
    assert len(await ids_in(vectors, collection)) == 10
    assert tenant_figures(figures, "acme")["staleCount"] == 5
    assert [(r["total"], r["deleted"]) for r in await reconcile_rows(graph)] == [(5, 0)]
    assert figures["archives"] == []


async def test_two_tenants_with_the_same_stamps_are_judged_by_their_own_versions(
    tmp_path: Path, graph: GraphDB, vectors: VectorStore
) -> None:
    stores = tombstoning(tmp_path, graph, vectors)
    collection = stores.settings.chroma.knowledge_base_collection
    await configure(graph, "ahead", 5)
    await configure(graph, "behind", 3)
    await seed(vectors, collection, [chunk(f"{t}-{s}", t, s) for t in ("ahead", "behind")
                                     for s in range(1, 6)])
    figures = await one_pass(stores)
    assert (tenant_figures(figures, "ahead")["staleCount"],
            tenant_figures(figures, "ahead")["tombstonedCount"]) == (4, 3)
    assert (tenant_figures(figures, "behind")["staleCount"],
            tenant_figures(figures, "behind")["tombstonedCount"]) == (2, 1)
    assert await ids_in(vectors, collection) == {
        "ahead-4", "ahead-5", "behind-2", "behind-3", "behind-4", "behind-5"
    }


async def test_the_cap_bounds_each_pass_and_later_passes_continue(
    tmp_path: Path, graph: GraphDB, vectors: VectorStore
) -> None:
    stores = stores_for(tmp_path, graph, vectors, reconciliationAutoTombstone=True,
                        reconciliationMaxDeletesPerTick=3)
    collection = stores.settings.chroma.knowledge_base_collection
    await configure(graph, "acme", 4)
    await seed(vectors, collection, [chunk(f"old{i}", "acme", 1) for i in range(7)]
               + [chunk(f"new{i}", "acme", 4) for i in range(13)])
    passes = [tenant_figures(await one_pass(stores), "acme")["tombstonedCount"]
              for _ in range(4)]
    assert passes == [3, 3, 1, 0]
    assert await ids_in(vectors, collection) == {f"new{i}" for i in range(13)}
    assert [r["deleted"] for r in await reconcile_rows(graph)] == [3, 3, 1]


async def test_the_stale_fraction_guard_refuses_a_wholesale_wipe(
    tmp_path: Path, graph: GraphDB, vectors: VectorStore, capsys: pytest.CaptureFixture[str]
) -> None:
    stores = stores_for(tmp_path, graph, vectors, reconciliationAutoTombstone=True,
                        reconciliationMaxStaleFraction=0.5)
    collection = stores.settings.chroma.knowledge_base_collection
    await configure(graph, "acme", 3)
    await seed(vectors, collection, [chunk(f"old{i}", "acme", 1) for i in range(6)]
               + [chunk(f"new{i}", "acme", 3) for i in range(4)])
    figures = await one_pass(stores)
    assert len(await ids_in(vectors, collection)) == 10
    assert tenant_figures(figures, "acme")["guard"] == GUARD_STALE_FRACTION
    assert figures["failedTenants"] == 0
    [row] = await reconcile_rows(graph)
    assert row["deleted"] == 0
    assert row["detail"]["guard"] == "stale-fraction"
    assert row["detail"]["totalChunks"] == 10
    assert '"guard": "stale-fraction"' in capsys.readouterr().err


async def test_the_guard_counts_the_tenants_chunks_without_a_numeric_stamp_too(
    tmp_path: Path, graph: GraphDB, vectors: VectorStore
) -> None:
    stores = stores_for(tmp_path, graph, vectors, reconciliationAutoTombstone=True,
                        reconciliationMaxStaleFraction=0.5)
    collection = stores.settings.chroma.knowledge_base_collection
    await configure(graph, "acme", 3)
    await seed(vectors, collection, [chunk(f"old{i}", "acme", 1) for i in range(6)]
               + [chunk(f"unstamped{i}", "acme") for i in range(6)])
    figures = await one_pass(stores)
    assert tenant_figures(figures, "acme")["guard"] is None
    assert tenant_figures(figures, "acme")["tombstonedCount"] == 6


# -- failures ---------------------------------------------------------------------------------


@pytest.fixture
def tenant_fault(vectors: VectorStore, monkeypatch: pytest.MonkeyPatch) -> Callable[[str], None]:
    """Make every Chroma read that filters on one tenant raise (that tenant's shard is down)."""

    def inject(tenant: str) -> None:
        real = vectors._call_on_collection

        def failing(name: str, method: str, kwargs: Mapping[str, Any]) -> Any:
            if tenant in json.dumps(kwargs.get("where")):
                raise ConnectionError(f"injected failure for {tenant}")
            return real(name, method, kwargs)

        monkeypatch.setattr(vectors, "_call_on_collection", failing)

    return inject


@pytest.mark.parametrize(("sweep", "phase"), [(False, "scan"), (True, "tombstone")])
async def test_one_tenant_failing_is_logged_with_its_id_and_the_next_still_runs(
    tmp_path: Path, graph: GraphDB, vectors: VectorStore,
    tenant_fault: Callable[[str], None], capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch, sweep: bool, phase: str,
) -> None:
    # Without the sweep, the group's candidate read names the broken tenant and fails, and
    # the tenants are read one by one; with it (few chunks per tenant: the whole collection
    # is read once, naming no tenant), the shared band names it, fails before any delete,
    # and the tenants are tombstoned one by one. Either way only the broken tenant fails.
    if not sweep:
        monkeypatch.setattr(reconcile_groups, "SWEEP_MAX_CHUNKS_PER_TENANT", 0)
    stores = tombstoning(tmp_path, graph, vectors)
    collection = stores.settings.chroma.knowledge_base_collection
    await configure(graph, "aaa-broken", 3)
    await configure(graph, "bbb-fine", 3)
    await seed(vectors, collection, [chunk("a1", "aaa-broken", 1), chunk("b1", "bbb-fine", 1)])
    tenant_fault("aaa-broken")
    figures = await one_pass(stores)
    assert figures["failedTenants"] == 1
    assert tenant_figures(figures, "bbb-fine")["tombstonedCount"] == 1
    assert await ids_in(vectors, collection) == {"a1"}
    rows = await reconcile_rows(graph)
    assert [(r["tenant"], r["event"], r["error"]) for r in rows] == [
        ("aaa-broken", "error" if phase == "scan" else "reconcile",
         f"reconcile-{phase}-failed"), ("bbb-fine", "reconcile", None)
    ]
    failures = [json.loads(line) for line in capsys.readouterr().err.splitlines()
                if "reconcile.tenant_failed" in line]
    assert [(f["tenant"], f["phase"]) for f in failures] == [("aaa-broken", phase)]


async def test_a_failing_delete_is_logged_and_the_row_records_what_actually_went(
    tmp_path: Path, graph: GraphDB, vectors: VectorStore, chroma_fault: Callable[..., None]
) -> None:
    stores = tombstoning(tmp_path, graph, vectors)
    collection = stores.settings.chroma.knowledge_base_collection
    await configure(graph, "acme", 3)
    await seed(vectors, collection, [chunk(f"old{i}", "acme", 1) for i in range(4)])
    chroma_fault(collection, DELETE_UNCHANGED)
    figures = await one_pass(stores)
    assert figures["failedTenants"] == 1
    assert len(await ids_in(vectors, collection)) == 4
    [row] = await reconcile_rows(graph)
    assert (row["event"], row["total"], row["deleted"], row["error"]) == (
        "reconcile", 4, 0, "reconcile-tombstone-failed"
    )
    assert "delete of a band of 4 chunks failed (0 went)" in row["detail"]["error"]


async def test_a_missing_knowledge_base_collection_means_nothing_to_reconcile(
    tmp_path: Path, graph: GraphDB, vectors: VectorStore
) -> None:
    stores = stores_for(tmp_path, graph, vectors, reconciliationAutoTombstone=True)
    await configure(graph, "acme", 3)
    figures = await one_pass(stores)
    assert figures["failedTenants"] == 0
    assert tenant_figures(figures, "acme")["staleCount"] == 0


# -- paging -----------------------------------------------------------------------------------


async def test_a_tenant_of_more_than_40000_chunks_is_paged_without_skips_or_double_counts(
    tmp_path: Path, graph: GraphDB, vectors: VectorStore
) -> None:
    """39,000 stale chunks (more than a metadata `get` can return at once, ~20 scan pages),
    300 of them actionable, spread over every page, 1,500 current. (A band whose ids are
    spread over the whole tenant costs the store ~13 ms per id: docs/performance.md.)"""
    stores = stores_for(tmp_path, graph, vectors, reconciliationAutoTombstone=True)
    collection = stores.settings.chroma.knowledge_base_collection
    await configure(graph, "big", 5)
    stamps = [4] * 38_700 + [2] * 300 + [5] * 1_500
    random.Random(7).shuffle(stamps)
    rows = [ChromaRow(f"c{i:05d}", {"tenantId": "big", "tenantConfigVersion": s,
                                    "ingestedAt": 1_700_000_000_000 + i}, None,
                      [float(i % 7), 1.0, 0.0, 0.5])
            for i, s in enumerate(stamps)]
    await vectors.upsert(collection, rows, create=True)
    expected_gone = {r.id for r in rows if r.metadata["tenantConfigVersion"] == 2}
    del rows

    figures = await one_pass(stores)
    big = tenant_figures(figures, "big")
    assert (big["scanned"], big["staleCount"], big["actionableCount"]) == (39_000, 39_000, 300)
    assert big["tombstonedCount"] == 300
    assert await vectors.count(collection) == 40_200
    archived = [r.id for r in archived_rows(figures["archives"][0])]
    assert len(archived) == 300
    assert set(archived) == expected_gone


# -- dry runs and the switch ------------------------------------------------------------------


async def test_a_dry_run_leaves_the_sqlite_file_byte_identical_and_writes_no_archive(
    tmp_path: Path, graph: GraphDB, vectors: VectorStore, settings: Settings
) -> None:
    await configure(graph, "acme", 4)
    await graph.close()
    dry_settings = make_settings(tmp_path, reconciliationAutoTombstone=True,
                                 reconciliationMaxStaleFraction=1.0)  # and not even enabled
    collection = dry_settings.chroma.knowledge_base_collection
    await seed(vectors, collection, [chunk(f"old{i}", "acme", 1) for i in range(5)])
    before = settings.state.graph_db_path.read_bytes()

    async with open_context(dry_settings, dry_run=True, vectors=vectors) as stores:
        figures = await one_pass(stores, dry_run=True)

    assert tenant_figures(figures, "acme")["actionableCount"] == 5
    assert tenant_figures(figures, "acme")["tombstonedCount"] == 0
    assert settings.state.graph_db_path.read_bytes() == before
    # A read-only SQLite reader of a WAL database may leave an empty -wal (and its -shm
    # index) behind; neither holds data.
    wal = settings.state.graph_db_path.with_name(settings.state.graph_db_path.name + "-wal")
    assert not wal.exists() or wal.stat().st_size == 0
    assert not dry_settings.tombstones_dir.exists()
    assert await vectors.count(collection) == 5


async def test_a_dry_run_still_reports_the_guard(
    tmp_path: Path, graph: GraphDB, vectors: VectorStore
) -> None:
    stores = stores_for(tmp_path, graph, vectors, reconciliationAutoTombstone=True,
                        reconciliationMaxStaleFraction=0.1)
    await configure(graph, "acme", 4)
    await seed(vectors, stores.settings.chroma.knowledge_base_collection,
               [chunk("old", "acme", 1), chunk("new", "acme", 4)])
    figures = await one_pass(stores, dry_run=True)
    assert tenant_figures(figures, "acme")["guard"] == GUARD_STALE_FRACTION


async def test_disabled_reconciliation_does_nothing(
    tmp_path: Path, graph: GraphDB, vectors: VectorStore, capsys: pytest.CaptureFixture[str]
) -> None:
    settings = make_settings(tmp_path, reconciliationAutoTombstone=True)
    stores = TickContext(settings, graph, vectors)
    await configure(graph, "acme", 4)
    await seed(vectors, settings.chroma.knowledge_base_collection, [chunk("old", "acme", 1)])
    figures = await one_pass(stores)
    assert (figures["enabled"], figures["tenants"]) == (False, [])
    assert await vectors.count(settings.chroma.knowledge_base_collection) == 1
    assert await count_rows(graph, "kb_ingestion_metrics") == 0
    assert "reconciliation disabled" in capsys.readouterr().err


# -- stopping ---------------------------------------------------------------------------------


class StopOnFirstProgress(TickControl):
    """The runtime's stop signal arriving at the first sign of progress: while the tenants'
    group read runs (with `tenant_bound`, only once a tenant's own step has begun)."""

    def __init__(self, *, tenant_bound: bool = False) -> None:
        super().__init__()
        self.tenant_bound = tenant_bound

    def progress(self) -> None:
        super().progress()
        if not self.tenant_bound or structlog.contextvars.get_contextvars().get("tenant"):
            self.request_stop()


async def test_a_stopping_daemon_ends_the_pass_between_units_and_the_next_pass_resumes(
    tmp_path: Path, graph: GraphDB, vectors: VectorStore
) -> None:
    settings = make_settings(tmp_path, reconciliationEnabled=True,
                             reconciliationAutoTombstone=True,
                             reconciliationMaxStaleFraction=1.0)
    for tenant in ("aaa", "bbb"):
        await configure(graph, tenant, 3)
        await seed(vectors, settings.chroma.knowledge_base_collection,
                   [chunk(f"{tenant}{i}", tenant, 1) for i in range(3)])

    # Stopped while the group's candidates are read: no tenant's step begins, nothing goes.
    stopped = await one_pass(TickContext(settings, graph, vectors, StopOnFirstProgress()))
    assert stopped["stopped"] is True
    assert stopped["tenants"] == []
    assert stopped["tombstonedCount"] == 0
    assert await vectors.count(settings.chroma.knowledge_base_collection) == 6

    # Stopped inside the first tenant's own tombstoning (a cap of 2 puts each tenant on its
    # own bands): its band finishes (a band is never cut in two), the next tenant is left
    # for the next pass and not reported as done.
    capped = make_settings(tmp_path, reconciliationEnabled=True,
                           reconciliationAutoTombstone=True, reconciliationMaxStaleFraction=1.0,
                           reconciliationMaxDeletesPerTick=2)
    stopped = await one_pass(TickContext(capped, graph, vectors,
                                         StopOnFirstProgress(tenant_bound=True)))
    assert stopped["stopped"] is True
    assert [t["tenantId"] for t in stopped["tenants"]] == ["aaa"]
    assert stopped["tombstonedCount"] == 2
    assert await vectors.count(settings.chroma.knowledge_base_collection) == 4

    resumed = await one_pass(TickContext(settings, graph, vectors))
    assert (resumed["stopped"], resumed["tombstonedCount"]) == (False, 4)
