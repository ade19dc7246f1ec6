"""The plan is the delete, and a rewrite is never deleted (issue 31, items 5 and 6), through the
pass, `explain`, `gc` and `restore` on real SQLite and a real embedded Chroma store:

- under every cap from 1 to past the number of actionable chunks, with every reason mixed
  (config-stale, legacy with an ISO `ingestedAt` and without one, manifest orphans, generation
  orphans) and many equal `ingestedAt` values across reasons, the ids the pass deletes are
  exactly the ids `explain` marked and exactly the ids its archive holds, and they are the
  first of one order (oldest `ingestedAt`, a legacy chunk at its ISO time or first when it has
  none, then the id);
- a chunk rewritten (document, embedding or metadata) while the pass is paused between its
  archive and its delete survives, on every deletion path, and restore never puts the archived
  version back (its archive line is withdrawn).

The pause is a test hook: the fencing check (`ensure_still_leads`) is the engine's last step
after the archives are durable and before the delete, and a real pass cannot be paused there
on demand, so the test wraps it to rewrite the chunk first (the real writer: the same store's
upsert).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from core.base.chroma import VectorStore
from core.base.rules.camel_json import to_json
from core.base.rules.rows import ChromaRow
from core.base.rules.tenants import TENANT_CONFIG_LABEL
from core.base.runtime.context import TickContext
from core.base.state.graph import upsert_node
from core.base.state.graph_db import GraphDB
from core.reconcile import deletion
from core.reconcile.archives.restore import restore_archive
from core.reconcile.explain_tenant import explain_tenant
from core.reconcile.retention import retention_tick
from core.reconcile.rules.manifests import RepoManifest
from core.reconcile.run_pass import reconcile_tick
from core.reconcile.stores.tenant_manifests import set_tenant_manifest
from core.suite.tick import run_tick
from tests.support import (
    embedding_for,
    make_settings,
    patch_target,
    read_archived_chunks,
    seed,
)

KB = "neo-knowledge-base"
REPO = "r"
MANIFEST_AT = int(time.time() * 1000) - 3_600_000
BASE = MANIFEST_AT - 10_000
OLD_PARSER: dict[str, Any] = {"parserId": "p", "parserVersion": "1.0.0"}
NEW_PARSER: dict[str, Any] = {"parserId": "p", "parserVersion": "1.1.0"}
#: An ISO `ingestedAt` before every numeric one, and its epoch ms.
ISO = "2024-01-01T00:00:00Z"


def meta(*, stamp: int = 3, ingested: Any = None, path: str = "keep.md",
         **extra: Any) -> dict[str, Any]:
    row = {"tenantId": "acme", "repoSlug": REPO, "sourcePath": path,
           "tenantConfigVersion": stamp, **extra}
    if ingested is not None:
        row["ingestedAt"] = ingested
    return row


def mixed_chunks() -> tuple[list[tuple[str, dict[str, Any]]], list[str]]:
    """Every reason, equal `ingestedAt` values across reasons, and the actionable ids in the
    one deletion order (worked out here from the data, not by the code under test)."""
    rows: list[tuple[str, dict[str, Any]]] = []
    order: list[tuple[float, str]] = []

    def add(row_id: str, metadata: dict[str, Any], key: float | None) -> None:
        rows.append((row_id, metadata))
        if key is not None:
            order.append((key, row_id))

    add("legacy-none-b", meta(stamp=1), float("-inf"))
    add("legacy-none-a", meta(stamp=1), float("-inf"))
    add("legacy-iso", meta(stamp=1, ingested=ISO), 1_704_067_200_000.0)
    for i, at in enumerate([30, 10, 20, 10, 40]):
        add(f"stale-{i}", meta(stamp=1, ingested=BASE + at), BASE + at)
    for i, at in enumerate([10, 20, 20, 50]):
        add(f"orphan-{i}", meta(ingested=BASE + at, path=f"gone-{i}.md"), BASE + at)
    for i, at in enumerate([20, 10, 60]):
        add(f"gen-old-{i}", meta(ingested=BASE + at, path=f"g{i}.md", **OLD_PARSER), BASE + at)
        add(f"gen-new-{i}", meta(ingested=BASE + at, path=f"g{i}.md", **NEW_PARSER), None)
    add("live", meta(ingested=BASE), None)
    return rows, [row_id for _, row_id in sorted(order)]


async def declare(graph: GraphDB) -> None:
    await upsert_node(graph, "kb-config:acme", TENANT_CONFIG_LABEL, {
        "version": 3, "repoSlug": REPO,
        "tenantRepos": [{"repoSlug": REPO, **NEW_PARSER}]})
    await set_tenant_manifest(graph, "acme", RepoManifest(
        REPO, ("keep.md", "g0.md", "g1.md", "g2.md"), MANIFEST_AT))


def settings_for(tmp_path: Path, **overrides: Any) -> Any:
    return make_settings(tmp_path, reconciliationEnabled=True,
                         reconciliationAutoTombstone=True, reconciliationMaxStaleFraction=1.0,
                         reconciliationManifestGraceMs=0, **overrides)


async def ids_left(vectors: VectorStore) -> set[str]:
    return {r.id for page in [p async for p in vectors.scan(KB, include=())] for r in page}


def archived_ids(figures: dict[str, Any]) -> list[str]:
    return [c.row.id for a in figures["archives"] for _, c in read_archived_chunks(Path(a))]


async def test_explain_marks_what_the_pass_deletes_and_archives_under_every_cap(
    tmp_path: Path, graph: GraphDB, vectors: VectorStore
) -> None:
    rows, order = mixed_chunks()
    await declare(graph)
    for cap in range(1, len(order) + 2):
        await seed(vectors, KB, rows)  # every chunk back as it was
        context = TickContext(settings_for(tmp_path, reconciliationMaxDeletesPerTick=cap),
                              graph, vectors)
        plan = to_json(await explain_tenant(context, "acme"))
        marked = {c["id"] for listed in ("chunks", "generationOrphans")
                  for c in plan[listed] if c["wouldDelete"]}
        figures = (await run_tick("reconcile", context, reconcile_tick, dry_run=False)).json()
        deleted = {row_id for row_id, _ in rows} - await ids_left(vectors)
        archived = archived_ids(figures)
        assert marked == set(order[:cap]), f"cap {cap}: explain"
        assert deleted == marked, f"cap {cap}: the pass deleted other chunks than explain marked"
        assert sorted(archived) == sorted(deleted), f"cap {cap}: the archive"


#: The rewrites a paused pass meets: each leaves the reason's `where` matching.
REWRITES: dict[str, Callable[[ChromaRow], ChromaRow]] = {
    "document": lambda r: ChromaRow(r.id, r.metadata, "corrected text", r.embedding),
    "embedding": lambda r: ChromaRow(r.id, r.metadata, r.document,
                                     [x + 0.25 for x in (r.embedding or [])]),
    "metadata": lambda r: ChromaRow(r.id, {**r.metadata, "title": "renamed"}, r.document,
                                    r.embedding),
}

#: Per deletion path: the chunks to seed (the victim first) and the settings that delete them.
PATHS: dict[str, tuple[list[tuple[str, dict[str, Any]]], dict[str, Any]]] = {
    "config-stale": ([("v", meta(stamp=1, ingested=BASE)), ("w", meta(stamp=1, ingested=BASE))],
                     {}),
    "manifest-orphan": ([("v", meta(ingested=BASE, path="gone.md")),
                         ("w", meta(ingested=BASE, path="gone2.md"))], {}),
    "generation-orphan": ([("v", meta(ingested=BASE, path="g0.md", **OLD_PARSER)),
                           ("w", meta(ingested=BASE, path="g1.md", **OLD_PARSER)),
                           ("n0", meta(ingested=BASE, path="g0.md", **NEW_PARSER)),
                           ("n1", meta(ingested=BASE, path="g1.md", **NEW_PARSER))], {}),
    "legacy": ([("v", meta(stamp=1, ingested=ISO)), ("w", meta(stamp=1))], {}),
    "retention": ([("v", meta(ingested=BASE)), ("w", meta(ingested=BASE))],
                  {"gcEnabled": True, "gcAutoDelete": True, "gcRetention": {"maxAgeMs": 1000}}),
}


def pause_before_delete(monkeypatch: pytest.MonkeyPatch,
                        during: Callable[[], Awaitable[None]]) -> None:
    """Run `during()` once, where the engine has made its archives durable and is about to
    delete (the test hook the module docstring names)."""
    real = patch_target(deletion, "ensure_still_leads")
    done: list[bool] = []

    async def paused(action: str) -> None:
        if not done:
            done.append(True)
            await during()
        await real(action)

    monkeypatch.setattr(deletion, "ensure_still_leads", paused)


@pytest.mark.parametrize("change", sorted(REWRITES))
@pytest.mark.parametrize("path", sorted(PATHS))
async def test_a_chunk_rewritten_while_the_pass_is_paused_survives_and_is_never_restored(
    tmp_path: Path, graph: GraphDB, vectors: VectorStore, monkeypatch: pytest.MonkeyPatch,
    path: str, change: str
) -> None:
    rows, overrides = PATHS[path]
    await declare(graph)
    await seed(vectors, KB, rows)
    [victim] = await vectors.get_by_ids(KB, ["v"], include=("metadatas", "documents",
                                                            "embeddings"))
    rewritten = REWRITES[change](ChromaRow(victim.id, dict(victim.metadata), victim.document,
                                           list(victim.embedding or embedding_for("v"))))

    async def rewrite() -> None:
        await vectors.upsert(KB, [rewritten])

    pause_before_delete(monkeypatch, rewrite)
    context = TickContext(settings_for(tmp_path, **overrides), graph, vectors)
    if path == "retention":
        result = to_json(await retention_tick(context, dry_run=False))
        [tenant] = result["tenants"]
        archives = [tenant["archive"]]
        assert tenant["deletedCount"] == 1
    else:
        figures = (await run_tick("reconcile", context, reconcile_tick, dry_run=False)).json()
        archives = figures["archives"]
        [acme] = figures["tenants"]
        assert (acme["tombstonedCount"], acme["rewrittenKeptCount"]) == (1, 1)
    monkeypatch.undo()
    left = await ids_left(vectors)
    assert "v" in left and "w" not in left
    [live] = await vectors.get_by_ids(KB, ["v"], include=("metadatas", "documents",
                                                          "embeddings"))
    assert (live.document, dict(live.metadata)) == (rewritten.document,
                                                    dict(rewritten.metadata))
    assert live.embedding == pytest.approx(rewritten.embedding)
    # The archived version of v was not deleted: restore never puts it back, even once the
    # live v is gone.
    await vectors.delete_where(KB, where={"tenantId": "acme"}, ids=["v"])
    [archive] = archives
    restored = await restore_archive(vectors, Path(archive), collection=KB)
    assert (restored.restored, restored.withdrawn) == (1, 1)
    assert await ids_left(vectors) >= {"w"} and "v" not in await ids_left(vectors)
