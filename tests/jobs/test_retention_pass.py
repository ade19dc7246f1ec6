"""Retention (the original's GC, #11641) as the reconcile daemon's job and `kb-reconcile gc`:
a per-tenant override set with `kb-tenants set-policy`, `tombstone` telemetry rows with the
original's detail, deletes archived first through the one engine, and a re-ingest racing a
retention delete loses nothing. Real SQLite, embedded Chroma, the real commands."""

from __future__ import annotations

import json
import time
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
from core.reconcile.retention import retention_tick
from core.suite.tick import run_tick
from tests.support import DIM, make_settings, read_archived_chunks, run_module, seed

KB = "neo-knowledge-base"


def chunk(row_id: str, tenant: str, repo: str, at: Any) -> tuple[str, dict[str, Any]]:
    metadata: dict[str, Any] = {"tenantId": tenant, "repoSlug": repo, "sourcePath": "a.md",
                                "tenantConfigVersion": 1}
    if at is not ...:
        metadata["ingestedAt"] = at
    return row_id, metadata


def now_ms() -> int:
    return int(time.time() * 1000)


def aged_rows() -> list[tuple[str, dict[str, Any]]]:
    """The chunks, aged from now (when a test seeds them: the retention pass that follows
    measures ages from its own clock). Tenant "keep3" inherits gcRetention {maxCount = 3};
    tenant "keep1" overrides it to 1."""
    now = now_ms()
    return ([chunk(f"k3-a{i}", "keep3", "a", now - 10_000 * (i + 1)) for i in range(5)]
            + [chunk("k3-b0", "keep3", "b", now - 99_000),
               chunk("k3-legacy", "keep3", "a", ...)]
            + [chunk(f"k1-a{i}", "keep1", "a", now - 10_000 * (i + 1)) for i in range(3)])


async def all_ids(vectors: VectorStore) -> set[str]:
    return {r.id for page in [p async for p in vectors.scan(KB, include=())] for r in page}


async def test_the_daemon_job_expires_by_count_per_repo_with_a_tenant_override(
    tmp_path: Path, settings: Settings, graph: GraphDB
) -> None:
    for tenant in ("keep3", "keep1"):
        await upsert_node(graph, f"kb-config:{tenant}", TENANT_CONFIG_LABEL, {"version": 1})
    vectors = await VectorStore.open(settings.chroma)
    await seed(vectors, KB, aged_rows())
    await vectors.close()
    config = tmp_path / "kb.toml"
    config.write_text(f'[knowledgeBase]\ndataDir = "{tmp_path / "data"}"\n'
                      "gcEnabled = true\ngcAutoDelete = true\ngcRetention = {maxCount = 3}\n")
    policy = run_module("daemons.tenants", "set-policy", "keep1", "--gc-max-count", "1",
                        "--config", str(config), home=tmp_path)
    assert policy.returncode == 0, policy.stderr

    done = run_module("daemons.reconcile", "--tick", "--json", "--config", str(config),
                      home=tmp_path)  # the daemon's jobs once each, as it schedules them
    assert done.returncode == 0, done.stderr
    gc = json.loads(done.stdout)["gc"]
    by_tenant = {t["tenantId"]: t for t in gc["tenants"]}
    assert (by_tenant["keep3"]["retention"], by_tenant["keep1"]["retention"]) == (
        {"maxAgeMs": None, "maxCount": 3}, {"maxAgeMs": None, "maxCount": 1})
    assert (gc["expiredCount"], gc["deletedCount"], gc["collectionCount"]) == (4, 4, 10)
    gone = {"k3-a3", "k3-a4", "k1-a1", "k1-a2"}  # newest kept per tenant and repo
    archived = {c.row.id for t in gc["tenants"] for _, c in
                read_archived_chunks(Path(t["archive"]))}
    assert archived == gone

    vectors = await VectorStore.open(settings.chroma)
    try:
        assert await all_ids(vectors) == {r for r, _ in aged_rows()} - gone
    finally:
        await vectors.close()
    rows = await graph.query("SELECT tenant_id, repo_slug, chunks_total, chunks_deleted, detail "
                             "FROM kb_ingestion_metrics WHERE event_type = 'tombstone' "
                             "ORDER BY tenant_id, repo_slug")
    assert [(r[0], r[1], r[2], r[3]) for r in rows] == [("keep1", "a", 2, 2),
                                                        ("keep3", "a", 2, 2)]
    assert json.loads(rows[1][4]) == {
        "expiredCount": 2, "evaluatedCount": 7, "deletedCount": 2,
        "retention": {"maxAgeMs": None, "maxCount": 3}, "gcAutoDelete": True,
        "defragRecommended": True}  # 4 of 10 deleted, over the 0.10 default
    status = run_module("daemons.status", "--json", "--config", str(config), home=tmp_path)
    shown = json.loads(status.stdout)["ticks"]["gc"]["figures"]  # the last retention pass
    assert (shown["expiredCount"], shown["deletedCount"]) == (4, 4)


