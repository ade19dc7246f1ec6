"""What a tenant's read, guards and deletion plans share, apart from the steps that use it:
a tenant's scope (`TenantScope`: the stores, the tenant, the policy in force, the rules fixed
when its read began) and what a group's read found (`GroupRead`: a scope, an outcome and a
tally per tenant). The group's path (`one_group`), the tenant's steps (`tenant_steps`) and the
deletion plans (`deletion_plans`) all import these, so none of them needs another to name them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import structlog

from core.base.io.clock import now_ms
from core.base.rules.rows import ChromaRow
from core.base.rules.telemetry import smallest_repo
from core.base.rules.tenants import TenantConfig
from core.reconcile.rules.generations.orphans import declared_repo_slugs, tenant_generation_rules
from core.reconcile.rules.manifests import RepoManifest
from core.reconcile.rules.reconcile import ReconcilePolicy
from core.reconcile.rules.reconcile_groups import TenantGroup
from core.reconcile.rules.reconcile_outcome import TenantOutcome
from core.reconcile.rules.restore_holds import (
    HoldEvidence,
    RestoreHold,
    holds_in_force,
    tenant_evidence,
)
from core.reconcile.rules.scan_verdicts import ScanRules
from core.reconcile.rules.tenant_policy import TenantPolicy, resolve_policy
from core.reconcile.rules.tenant_scan import TenantTally

if TYPE_CHECKING:
    from core.base.runtime.context import TickContext

log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class TenantScope:
    """What one tenant's scan and tombstoning share: the stores, the tenant, the pass's and the
    tenant's policy, its manifests, and the rules fixed when the pass started reading it
    (epoch ms; no chunk ingested later is deleted)."""

    context: TickContext
    tenant: TenantConfig
    policy: ReconcilePolicy
    tenant_policy: TenantPolicy
    manifests: Mapping[str, RepoManifest]
    rules: ScanRules
    explain: bool
    #: The evidence its chunks are judged by, that a restore's hold is judged against
    #: (`core.reconcile.rules.restore_holds`).
    evidence: HoldEvidence

    @classmethod
    def of(cls, context: TickContext, tenant: TenantConfig, policy: ReconcilePolicy,
           manifests: Mapping[str, RepoManifest], *, explain: bool) -> TenantScope:
        """The tenant's scope, its policy resolved now (an invalid stored value warned)."""
        tenant_policy = resolve_policy(tenant.stored_policy, policy)
        if tenant_policy.invalid_keys:
            log.warning("reconcile.tenant_policy_invalid", keys=list(tenant_policy.invalid_keys),
                        message="an invalid per-tenant policy value fails closed: nothing is "
                        "actionable by what it governs until it is fixed (tenants set-policy)")
        rules = ScanRules(tenant.tenant_id, tenant.version, tenant_policy.gap, manifests,
                          tenant_policy.grace_ms, read_ms=now_ms(),
                          max_stale_fraction=policy.max_stale_fraction,
                          generation_rules=tenant_generation_rules(tenant.tenant_repos, manifests))
        return cls(context, tenant, policy, tenant_policy, manifests, rules, explain,
                   tenant_evidence(tenant.version, manifests))

    @property
    def deletes(self) -> bool:
        """Whether this tenant's pass may delete."""
        return (self.policy.deletes_allowed and self.tenant_policy.deletes
                and not self.explain)

    @property
    def cap(self) -> int:
        """How many chunks the scan keeps for bands: the cap when the pass deletes, or explains
        (to mark what a pass would delete first); none otherwise."""
        return self.policy.max_deletes_per_tick if self.deletes or self.explain else 0

    def outcome(self) -> TenantOutcome:
        """The tenant's outcome before its read: the policy in force (so telemetry names it)."""
        tenant, policy = self.tenant, self.tenant_policy
        return TenantOutcome(
            tenant.tenant_id, tenant.repo_slug, tenant.version,
            orphan_version_gap=policy.gap, manifest_grace_ms=policy.grace_ms,
            auto_tombstone=policy.deletes, invalid_policy=policy.invalid_keys,
            declared_repo=smallest_repo(
                (*declared_repo_slugs(tenant.tenant_repos), *self.manifests)))


@dataclass(slots=True)
class GroupRead:
    """What the read of a group of tenants found, per tenant: its scope, its outcome before
    its steps (a failed read's failure in it), its tally, its chunk count when the read
    counted it, and its restore holds that lapsed; and whether the collection was missing
    (nothing of any tenant to reconcile)."""

    scopes: dict[str, TenantScope]
    outcomes: dict[str, TenantOutcome]
    tallies: dict[str, TenantTally]
    counts: dict[str, int] = field(default_factory=dict)
    lapsed: dict[str, tuple[RestoreHold, ...]] = field(default_factory=dict)
    collection_missing: bool = False

    @classmethod
    def empty(cls, context: TickContext, tenants: Sequence[TenantConfig],
              policy: ReconcilePolicy, *,
              manifests: Mapping[str, Mapping[str, RepoManifest]] | None = None,
              holds: Mapping[str, Sequence[RestoreHold]] | None = None,
              explain: bool = False) -> GroupRead:
        """Nothing read yet: each tenant's read time is now, its policy resolved, its restore
        holds judged against its evidence (those in force keep their chunks out of the
        selection; the lapsed ones are kept for the pass to remove)."""
        read = cls({}, {}, {})
        for tenant in tenants:
            tenant_id = tenant.tenant_id
            scope = TenantScope.of(context, tenant, policy, (manifests or {}).get(tenant_id, {}),
                                   explain=explain)
            held, lapsed = holds_in_force((holds or {}).get(tenant_id, ()), scope.evidence)
            read.scopes[tenant_id], read.outcomes[tenant_id] = scope, scope.outcome()
            read.tallies[tenant_id] = TenantTally(scope.rules, cap=scope.cap, keep_rows=explain,
                                                  restore_held=held)
            if lapsed:
                read.lapsed[tenant_id] = tuple(lapsed)
        return read

    def tally(self, tenant_id: str, rows: list[ChromaRow]) -> None:
        """Add a page's candidate rows of one tenant."""
        self.tallies[tenant_id].add_page(rows)

    def only(self, group: TenantGroup) -> GroupRead:
        """The part of a sweep's read that is this group's."""
        ids = group.tenant_ids
        return GroupRead({t: self.scopes[t] for t in ids}, {t: self.outcomes[t] for t in ids},
                         {t: self.tallies[t] for t in ids},
                         {t: self.counts[t] for t in ids if t in self.counts},
                         {t: self.lapsed[t] for t in ids if t in self.lapsed},
                         self.collection_missing)
