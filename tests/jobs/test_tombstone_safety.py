"""The store decides at delete time: a chunk written, re-stamped or handed to another tenant
after the pass read it is never deleted, every deleted chunk is in the archive with the content
it had, and the cap holds even when equal `ingestedAt` values cannot be split.

Each race is played deterministically on a real embedded store: a writer's real upsert is
slipped in at the exact moment under test (right before the delete request, or between two
pages of a band) by wrapping the store's call, which then runs for real.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest

from core.base.chroma import Include, VectorStore
from core.base.door.chroma_door import DELETE_UNCHANGED
from core.base.rules.rows import ChromaRow
from core.base.rules.tenants import TENANT_CONFIG_LABEL
from core.base.runtime.context import TickContext
from core.base.state.graph import upsert_node
from core.base.state.graph_db import GraphDB
from core.reconcile.archives.restore import restore_archive
from core.reconcile.run_pass import reconcile_tick
from core.suite.tick import run_tick
from tests.support import DIM, make_settings, read_archived_chunks, seed

FULL: tuple[Include, ...] = ("metadatas", "documents", "embeddings")
KB = "neo-knowledge-base"


def chunk(row_id: str, tenant: str = "acme", stamp: Any = 1,
          ingested: Any = 1_000) -> tuple[str, dict[str, Any]]:
    metadata: dict[str, Any] = {"tenantId": tenant, "repoSlug": "r", "sourcePath": "a.md",
                                "tenantConfigVersion": stamp}
    if ingested is not ...:
        metadata["ingestedAt"] = ingested
    return row_id, metadata


@pytest.fixture
async def stores(tmp_path: Path, graph: GraphDB, vectors: VectorStore) -> TickContext:
    await upsert_node(graph, "kb-config:acme", TENANT_CONFIG_LABEL, {"version": 3})
    settings = make_settings(tmp_path, reconciliationEnabled=True,
                             reconciliationAutoTombstone=True,
                             reconciliationMaxStaleFraction=1.0)
    return TickContext(settings, graph, vectors)


def before_call(vectors: VectorStore, monkeypatch: pytest.MonkeyPatch, method: str,
                action: Callable[[Callable[..., Any], Mapping[str, Any]], None]) -> None:
    """Run `action(real_call, kwargs)` right before every real `method` call on the KB."""
    real = vectors._call_on_collection

    def wrapped(name: str, called: str, kwargs: Mapping[str, Any]) -> Any:
        if name == KB and called == method:
            action(lambda m, **kw: real(name, m, kw), kwargs)
        return real(name, called, kwargs)

    monkeypatch.setattr(vectors, "_call_on_collection", wrapped)


def write(real: Callable[..., Any], row_id: str, metadata: dict[str, Any], document: str) -> None:
    real("upsert", ids=[row_id], metadatas=[metadata], documents=[document],
         embeddings=[[0.5] * DIM])


async def one_pass(stores: TickContext) -> dict[str, Any]:
    return (await run_tick("reconcile", stores, reconcile_tick, dry_run=False)).json()


def archived(figures: Mapping[str, Any]) -> dict[str, ChromaRow]:
    return {c.row.id: c.row for archive in figures["archives"]
            for _, c in read_archived_chunks(Path(archive))}


async def live(vectors: VectorStore, ids: list[str]) -> dict[str, ChromaRow]:
    return {r.id: r for r in await vectors.get_by_ids(KB, ids, include=FULL)}


@pytest.mark.parametrize(("change", "metadata"), [
    ("re-stamped at the current version", {"tenantConfigVersion": 3, "ingestedAt": 5_000}),
    ("rewritten, old stamp kept, new ingestedAt", {"tenantConfigVersion": 1,
                                                   "ingestedAt": 10**13}),
    ("handed to another tenant", {"tenantId": "other", "tenantConfigVersion": 1,
                                  "ingestedAt": 1_000}),
])
async def test_a_chunk_changed_between_the_read_and_the_delete_is_not_deleted(
    stores: TickContext, vectors: VectorStore, monkeypatch: pytest.MonkeyPatch,
    change: str, metadata: dict[str, Any],
) -> None:
    await seed(vectors, KB, [chunk(f"c{i}") for i in range(6)])
    new = {**chunk("c2")[1], **metadata}

    def writer(real: Callable[..., Any], _kwargs: Mapping[str, Any]) -> None:
        write(real, "c2", new, f"{change}: new content")

    before_call(vectors, monkeypatch, DELETE_UNCHANGED, writer)
    figures = await one_pass(stores)
    monkeypatch.undo()

    assert figures["tombstonedCount"] == 5, change
    survivor = (await live(vectors, [f"c{i}" for i in range(6)]))
    assert list(survivor) == ["c2"]
    assert survivor["c2"].document == f"{change}: new content"
    assert survivor["c2"].metadata == new
    # Everything deleted is in the archive, as it was when deleted.
    assert set(archived(figures)) >= {f"c{i}" for i in (0, 1, 3, 4, 5)}


async def test_a_chunk_handed_to_another_tenant_is_withdrawn_and_never_restored(
    stores: TickContext, vectors: VectorStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    await seed(vectors, KB, [chunk(f"c{i}") for i in range(3)])
    before_call(vectors, monkeypatch, DELETE_UNCHANGED, lambda real, _kw: write(
        real, "c1", {**chunk("c1")[1], "tenantId": "other"}, "theirs"))
    figures = await one_pass(stores)
    monkeypatch.undo()
    [archive] = figures["archives"]
    result = await restore_archive(vectors, Path(archive), collection=KB)
    # c1 was archived, then handed over before the delete: not deleted, so withdrawn from
    # the archive (the archive claims only what went), and the restore skips its line.
    assert (result.restored, result.withdrawn, result.refused) == (2, 1, ())
    assert (await live(vectors, ["c1"]))["c1"].document == "theirs"


async def test_a_chunk_written_with_an_old_stamp_after_the_read_is_not_deleted(
    stores: TickContext, vectors: VectorStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    await seed(vectors, KB, [chunk(f"c{i}") for i in range(3)])
    # A writer that stamps an old version but ingests now: later than every band's bound.
    before_call(vectors, monkeypatch, DELETE_UNCHANGED, lambda real, _kw: write(
        real, "late", dict(chunk("late", ingested=10**13)[1]), "late"))
    figures = await one_pass(stores)
    monkeypatch.undo()
    assert figures["tombstonedCount"] == 3
    assert list(await live(vectors, ["late", "c0"])) == ["late"]


async def test_only_actionable_chunks_no_path_can_take_are_held_and_reported(
    stores: TickContext, vectors: VectorStore, capsys: pytest.CaptureFixture[str]
) -> None:
    # Legacy chunks (no ingestedAt, or an ISO string) go by id (issue 25); a boolean or a
    # value after the pass's read fits no path and is held.
    await seed(vectors, KB, [chunk("dated"), chunk("none", ingested=...),
                             chunk("text", ingested="2024-01-01"), chunk("flag", ingested=True),
                             chunk("future", ingested=10**15)])
    figures = await one_pass(stores)
    [tenant] = figures["tenants"]
    assert (tenant["actionableCount"], tenant["heldCount"], tenant["tombstonedCount"],
            tenant["legacyTombstonedCount"]) == (5, 2, 3, 2)
    assert set(await live(vectors, ["dated", "none", "text", "flag", "future"])) == {
        "flag", "future"}
    assert "reconcile.chunks_held" in capsys.readouterr().err
    [row] = await stores.graph.query(
        "SELECT detail FROM kb_ingestion_metrics WHERE event_type = 'reconcile'")
    assert (json.loads(row[0])["heldCount"], json.loads(row[0])["legacyTombstonedCount"]) == (
        2, 2)


async def test_a_float_ingested_at_the_store_rounds_in_its_last_bit_is_still_tombstoned(
    stores: TickContext, vectors: VectorStore
) -> None:
    # Chroma 1.5.9 gives this value back one ulp up, and `$lte` of what it gave back does not
    # match it: a band bounded by the value read missed the chunk on every pass.
    value = 1.053665363621794e-268
    await seed(vectors, KB, [chunk("tiny", ingested=value)])
    [stored] = (await live(vectors, ["tiny"])).values()
    assert stored.metadata["ingestedAt"] != value, "the store's rounding this test is about"
    figures = await one_pass(stores)
    [tenant] = figures["tenants"]
    assert (tenant["actionableCount"], tenant["tombstonedCount"]) == (1, 1)
    assert await live(vectors, ["tiny"]) == {}
    assert set(archived(figures)) == {"tiny"}


async def test_the_cap_holds_inside_a_run_of_equal_ingested_at_and_all_of_it_is_archived(
    tmp_path: Path, graph: GraphDB, vectors: VectorStore
) -> None:
    await upsert_node(graph, "kb-config:acme", TENANT_CONFIG_LABEL, {"version": 3})
    stores = TickContext(make_settings(tmp_path, reconciliationEnabled=True,
                                  reconciliationAutoTombstone=True,
                                  reconciliationMaxStaleFraction=1.0,
                                  reconciliationMaxDeletesPerTick=3), graph, vectors)
    ids = [f"c{i}" for i in range(10)]
    await seed(vectors, KB, [chunk(i, ingested=7) for i in ids])  # one ingest, one timestamp
    seen = await live(vectors, ids)
    gone: set[str] = set()
    for expected in (3, 3, 3, 1, 0):
        figures = await one_pass(stores)
        assert figures["tombstonedCount"] == expected
        now_gone = set(ids) - set(await live(vectors, ids)) - gone
        assert len(now_gone) == expected
        # A capped band is archived whole, so whichever chunks the store picked are in it.
        assert all(archived(figures)[i] == seen[i] for i in now_gone)
        gone |= now_gone
    assert gone == set(ids)


async def test_a_chunk_re_stamped_between_the_bands_snapshot_and_its_fetch_is_kept(
    stores: TickContext, vectors: VectorStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The band's ids come from one ids-only read; the rows are then fetched by id. A row
    re-ingested in between fails the rule when fetched: it is not archived, and the delete
    (evaluated by the store) does not take it."""
    ids = [f"c{i}" for i in range(6)]
    await seed(vectors, KB, [chunk(i) for i in ids])
    seen = await live(vectors, ids)
    real = vectors._call_on_collection
    done: list[bool] = []

    def restamp_after_snapshot(name: str, method: str, kwargs: Mapping[str, Any]) -> Any:
        result = real(name, method, kwargs)
        if method == "get" and kwargs.get("include") == [] and "where" in kwargs and not done:
            done.append(True)
            write(lambda m, **kw: real(name, m, kw), "c3",
                  dict(chunk("c3", stamp=3, ingested=5_000)[1]), "re-ingested")
        return result

    monkeypatch.setattr(vectors, "_call_on_collection", restamp_after_snapshot)
    figures = await one_pass(stores)
    monkeypatch.undo()
    assert done and figures["tombstonedCount"] == 5
    assert (await live(vectors, ["c3"]))["c3"].document == "re-ingested"
    in_archive = archived(figures)
    assert "c3" not in in_archive
    assert all(in_archive[i] == seen[i] for i in ids if i != "c3")


async def test_a_store_whose_where_answers_another_tenant_s_chunk_cannot_widen_a_band(
    stores: TickContext, vectors: VectorStore, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Fault injection: the store's `where` matches a chunk of another tenant (the real store
    cannot be made to do that on demand). A band names the chosen ids and is read and deleted
    by them (issue 31), so such an answer cannot add a chunk to it: the tenant's chunks go,
    the other tenant's stays."""
    await seed(vectors, KB, [chunk(f"c{i}") for i in range(4)] + [chunk("u", tenant="other")])
    real = vectors._call_on_collection

    def leaky(name: str, method: str, kwargs: Mapping[str, Any]) -> Any:
        result = real(name, method, kwargs)
        if method == "get" and "where" in kwargs and kwargs.get("include") == []:
            return {**result, "ids": [*result["ids"], "u"]}
        return result

    monkeypatch.setattr(vectors, "_call_on_collection", leaky)
    figures = await one_pass(stores)
    monkeypatch.undo()
    assert figures["tombstonedCount"] == 4
    assert list(await live(vectors, ["c0", "c1", "c2", "c3", "u"])) == ["u"]