async def test_gc_dry_run_reports_and_writes_nothing(tmp_path: Path, settings: Settings,
                                                      graph: GraphDB) -> None:
    await upsert_node(graph, "kb-config:keep3", TENANT_CONFIG_LABEL, {"version": 1})
    vectors = await VectorStore.open(settings.chroma)
    await seed(vectors, KB, aged_rows())
    await vectors.close()
    config = tmp_path / "kb.toml"
    config.write_text(f'[knowledgeBase]\ndataDir = "{tmp_path / "data"}"\n'
                      "gcAutoDelete = true\ngcRetention = {maxAgeMs = 75000}\n")
    done = run_module("daemons.reconcile", "gc", "--dry-run", "--json", "--config",
                      str(config), home=tmp_path)
    assert done.returncode == 0, done.stderr
    figures = json.loads(done.stdout)
    assert (figures["ok"], figures["expiredCount"], figures["deletedCount"]) == (True, 1, 0)
    assert not (tmp_path / "data" / "tombstones").exists()
    assert await graph.query("SELECT 1 FROM kb_ingestion_metrics") == []


async def test_a_re_ingest_racing_a_retention_delete_loses_nothing(
    tmp_path: Path, graph: GraphDB, vectors: VectorStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Right before the delete request (the archive on disk), a writer re-ingests k1-a2: a new
    # ingestedAt and document. The band's `ingestedAt <=` bound no longer matches it.
    await upsert_node(graph, "kb-config:keep1", TENANT_CONFIG_LABEL, {"version": 1})
    await seed(vectors, KB, [r for r in aged_rows() if r[0].startswith("k1-")])
    real = vectors._call_on_collection
    reingested_at = now_ms() + 1
    fresh = chunk("k1-a2", "keep1", "a", reingested_at)[1]

    def wrapped(name: str, method: str, kwargs: Mapping[str, Any]) -> Any:
        if name == KB and method == DELETE_UNCHANGED:
            real(name, "upsert", {"ids": ["k1-a2"], "metadatas": [fresh],
                                  "documents": ["re-ingested"], "embeddings": [[0.5] * DIM]})
        return real(name, method, kwargs)

    monkeypatch.setattr(vectors, "_call_on_collection", wrapped)
    stores = TickContext(make_settings(tmp_path, gcEnabled=True, gcAutoDelete=True,
                                       gcRetention={"maxCount": 1}), graph, vectors)
    figures = (await run_tick("gc", stores, retention_tick, dry_run=False)).json()
    assert (figures["expiredCount"], figures["deletedCount"]) == (2, 1)
    assert await all_ids(vectors) == {"k1-a0", "k1-a2"}
    [kept] = await vectors.get_by_ids(KB, ["k1-a2"], include=("documents", "metadatas"))
    assert (kept.document, kept.metadata["ingestedAt"]) == ("re-ingested", reingested_at)


async def test_explain_shows_what_retention_would_take_with_the_tenant_override(
    tmp_path: Path, graph: GraphDB, vectors: VectorStore
) -> None:
    from core.base.rules.camel_json import to_json
    from core.reconcile.explain_tenant import explain_tenant
    from core.reconcile.reports.explain import render_plan

    await upsert_node(graph, "kb-config:keep1", TENANT_CONFIG_LABEL,
                      {"version": 1, "reconciliationPolicy": {"gcMaxCount": 1}})
    await seed(vectors, KB, aged_rows())
    stores = TickContext(make_settings(tmp_path, gcRetention={"maxCount": 3}), graph, vectors)
    plan = await explain_tenant(stores, "keep1")
    retention = to_json(plan)["retention"]
    assert (retention["retention"], retention["expiredCount"], retention["expiredIds"]) == (
        {"maxAgeMs": None, "maxCount": 1}, 2, ["k1-a2", "k1-a1"])
    assert "retention (maxCount 1): 2 of 3 chunks expired (a 2)" in render_plan(plan)
    assert await all_ids(vectors) == {r for r, _ in aged_rows()}


def test_the_reconcile_daemon_schedules_retention_on_its_own_interval_only_when_enabled(
    tmp_path: Path,
) -> None:
    from daemons.reconcile import reconcile_daemon

    on = reconcile_daemon(make_settings(tmp_path, gcEnabled=True, gcIntervalMs=7_200_000))
    assert {job.name: job.interval_ms for job in on.jobs}["gc"] == 7_200_000
    off = reconcile_daemon(make_settings(tmp_path))
    assert "gc" not in {job.name for job in off.jobs}
