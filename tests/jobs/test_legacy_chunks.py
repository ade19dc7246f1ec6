"""Legacy chunks (no numeric `ingestedAt`: absent, or an ISO-8601 string written by an older
ingester) are tombstoned by id with the staleness `where` the store evaluates at delete time:
archived first, counted apart (`legacyTombstonedCount`), restorable; and a legacy chunk
re-stamped or rewritten between the pass's read and its delete is never deleted. Real SQLite,
embedded Chroma, the real commands."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from core.base.chroma import VectorStore
from core.base.config.config import Settings
from core.base.door.chroma_door import DELETE_UNCHANGED
from core.base.rules.tenants import TENANT_CONFIG_LABEL
from core.base.runtime.context import TickContext
from core.base.state.graph import upsert_node
from core.base.state.graph_db import GraphDB
from core.reconcile.run_pass import reconcile_tick
from core.suite.tick import run_tick
from tests.support import DIM, make_settings, read_archived_chunks, run_module, seed

KB = "neo-knowledge-base"


def legacy(row_id: str, ingested: Any, *, stamp: int = 1) -> tuple[str, dict[str, Any]]:
    metadata: dict[str, Any] = {"tenantId": "acme", "repoSlug": "r", "sourcePath": "a.md",
                                "tenantConfigVersion": stamp}
    if ingested is not ...:
        metadata["ingestedAt"] = ingested
    return row_id, metadata


async def all_ids(vectors: VectorStore) -> set[str]:
    return {r.id for page in [p async for p in vectors.scan(KB, include=())] for r in page}


async def test_two_thousand_stale_legacy_chunks_go_under_the_default_cap_archived_and_restorable(
    tmp_path: Path, settings: Settings, graph: GraphDB
) -> None:
    await upsert_node(graph, "kb-config:acme", TENANT_CONFIG_LABEL, {"version": 3})
    rows = ([legacy(f"iso#{i:04}", f"2024-01-{1 + i % 28:02}T00:00:00Z") for i in range(1_000)]
            + [legacy(f"none#{i:04}", ...) for i in range(1_000)]
            + [legacy("live", ..., stamp=3)])
    vectors = await VectorStore.open(settings.chroma)
    await seed(vectors, KB, rows)
    await vectors.close()
    config = tmp_path / "kb.toml"
    config.write_text(f'[knowledgeBase]\ndataDir = "{tmp_path / "data"}"\n'
                      "reconciliationEnabled = true\nreconciliationAutoTombstone = true\n"
                      "reconciliationMaxStaleFraction = 1.0\n")

    done = run_module("daemons.reconcile", "--tick", "--json", "--config", str(config),
                      home=tmp_path)
    assert done.returncode == 0, done.stderr
    figures = json.loads(done.stdout)
    [acme] = figures["tenants"]
    assert (acme["actionableCount"], acme["heldCount"], acme["tombstonedCount"],
            acme["legacyTombstonedCount"]) == (2_000, 0, 2_000, 2_000)
    [archive] = figures["archives"]
    archived = {c.row.id: c.row.metadata for _, c in read_archived_chunks(Path(archive))}
    assert set(archived) == {r for r, _ in rows} - {"live"}
    assert archived["iso#0001"]["ingestedAt"] == "2024-01-02T00:00:00Z"
    [(detail,)] = await graph.query(
        "SELECT detail FROM kb_ingestion_metrics WHERE event_type = 'reconcile'")
    assert json.loads(detail)["legacyTombstonedCount"] == 2_000

    restored = run_module("daemons.reconcile", "restore", archive, "--config", str(config),
                          "--json", home=tmp_path)
    assert restored.returncode == 0, restored.stderr
    vectors = await VectorStore.open(settings.chroma)
    try:
        assert await all_ids(vectors) == {r for r, _ in rows}
        [back] = await vectors.get_by_ids(KB, ["iso#0001"], include=("metadatas",))
        assert back.metadata == dict(legacy("iso#0001", "2024-01-02T00:00:00Z")[1])
    finally:
        await vectors.close()


async def test_a_legacy_chunk_re_stamped_or_rewritten_after_the_read_is_never_deleted(
    tmp_path: Path, graph: GraphDB, vectors: VectorStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Right before each delete request (after the archive is on disk), a writer re-stamps
    # `none#1` at the current version and rewrites `iso#1` with a numeric ingestedAt under its
    # old stamp: the store's `where` no longer matches either; their band-mates still go.
    await upsert_node(graph, "kb-config:acme", TENANT_CONFIG_LABEL, {"version": 3})
    await seed(vectors, KB, [legacy("none#0", ...), legacy("none#1", ...),
                             legacy("iso#0", "2024-01-01T00:00:00Z"),
                             legacy("iso#1", "2024-01-01T00:00:00Z")])
    real = vectors._call_on_collection
    rewrites = {"none#1": legacy("none#1", ..., stamp=3)[1],
                "iso#1": legacy("iso#1", 1_700_000_000_000)[1]}

    def wrapped(name: str, method: str, kwargs: Mapping[str, Any]) -> Any:
        if name == KB and method == DELETE_UNCHANGED:
            real(name, "upsert", {"ids": list(rewrites), "metadatas": list(rewrites.values()),
                                  "documents": ["rewritten"] * 2,
                                  "embeddings": [[0.5] * DIM] * 2})
        return real(name, method, kwargs)

    monkeypatch.setattr(vectors, "_call_on_collection", wrapped)
    stores = TickContext(make_settings(
        tmp_path, reconciliationEnabled=True, reconciliationAutoTombstone=True,
        reconciliationMaxStaleFraction=1.0), graph, vectors)
    figures = (await run_tick("reconcile", stores, reconcile_tick, dry_run=False)).json()
    [acme] = figures["tenants"]
    assert (acme["tombstonedCount"], acme["legacyTombstonedCount"]) == (2, 2)
    assert await all_ids(vectors) == {"none#1", "iso#1"}
    kept = await vectors.get_by_ids(KB, ["none#1", "iso#1"], include=("documents",))
    assert {k.document for k in kept} == {"rewritten"}
