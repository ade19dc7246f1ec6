"""Property: whatever the tenants, stamps, `ingestedAt` values and settings, reconciliation
deletes only what it may, never more than the cap, and never anything that its archive cannot
put back exactly.

One embedded Chroma store serves every example (opening one takes seconds); each example gets
its own collection and its own SQLite file, so examples cannot see each other.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from core.jobs.context import TickContext
from core.jobs.reconcile import reconcile_tick
from core.jobs.restore import restore_archive
from core.rules.reconcile import diff_tenant_chunks, stale_fraction_exceeded
from core.rules.rows import ChromaRow
from core.rules.tenants import TENANT_CONFIG_LABEL
from core.rules.tombstone_bands import deletion_bound
from core.rules.values import is_real_number
from core.runtime.tick import run_tick
from core.stores.chroma import Include, VectorStore
from core.stores.clock import now_ms
from core.stores.graph import upsert_node
from core.stores.sqlite import GraphDB
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


@dataclass(frozen=True)
class Scenario:
    """Tenants (version 0 = no config node), their chunks' stamps, and the settings."""

    versions: dict[str, int]
    chunks: list[tuple[str, str | None, Any, Any]]
    auto_tombstone: bool
    gap: float
    cap: int
    max_fraction: float
    passes: int


@st.composite
def scenarios(draw: st.DrawFn) -> Scenario:
    versions = {t: draw(st.integers(min_value=0, max_value=5)) for t in TENANTS}
    chunks: list[tuple[str, str | None, Any, Any]] = []
    for owner in (*TENANTS, STRAY_TENANT, None):
        for i, (stamp, when) in enumerate(draw(st.lists(st.tuples(stamps, ingested),
                                                         max_size=12))):
            chunks.append((f"{owner or 'none'}-{i}", owner, stamp, when))
    return Scenario(
        versions=versions,
        chunks=chunks,
        auto_tombstone=draw(st.booleans() | st.just(True)),
        gap=draw(st.one_of(st.integers(min_value=1, max_value=4),
                           st.floats(min_value=1, max_value=4))),
        cap=draw(st.integers(min_value=0, max_value=8)),
        max_fraction=draw(st.floats(min_value=0.05, max_value=1.0)),
        passes=draw(st.integers(min_value=1, max_value=2)),
    )


def _metadata(owner: str | None, stamp: Any, when: Any) -> dict[str, Any]:
    metadata: dict[str, Any] = {"sourcePath": "docs/x.md"}
    if owner is not None:
        metadata["tenantId"] = owner
    if stamp is not MISSING:
        metadata["tenantConfigVersion"] = stamp
    if when is not MISSING:
        metadata["ingestedAt"] = when
    return metadata


def _deletable(row: ChromaRow) -> bool:
    """A band can hold it: a numeric `ingestedAt` that is not after the pass's read."""
    return deletion_bound(row.metadata, read_ms=now_ms()) is not None


def _may_be_deleted(row: ChromaRow, scenario: Scenario) -> bool:
    """The invariant: only a configured tenant's chunk with a real numeric, actionable stamp."""
    tenant = row.metadata.get("tenantId")
    version = scenario.versions.get(tenant) if isinstance(tenant, str) else None
    if not version:
        return False
    if not is_real_number(row.metadata.get("tenantConfigVersion")) or not _deletable(row):
        return False
    return diff_tenant_chunks([row], version, scenario.gap).actionable_count == 1


def _expected_first_pass(tenant: str, scenario: Scenario, rows: list[ChromaRow]) -> int:
    """What the first pass must tombstone for `tenant`, worked out from the scenario alone."""
    own = [r for r in rows if r.metadata.get("tenantId") == tenant]
    diff = diff_tenant_chunks(own, scenario.versions[tenant], scenario.gap)
    if not scenario.auto_tombstone or stale_fraction_exceeded(
        actionable=diff.actionable_count, total=len(own), max_fraction=scenario.max_fraction
    ):
        return 0
    deletable = [r for r in own if r.id in set(diff.actionable_ids) and _deletable(r)]
    return min(scenario.cap, len(deletable))


@settings(max_examples=15, deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(scenario=scenarios())
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
    )
    graph = await GraphDB.open(settings_.graph_db_path)
    try:
        for tenant, version in scenario.versions.items():
            if version:
                await upsert_node(graph, f"kb-config:{tenant}", TENANT_CONFIG_LABEL,
                                        {"version": version})
        await vectors.ensure_collection(collection)
        if scenario.chunks:
            await seed(vectors, collection, [(i, _metadata(owner, stamp, when))
                                             for i, owner, stamp, when in scenario.chunks])
        all_ids = [i for i, _, _, _ in scenario.chunks]
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
        assert after == before
    finally:
        await graph.close()
