"""Any row shape is survivable: a chunk whose fields have unexpected types (Chroma 1.x stores
lists, strings, booleans and numbers under any key) is counted for its tenant, each such field
read as absent, and never fails the tenant's pass. The pure scan under every JSON type, then
real embedded Chroma on the per-tenant path (a tenant with a manifest) and the fleet paths."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.base.chroma import VectorStore
from core.base.rules.rows import ChromaRow
from core.base.state.graph_db import GraphDB
from core.reconcile.rules.manifests import INGESTED_KEY, PATH_KEY, REPO_KEY, RepoManifest
from core.reconcile.rules.reconcile import STAMP_KEY, TENANT_KEY
from core.reconcile.rules.scan_verdicts import ScanRules
from core.reconcile.rules.tenant_scan import TenantTally
from core.reconcile.stores.tenant_manifests import set_tenant_manifest
from tests.jobs.test_reconcile_fleet import without_sweep
from tests.jobs.test_reconcile_pass import (
    chunk,
    configure,
    ids_in,
    one_pass,
    reconcile_rows,
    tenant_figures,
    tombstoning,
)
from tests.support import seed

TENANT = "acme"
REPO = "acme/repo"
MANIFEST = RepoManifest(REPO, ("docs/a.md", "docs/b.md"), updated_at=1_000)

_scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=8))
#: Every JSON type, and the lists Chroma 1.x stores (non-empty, one scalar type).
_values = st.one_of(
    _scalars,
    st.lists(st.one_of(st.integers(), st.floats(), st.text(max_size=4), st.booleans()),
             max_size=3),
    st.lists(st.text(max_size=4), min_size=1, max_size=3),
    st.lists(st.integers(), min_size=1, max_size=3),
    st.dictionaries(st.text(max_size=4), _scalars, max_size=2),
    st.just(REPO), st.just("docs/a.md"), st.just("docs/zzz.md"), st.integers(0, 3),
)
_ABSENT = object()
_fields = st.fixed_dictionaries({
    name: st.one_of(st.just(_ABSENT), _values)
    for name in (TENANT_KEY, REPO_KEY, STAMP_KEY, PATH_KEY, INGESTED_KEY)})


def _real(value: Any) -> bool:
    return (isinstance(value, (int, float)) and not isinstance(value, bool)
            and math.isfinite(value))


def expected_malformed(metadata: dict[str, Any]) -> bool:
    """The CONTRACT's types, written out apart from the code: strings for the repo and the
    path, a real number for the stamp, a real number or a string for `ingestedAt`; absent
    (or None, which Chroma cannot store) is never malformed."""
    def ok(name: str, valid: bool) -> bool:
        return metadata.get(name) is None or valid
    repo, stamp = metadata.get(REPO_KEY), metadata.get(STAMP_KEY)
    path, ingested = metadata.get(PATH_KEY), metadata.get(INGESTED_KEY)
    return not (ok(REPO_KEY, isinstance(repo, str)) and ok(PATH_KEY, isinstance(path, str))
                and ok(STAMP_KEY, _real(stamp))
                and ok(INGESTED_KEY, isinstance(ingested, str) or _real(ingested)))


@settings(max_examples=400, deadline=None, database=None)
@given(rows=st.lists(_fields, max_size=12))
def test_the_pure_scan_survives_and_counts_every_field_type(rows: list[dict[str, Any]]) -> None:
    metadatas = [{k: v for k, v in row.items() if v is not _ABSENT} for row in rows]
    # A fraction of 1 never holds a repo: the verdicts below are the rows' own.
    rules = ScanRules(TENANT, current_version=3, orphan_version_gap=1, manifests={REPO: MANIFEST},
                      manifest_grace_ms=0, read_ms=10_000, max_stale_fraction=1.0)
    tally = TenantTally(rules, cap=5, keep_rows=True)
    tally.add_page([ChromaRow(f"c{i}", m) for i, m in enumerate(metadatas)])
    tally.settle()
    tally.missing_paths()
    ours = [m for m in metadatas if m.get(TENANT_KEY) == TENANT]
    assert tally.malformed_count == sum(expected_malformed(m) for m in ours)
    assert len(tally.malformed) == tally.malformed_count
    by_id = {f"c{i}": m for i, m in enumerate(metadatas)}
    for verdict in tally.rows:
        metadata = by_id[verdict.id]
        # Each malformed field is read as absent, as Chroma's `where` reads it.
        if verdict.orphan:
            assert isinstance(metadata[REPO_KEY], str) and isinstance(metadata[PATH_KEY], str)
        if verdict.stale:
            assert _real(metadata[STAMP_KEY])
        if verdict.actionable and not verdict.held:
            assert _real(metadata[INGESTED_KEY])


@pytest.mark.parametrize("repo_slug", [[REPO, "other"], 7, True])
async def test_a_tenant_with_a_malformed_chunk_still_gets_its_pass_and_counts_it(
    tmp_path: Path, graph: GraphDB, vectors: VectorStore, repo_slug: Any
) -> None:
    stores = tombstoning(tmp_path, graph, vectors, reconciliationManifestGraceMs=0)
    collection = stores.settings.chroma.knowledge_base_collection
    await configure(graph, TENANT, 3)
    await set_tenant_manifest(graph, TENANT, MANIFEST)
    good = [(i, {**m, "repoSlug": REPO}) for i, m in (chunk("s1", TENANT, 1),
                                                      chunk("s2", TENANT, 1))]
    # Current, and an orphan of the manifest if its repo slug were a string: it stays.
    bad = ("bad", {TENANT_KEY: TENANT, REPO_KEY: repo_slug, STAMP_KEY: 3,
                   PATH_KEY: "docs/zzz.md", INGESTED_KEY: 1})
    odd = ("odd", {TENANT_KEY: TENANT, REPO_KEY: REPO, STAMP_KEY: "1",
                   PATH_KEY: "docs/a.md", INGESTED_KEY: True})
    await seed(vectors, collection, [*good, bad, odd])
    figures = await one_pass(stores)
    assert figures["failedTenants"] == 0
    mine = tenant_figures(figures, TENANT)
    assert (mine["staleCount"], mine["tombstonedCount"], mine["malformedCount"]) == (2, 2, 2)
    assert await ids_in(vectors, collection) == {"bad", "odd"}
    [row] = await reconcile_rows(graph)
    assert row["error"] is None and row["detail"]["malformedCount"] == 2


@pytest.mark.parametrize("read", ["sweep", "group reads"])
async def test_the_fleet_paths_survive_a_malformed_chunk_and_count_it(
    tmp_path: Path, graph: GraphDB, vectors: VectorStore, monkeypatch: pytest.MonkeyPatch,
    read: str
) -> None:
    stores = tombstoning(tmp_path, graph, vectors)
    collection = stores.settings.chroma.knowledge_base_collection
    if read == "group reads":
        without_sweep(monkeypatch)
    for tenant in ("t-a", "t-b"):
        await configure(graph, tenant, 3)
    stale_bad = ("t-a-bad", {**chunk("t-a-bad", "t-a", 1)[1], REPO_KEY: ["t-a/repo", "x"]})
    no_tenant = ("stray", {**chunk("stray", "t-a", 1)[1], TENANT_KEY: ["t-a"]})
    await seed(vectors, collection, [chunk("t-a-1", "t-a", 1), chunk("t-a-2", "t-a", 3),
                                     stale_bad, no_tenant, chunk("t-b-1", "t-b", 1),
                                     chunk("t-b-2", "t-b", 3)])
    figures = await one_pass(stores)
    assert figures["failedTenants"] == 0
    t_a = tenant_figures(figures, "t-a")
    # Its repo read as absent, the bad chunk is judged on its stamp alone: stale, deleted.
    assert (t_a["staleCount"], t_a["tombstonedCount"], t_a["malformedCount"]) == (2, 2, 1)
    assert tenant_figures(figures, "t-b")["tombstonedCount"] == 1
    assert await ids_in(vectors, collection) == {"t-a-2", "t-b-2", "stray"}
