"""Property: whatever the tenants, stamps, `ingestedAt` values, manifests and settings,
reconciliation deletes only what it may (an actionable config-stale chunk or manifest orphan of
a configured tenant), never more than the cap (each chunk counted once), and never anything
that its archive cannot put back exactly.

One embedded Chroma store serves every example (opening one takes seconds); each example gets
its own collection and its own SQLite file, so examples cannot see each other.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from core.base.chroma import Include, VectorStore
from core.base.io.clock import now_ms
from core.base.rules.rows import ChromaRow
from core.base.rules.tenants import TENANT_CONFIG_LABEL
from core.base.runtime.context import TickContext
from core.base.state.graph import upsert_node
from core.base.state.state import open_graph
from core.reconcile.archives.restore import restore_archive
from core.reconcile.rules.manifests import RepoManifest
from core.reconcile.rules.reconcile import stale_fraction_exceeded
from core.reconcile.rules.tombstone_bands import deletion_bound
from core.reconcile.run_pass import reconcile_tick
from core.reconcile.stores.tenant_manifests import set_tenant_manifest
from core.suite.tick import run_tick
from tests.oracles import diff_tenant_chunks, diff_tenant_manifest
from tests.support import make_settings, read_archived_chunks, seed

FULL: tuple[Include, ...] = ("metadatas", "documents", "embeddings")
MISSING = object()
TENANTS = ("acme", "beta", "gamma")
#: Chunks of a tenant with no config node, and chunks with no tenant at all: never deleted.
STRAY_TENANT = "stray"
_example_numbers = itertools.count()

stamps = st.one_of(
    st.just(MISSING),
    st.integers(min_value=-1, max_value=7),
    st.floats(min_value=0, max_value=7, allow_nan=False, allow_infinity=False),
    st.text(max_size=2),
    st.booleans(),
)
#: `ingestedAt` as other programs may have left it: epoch ms (few distinct values, so equal
#: values and capped bands are common), fractional, missing, text, a flag, the far future.
ingested = st.one_of(
    st.integers(min_value=0, max_value=5),
    st.floats(min_value=0, max_value=5, allow_nan=False, allow_infinity=False),
    st.just(MISSING),
    st.just("2024-01-01"),
    st.booleans(),
    st.just(10**15),
)
PATHS = ("a.md", "b.md", "c.md")
paths = st.one_of(st.sampled_from(PATHS), st.just(""), st.just(MISSING))
repos = st.sampled_from(("r", "r", "other"))
#: A tenant's manifest of repo `r`: its paths and `updatedAt` (None: no manifest).
manifests = st.none() | st.tuples(st.frozensets(st.sampled_from(PATHS), min_size=1),
                                  st.integers(min_value=0, max_value=5)
                                  | st.floats(min_value=0, max_value=5))


@dataclass(frozen=True)
class Scenario:
    """Tenants (version 0 = no config node), their chunks' stamps, and the settings."""

    versions: dict[str, int]
    #: (id, owner, stamp, ingestedAt, sourcePath, repoSlug)
    chunks: list[tuple[str, str | None, Any, Any, Any, str]]
    manifests: dict[str, tuple[frozenset[str], float]]
    auto_tombstone: bool
    gap: float
    cap: int
    max_fraction: float
    passes: int


@st.composite
def scenarios(draw: st.DrawFn) -> Scenario:
    versions = {t: draw(st.integers(min_value=0, max_value=5)) for t in TENANTS}
    chunks: list[tuple[str, str | None, Any, Any, Any, str]] = []
    for owner in (*TENANTS, STRAY_TENANT, None):
        rows = draw(st.lists(st.tuples(stamps, ingested, paths, repos), max_size=12))
        for i, (stamp, when, path, repo) in enumerate(rows):
            chunks.append((f"{owner or 'none'}-{i}", owner, stamp, when, path, repo))
    drawn = {t: draw(manifests) for t in (*TENANTS, STRAY_TENANT)}
    return Scenario(
        versions=versions,
        chunks=chunks,
        manifests={t: m for t, m in drawn.items() if m is not None},
        auto_tombstone=draw(st.booleans() | st.just(True)),
        gap=draw(st.one_of(st.integers(min_value=1, max_value=4),
                           st.floats(min_value=1, max_value=4))),
        cap=draw(st.integers(min_value=0, max_value=8)),
        max_fraction=draw(st.floats(min_value=0.05, max_value=1.0)),
        passes=draw(st.integers(min_value=1, max_value=2)),
    )


