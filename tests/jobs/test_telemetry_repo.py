"""Which repo a reconcile pass's telemetry row names, on real SQLite and embedded Chroma: the
tenant config's `repoSlug` when it has one, else the repo its data names (the original's
tenant configs name theirs only in `tenantRepos`), the alphabetically smallest for a tenant of
several repos (the one the original's reconciler names), and the recorder's placeholder `neo`
only when nothing names one."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from core.alerting.stores.health import health_rollup
from core.base.chroma import VectorStore
from core.base.rules.telemetry import DEFAULT_REPO_SLUG, EVENT_INGEST, smallest_repo
from core.base.rules.tenants import TENANT_CONFIG_LABEL
from core.base.runtime.context import TickContext
from core.base.state.graph import upsert_node
from core.base.state.graph_db import GraphDB
from core.base.state.telemetry import insert_metric_rows, new_metric_row
from core.reconcile.rules.manifests import MANIFEST_LABEL, manifest_node_id
from core.reconcile.run_pass import reconcile_tick
from core.suite.tick import run_tick
from tests.support import make_settings, seed


def chunk(row_id: str, tenant: str, repo: Any, stamp: int) -> tuple[str, dict[str, Any]]:
    metadata: dict[str, Any] = {"tenantId": tenant, "tenantConfigVersion": stamp,
                                "sourcePath": f"src/{row_id}.mjs", "ingestedAt": 1}
    if repo is not ...:
        metadata["repoSlug"] = repo
    return row_id, metadata


async def configure_as_the_original(graph: GraphDB, tenant: str, version: int,
                                    repos: tuple[str, ...] = ()) -> None:
    """A `kb-config:` node as the original writes it: `tenantRepos`, no top-level repoSlug."""
    await upsert_node(graph, f"kb-config:{tenant}", TENANT_CONFIG_LABEL, {
        "tenantId": tenant, "useDefaultSources": True, "rawRepoSource": False,
        "tenantRepos": [{"cloneUrl": f"https://{r}.git", "credentialRef": "gh", "repoSlug": r}
                        for r in repos],
        "version": version, "visibility": "team"})


async def pass_rows(tmp_path: Path, graph: GraphDB, vectors: VectorStore) -> dict[str, str]:
    """One report-only pass; each tenant's reconcile row's `repo_slug`."""
    settings = make_settings(tmp_path, reconciliationEnabled=True)
    result = await run_tick("reconcile", TickContext(settings, graph, vectors), reconcile_tick,
                            dry_run=False)
    assert result.json()["failedTenants"] == 0
    rows = await graph.query("SELECT tenant_id, repo_slug FROM kb_ingestion_metrics "
                             "WHERE event_type = 'reconcile' ORDER BY tenant_id")
    return {str(t): str(r) for t, r in rows}


def test_the_smallest_non_empty_repo_is_named() -> None:
    assert smallest_repo(["b/x", None, "", 7, "a/y", "a/y"]) == "a/y"
    assert smallest_repo([None, "", ["a"]]) is None


async def test_a_tenant_configured_as_the_original_does_names_the_repo_of_its_chunks(
    tmp_path: Path, graph: GraphDB, vectors: VectorStore
) -> None:
    settings = make_settings(tmp_path)
    await configure_as_the_original(graph, "declared", 3, ("github.com/neomjs/a",))
    await configure_as_the_original(graph, "bare", 3)  # no tenantRepos either
    await seed(vectors, settings.chroma.knowledge_base_collection, [
        chunk("d1", "declared", "github.com/neomjs/a", 1),
        chunk("b1", "bare", "acme/one", 1), chunk("b2", "bare", "acme/one", 2)])
    assert await pass_rows(tmp_path, graph, vectors) == {
        "bare": "acme/one", "declared": "github.com/neomjs/a"}


async def test_a_tenant_of_several_repos_names_the_smallest_its_data_names(
    tmp_path: Path, graph: GraphDB, vectors: VectorStore
) -> None:
    settings = make_settings(tmp_path)
    # Stale chunks of two repos; the smaller one is named.
    await configure_as_the_original(graph, "chunks", 3)
    # Only `zeta` drifted, but `alpha` is declared: the row names `alpha`, as the original
    # names the first repo of the tenant's telemetry, drifted or not.
    await configure_as_the_original(graph, "declared", 3, ("zeta/repo", "alpha/repo"))
    await seed(vectors, settings.chroma.knowledge_base_collection, [
        chunk("c1", "chunks", "m/repo", 1), chunk("c2", "chunks", "b/repo", 1),
        chunk("c3", "chunks", "k/repo", 1), chunk("z1", "declared", "zeta/repo", 1)])
    assert await pass_rows(tmp_path, graph, vectors) == {
        "chunks": "b/repo", "declared": "alpha/repo"}


async def test_a_tenant_with_a_manifest_names_its_repos_smallest_on_the_per_tenant_path(
    tmp_path: Path, graph: GraphDB, vectors: VectorStore
) -> None:
    settings = make_settings(tmp_path)
    await configure_as_the_original(graph, "t", 2)
    await upsert_node(graph, manifest_node_id("t"), MANIFEST_LABEL, {"tenantId": "t",
        "manifests": {"q/repo": {"repoSlug": "q/repo", "pathsAfterPush": ["src/keep.mjs"],
                                 "updatedAt": 1}}, "visibility": "team"})
    await seed(vectors, settings.chroma.knowledge_base_collection, [
        chunk("keep", "t", "q/repo", 2), chunk("x", "t", "x/repo", 1)])
    assert await pass_rows(tmp_path, graph, vectors) == {"t": "q/repo"}


async def test_a_configured_repo_slug_still_wins_over_the_data(
    tmp_path: Path, graph: GraphDB, vectors: VectorStore
) -> None:
    settings = make_settings(tmp_path)
    await upsert_node(graph, "kb-config:ours", TENANT_CONFIG_LABEL,
                      {"version": 3, "repoSlug": "ours/configured",
                       "tenantRepos": [{"repoSlug": "aaa/declared"}]})
    await seed(vectors, settings.chroma.knowledge_base_collection, [chunk("o", "ours", "aaa/x", 1)])
    assert await pass_rows(tmp_path, graph, vectors) == {"ours": "ours/configured"}


async def test_only_a_tenant_whose_data_names_no_repo_gets_the_placeholder(
    tmp_path: Path, graph: GraphDB, vectors: VectorStore
) -> None:
    settings = make_settings(tmp_path)
    await configure_as_the_original(graph, "anon", 3)
    await seed(vectors, settings.chroma.knowledge_base_collection, [
        chunk("n1", "anon", ..., 1), chunk("n2", "anon", "", 1)])
    assert await pass_rows(tmp_path, graph, vectors) == {"anon": DEFAULT_REPO_SLUG}


async def test_the_health_view_counts_the_pass_under_the_repo_the_originals_rows_name(
    tmp_path: Path, graph: GraphDB, vectors: VectorStore
) -> None:
    settings = make_settings(tmp_path)
    repos = ("github.com/neomjs/a", "github.com/neomjs/b")
    await configure_as_the_original(graph, "neo-shared", 3, repos)
    # What the original's ingestion recorded: one `ingest` row per repo.
    await insert_metric_rows(graph, [
        new_metric_row(tenant_id="neo-shared", repo_slug=r, event_type=EVENT_INGEST,
                       chunks_embedded=10) for r in repos])
    await seed(vectors, settings.chroma.knowledge_base_collection,
               [chunk("s1", "neo-shared", repos[1], 1)])
    await pass_rows(tmp_path, graph, vectors)
    shown = {(r.tenant_id, r.repo_slug): (r.ingest_events, r.reconcile_events)
             for r in await health_rollup(graph, 0)}
    # No (neo-shared, neo) line: the pass lands on the first of the tenant's repos, where the
    # original's reconciler puts its own rows.
    assert shown == {("neo-shared", repos[0]): (1, 1), ("neo-shared", repos[1]): (1, 0)}
