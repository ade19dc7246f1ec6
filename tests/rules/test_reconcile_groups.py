"""Which group each tenant is read in (`core.reconcile.rules.reconcile_groups.plan_groups`):
one path for every tenant, a tenant a shared read cannot serve exactly being a group of one."""

from __future__ import annotations

from core.base.rules.tenants import TenantConfig
from core.reconcile.rules.manifests import RepoManifest
from core.reconcile.rules.reconcile import ReconcilePolicy
from core.reconcile.rules.reconcile_groups import (
    TenantGroup,
    group_candidate_where,
    plan_groups,
)

POLICY = ReconcilePolicy(collection="kb", auto_tombstone=True, orphan_version_gap=2,
                         manifest_grace_ms=0, max_deletes_per_tick=100,
                         max_stale_fraction=0.5, dry_run=False)
PARSER = [{"repoSlug": "acme/docs", "parserId": "md", "parserVersion": "2"}]


def test_tenants_a_shared_read_cannot_serve_are_groups_of_one_in_order_before_the_shared() -> None:
    plain = [TenantConfig(f"p{i}", 3, None) for i in range(3)]
    manifest = TenantConfig("m", 3, None)
    generation = TenantConfig("g", 3, None, tenant_repos=PARSER)
    own_gap = TenantConfig("o", 3, None, stored_policy={"orphanVersionGap": 1})
    same_gap = TenantConfig("s", 3, None, stored_policy={"orphanVersionGap": 2})
    invalid = TenantConfig("i", 3, None, stored_policy={"orphanVersionGap": "two"})
    holding = TenantConfig("h", 3, None)
    unversioned = TenantConfig("u", 0, None)
    tenants = [plain[0], manifest, generation, own_gap, plain[1], same_gap, invalid, holding,
               unversioned, plain[2]]
    groups = plan_groups(tenants, POLICY, {"m": {"r": RepoManifest("r", ("a.md",), 1)}},
                         holding={"h"})
    assert groups.alone == (
        TenantGroup(3, (manifest,), whole=True), TenantGroup(3, (generation,), whole=True),
        TenantGroup(3, (own_gap,)), TenantGroup(3, (invalid,)), TenantGroup(3, (holding,)),
        TenantGroup(0, (unversioned,)),
    )
    assert groups.shared == (TenantGroup(3, (plain[0], plain[1], same_gap, plain[2])),)
    assert groups.shared_tenants == [plain[0], plain[1], same_gap, plain[2]]


def test_a_whole_group_reads_every_chunk_of_its_tenant_and_a_shared_one_its_candidates() -> None:
    tenant = TenantConfig("m", 3, None)
    assert TenantGroup(3, (tenant,), whole=True).read_where == {"tenantId": "m"}
    shared = TenantGroup(3, (tenant, TenantConfig("n", 3, None)))
    assert shared.read_where == group_candidate_where(shared) == {
        "$and": [{"tenantId": {"$in": ["m", "n"]}}, {"tenantConfigVersion": {"$lt": 3}}]}


def test_a_failed_shared_read_splits_into_groups_of_one_of_the_same_kind() -> None:
    a, b = TenantConfig("a", 2, None), TenantConfig("b", 2, None)
    assert TenantGroup(2, (a, b)).alone() == [TenantGroup(2, (a,)), TenantGroup(2, (b,))]