def _metadata(owner: str | None, stamp: Any, when: Any, path: Any, repo: str
              ) -> dict[str, Any]:
    metadata: dict[str, Any] = {"repoSlug": repo}
    if path is not MISSING:
        metadata["sourcePath"] = path
    if owner is not None:
        metadata["tenantId"] = owner
    if stamp is not MISSING:
        metadata["tenantConfigVersion"] = stamp
    if when is not MISSING:
        metadata["ingestedAt"] = when
    return metadata


def _deletable(row: ChromaRow, *, stale: bool) -> bool:
    """A path can take it: a band holds a numeric `ingestedAt` that is not after the pass's
    read; a config-stale chunk without a numeric `ingestedAt` (none, or a string) goes by id
    (CONTRACT "Tombstones": deletable too, by a path just as race-safe)."""
    if deletion_bound(row.metadata, read_ms=now_ms()) is not None:
        return True
    when = row.metadata.get("ingestedAt")
    return stale and (when is None or isinstance(when, str))


def _same_metadata_value(a: Any, b: Any) -> bool:
    """Equal, or for floats equal to the last bits: Chroma 1.5.9 does not give back every float
    metadata value it is given exactly (measured: writing 4.0959234074972716e-210 reads back
    4.095923407497272e-210; 6-30% of random doubles differ in their last bit), so a restored
    chunk holds the value as Chroma keeps it, which the archive cannot change."""
    if isinstance(a, float) and isinstance(b, float):
        return math.isclose(a, b, rel_tol=1e-15, abs_tol=0.0)
    return bool(a == b) and type(a) is type(b)


def _same_row(a: ChromaRow, b: ChromaRow) -> bool:
    """The same chunk: id, document and embedding exactly, metadata as Chroma keeps it."""
    return ((a.id, a.document, a.embedding) == (b.id, b.document, b.embedding)
            and a.metadata.keys() == b.metadata.keys()
            and all(_same_metadata_value(a.metadata[k], b.metadata[k]) for k in a.metadata))


def _manifest_of(tenant: str, scenario: Scenario) -> dict[str, RepoManifest]:
    if tenant not in scenario.manifests:
        return {}
    claimed, updated_at = scenario.manifests[tenant]
    return {"r": RepoManifest("r", tuple(sorted(claimed)), updated_at)}


def _stale(rows: list[ChromaRow], tenant: str, scenario: Scenario) -> set[str]:
    """The tenant's actionable config-stale chunks, from the original's diff."""
    return set(diff_tenant_chunks(rows, scenario.versions[tenant], scenario.gap).actionable_ids)


def _actionable(rows: list[ChromaRow], tenant: str, scenario: Scenario) -> set[str]:
    """The union of the tenant's actionable config-stale chunks and manifest orphans (the
    grace is 0 and every manifest is older than the pass), from the original's two diffs."""
    orphans = diff_tenant_manifest(rows, _manifest_of(tenant, scenario))
    return _stale(rows, tenant, scenario) | set(orphans.actionable_ids)


def _may_be_deleted(row: ChromaRow, scenario: Scenario) -> bool:
    """The invariant: only a configured tenant's chunk that is actionable (a real numeric,
    actionable stamp, or an orphan of its repo's manifest) that a path can take
    (`_deletable`)."""
    tenant = row.metadata.get("tenantId")
    version = scenario.versions.get(tenant) if isinstance(tenant, str) else None
    if not version:
        return False
    assert isinstance(tenant, str)
    stale = row.id in _stale([row], tenant, scenario)
    return _deletable(row, stale=stale) and row.id in _actionable([row], tenant, scenario)


def _expected_first_pass(tenant: str, scenario: Scenario, rows: list[ChromaRow]) -> int:
    """What the first pass must tombstone for `tenant`, worked out from the scenario alone."""
    own = [r for r in rows if r.metadata.get("tenantId") == tenant]
    actionable = _actionable(own, tenant, scenario)
    if not scenario.auto_tombstone or stale_fraction_exceeded(
        actionable=len(actionable), total=len(own), max_fraction=scenario.max_fraction
    ):
        return 0
    stale = _stale(own, tenant, scenario)
    deletable = [r for r in own if r.id in actionable and _deletable(r, stale=r.id in stale)]
    return min(scenario.cap, len(deletable))


@settings(max_examples=15, deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(scenario=scenarios())
@example(scenario=Scenario(  # a tiny float ingestedAt Chroma gives back off in its last bit
    versions={"acme": 1, "beta": 0, "gamma": 0},
    chunks=[("acme-0", "acme", MISSING, "2024-01-01", "", "r"),
            ("acme-1", "acme", MISSING, MISSING, MISSING, "r"),
            ("acme-2", "acme", 0, 1.053665363621794e-268, "", "r")],
    manifests={}, auto_tombstone=True, gap=1, cap=1, max_fraction=1.0, passes=1))
async def test_only_actionable_chunks_of_configured_tenants_go_within_the_cap_and_restorably(
    tmp_path: Path, vectors: VectorStore, scenario: Scenario
) -> None:
    number = next(_example_numbers)
    collection = f"kb-property-{number}"
    settings_ = make_settings(
        tmp_path,
        graphDbPath=str(tmp_path / f"graph-{number}.sqlite"),
        knowledgeBaseCollection=collection,
        reconciliationEnabled=True,
        reconciliationAutoTombstone=scenario.auto_tombstone,
        reconciliationOrphanVersionGap=scenario.gap,
        reconciliationMaxDeletesPerTick=scenario.cap,
        reconciliationMaxStaleFraction=scenario.max_fraction,
        reconciliationManifestGraceMs=0,
    )
    graph = await open_graph(settings_.state)
    try:
        for tenant, version in scenario.versions.items():
            if version:
                await upsert_node(graph, f"kb-config:{tenant}", TENANT_CONFIG_LABEL,
                                        {"version": version})
        for tenant in scenario.manifests:
            for manifest in _manifest_of(tenant, scenario).values():
                await set_tenant_manifest(graph, tenant, manifest)
        await vectors.ensure_collection(collection)
        if scenario.chunks:
            await seed(vectors, collection, [(i, _metadata(owner, *rest))
                                             for i, owner, *rest in scenario.chunks])
        all_ids = [i for i, *_ in scenario.chunks]
        before = {r.id: r for r in await vectors.get_by_ids(collection, all_ids, include=FULL)}

        stores = TickContext(settings_, graph, vectors)
        archives: list[str] = []
        for pass_number in range(scenario.passes):
            figures = (await run_tick("reconcile", stores, reconcile_tick, dry_run=False)).json()
            archives.extend(figures["archives"])
            assert figures["failedTenants"] == 0
            for entry in figures["tenants"]:
                assert entry["tombstonedCount"] <= scenario.cap
                if entry["guard"] is not None or not scenario.auto_tombstone:
                    assert entry["tombstonedCount"] == 0
                if pass_number == 0:
                    assert entry["tombstonedCount"] == _expected_first_pass(
                        entry["tenantId"], scenario, list(before.values())
                    )

        remaining = {r.id for r in await vectors.get_by_ids(collection, all_ids, include=())}
        deleted = set(before) - remaining
        assert all(_may_be_deleted(before[i], scenario) for i in deleted), deleted

        archived: set[str] = set()
        for archive in archives:
            result = await restore_archive(vectors, Path(archive), collection=collection)
            assert result.clean, result
            archived |= {c.row.id for _, c in read_archived_chunks(Path(archive))}
        # Every deleted chunk is archived; a capped band may archive chunks the cap kept.
        assert deleted <= archived
        assert archived - deleted <= remaining
        after = {r.id: r for r in await vectors.get_by_ids(collection, all_ids, include=FULL)}
        assert after.keys() == before.keys()
        assert all(_same_row(after[i], before[i]) for i in after), [
            (after[i], before[i]) for i in after if not _same_row(after[i], before[i])]
    finally:
        await graph.close()
