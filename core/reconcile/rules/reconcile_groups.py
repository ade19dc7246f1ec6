"""How a pass groups tenants so that one Chroma query serves many of them (pure).

A tenant a shared read cannot serve exactly is a group of one (glossary: group); the others
share a group per current version, read by one candidate query or, when they are small, by one
sweep of the whole collection (candidates and guard counts at once): at fleet scale a pass
costs what its round trips cost (docs/performance.md). Each page is split back by `tenantId`,
and every decision stays per tenant.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from core.base.rules.numbers import is_real_number
from core.base.rules.rows import ChromaRow, ColumnPage
from core.base.rules.tenants import TenantConfig
from core.reconcile.rules.generations.orphans import declares_generations
from core.reconcile.rules.manifests import RepoManifest
from core.reconcile.rules.reconcile import STAMP_KEY, TENANT_KEY, ReconcilePolicy
from core.reconcile.rules.reconcile_outcome import ScanFigures
from core.reconcile.rules.tenant_policy import TenantPolicy, resolve_policy
from core.reconcile.rules.tombstone_bands import Band, Number, predicate_where

#: A pass sweeps the whole collection when its tenants average at most this many chunks
#: (docs/performance.md, "Shared bands at fleet scale").
SWEEP_MAX_CHUNKS_PER_TENANT: Final = 500
#: Tenants per `tenantId $in [...]` list: well inside SQLite's 32,766 variables, which Chroma
#: hits between 10,000 and 50,000 values (tests/jobs/test_reconcile_fleet.py).
TENANTS_PER_WHERE: Final = 5_000


@dataclass(frozen=True, slots=True)
class TenantGroup:
    """Tenants that share one current version, so one candidate `where` serves them all; or
    one tenant read alone, every chunk of it when `whole`."""

    version: int
    tenants: tuple[TenantConfig, ...]
    whole: bool = False

    @property
    def tenant_ids(self) -> list[str]:
        """The group's tenant ids, in the group's order."""
        return [t.tenant_id for t in self.tenants]

    @property
    def read_where(self) -> dict[str, Any]:
        """The `where` of the group's read."""
        if self.whole:
            return tenants_where(self.tenant_ids)
        return group_candidate_where(self)

    def alone(self) -> list[TenantGroup]:
        """Each of the group's tenants as a group of one (read on its own)."""
        return [TenantGroup(self.version, (tenant,), self.whole) for tenant in self.tenants]


@dataclass(frozen=True, slots=True)
class PassGroups:
    """A pass's tenants as the groups it reads, in order: the tenants read alone, then the
    shared groups (which one sweep may serve: `sweep_pays`)."""

    alone: tuple[TenantGroup, ...]
    shared: tuple[TenantGroup, ...]

    @property
    def shared_tenants(self) -> list[TenantConfig]:
        """The shared groups' tenants, in their order."""
        return [tenant for group in self.shared for tenant in group.tenants]


def plan_groups(
    tenants: Sequence[TenantConfig], policy: ReconcilePolicy,
    manifests: Mapping[str, Mapping[str, RepoManifest]], holding: Collection[str], *,
    per_where: int = TENANTS_PER_WHERE,
) -> PassGroups:
    """Every tenant's group: alone, each tenant `shares_reads` refuses and each `holding`
    restore holds; the others by version."""
    default = resolve_policy(None, policy)
    shared = [t for t in tenants if t.tenant_id not in holding
              and shares_reads(t, policy, default, manifests.get(t.tenant_id, {}))]
    shared_ids = {t.tenant_id for t in shared}
    alone = tuple(
        TenantGroup(t.version, (t,), reads_whole(t, manifests.get(t.tenant_id, {})))
        for t in tenants if t.tenant_id not in shared_ids)
    return PassGroups(alone, tuple(group_tenants(shared, per_where=per_where)))


def reads_whole(tenant: TenantConfig, manifests: Mapping[str, RepoManifest]) -> bool:
    """Whether the tenant's read takes every chunk, not only candidates: manifests and
    generations judge chunks at any stamp."""
    return bool(manifests) or declares_generations(tenant.tenant_repos)


def shares_reads(tenant: TenantConfig, policy: ReconcilePolicy, default: TenantPolicy,
                 manifests: Mapping[str, RepoManifest]) -> bool:
    """Whether a shared group serves this tenant exactly: a valid version, candidates only and
    the pass's policy in force (`default`, resolved once). When in doubt, alone: a group of one
    is the reference a shared group must equal."""
    if tenant.version < 1 or reads_whole(tenant, manifests):
        return False
    own = default if tenant.stored_policy is None else resolve_policy(tenant.stored_policy, policy)
    return not own.invalid_keys and (own.gap, own.grace_ms, own.deletes) == (
        default.gap, default.grace_ms, default.deletes)


def group_tenants(
    tenants: Iterable[TenantConfig], *, per_where: int = TENANTS_PER_WHERE
) -> list[TenantGroup]:
    """Tenants with a valid version grouped by version, at most `per_where` a group, in the
    order given; a tenant id listed twice is kept once (one outcome per tenant)."""
    by_version: dict[int, list[TenantConfig]] = {}
    seen: set[str] = set()
    for tenant in tenants:
        if tenant.version < 1 or tenant.tenant_id in seen:
            continue
        seen.add(tenant.tenant_id)
        by_version.setdefault(tenant.version, []).append(tenant)
    return [TenantGroup(version, tuple(members[i:i + per_where]))
            for version, members in by_version.items()
            for i in range(0, len(members), per_where)]


def tenants_where(tenant_ids: Sequence[str]) -> dict[str, Any]:
    """`where` for every chunk of these tenants (`$in`, or equality for one)."""
    if len(tenant_ids) == 1:
        return {TENANT_KEY: tenant_ids[0]}
    return {TENANT_KEY: {"$in": list(tenant_ids)}}


def group_candidate_where(group: TenantGroup) -> dict[str, Any]:
    """`where` for the group's possibly stale chunks (`candidate_where` for many tenants)."""
    return {"$and": [tenants_where(group.tenant_ids), {STAMP_KEY: {"$lt": group.version}}]}


def sweep_pays(*, tenants: int, chunks: int) -> bool:
    """Whether one sweep of the whole collection is the cheaper read for these tenants."""
    return tenants > 1 and chunks <= tenants * SWEEP_MAX_CHUNKS_PER_TENANT


def sweep_page(page: ColumnPage, versions: Mapping[str, int]
               ) -> tuple[Counter[str], dict[str, list[ChromaRow]]]:
    """A sweep's page, for the tenants at these current versions: each one's row count and the
    candidate rows its `where` would return (Chroma's `$lt` matches numbers only)."""
    counts: Counter[str] = Counter()
    candidates: dict[str, list[ChromaRow]] = {}
    for row_id, metadata in zip(page.ids, page.metadatas, strict=True):
        tenant_id = metadata.get(TENANT_KEY) if metadata else None
        if not isinstance(tenant_id, str) or (version := versions.get(tenant_id)) is None:
            continue
        counts[tenant_id] += 1
        stamp = metadata.get(STAMP_KEY)
        if is_real_number(stamp) and stamp < version:
            candidates.setdefault(tenant_id, []).append(ChromaRow(row_id, dict(metadata)))
    return counts, candidates


def group_stale_clauses(tenant_ids: Sequence[str], ceiling: Number) -> tuple[dict[str, Any], ...]:
    """`tombstone_bands.stale_clauses` for several tenants of one stamp ceiling."""
    return (tenants_where(tenant_ids), {STAMP_KEY: {"$lte": ceiling}})


def group_band_where(tenant_ids: Sequence[str], ceiling: Number, band: Band) -> dict[str, Any]:
    """`tombstone_bands.band_where` for several tenants of one ceiling."""
    return predicate_where(group_stale_clauses(tenant_ids, ceiling), band)


def split_page(page: ColumnPage) -> dict[str | None, ColumnPage]:
    """A page of whole rows split by `tenantId`; rows without a string one go under None."""
    index: dict[str | None, list[int]] = {}
    for i, metadata in enumerate(page.metadatas):
        tenant_id = metadata.get(TENANT_KEY)
        index.setdefault(tenant_id if type(tenant_id) is str else None, []).append(i)
    return {tenant: ColumnPage(
        [page.ids[i] for i in rows], [page.metadatas[i] for i in rows],
        [page.documents[i] for i in rows],
        page.embeddings[rows] if page.embeddings is not None else None)
        for tenant, rows in index.items()}


def within_cap(scan: ScanFigures, policy: ReconcilePolicy) -> bool:
    """Whether every chunk the tenant's scan found deletable fits under the delete cap (its
    bands can then be shared)."""
    return scan.actionable_count - scan.held_count <= policy.max_deletes_per_tick


def rows_by_tenant(rows: Iterable[ChromaRow]) -> dict[str, list[ChromaRow]]:
    """Rows split by `tenantId` (those without a string one dropped)."""
    split: dict[str, list[ChromaRow]] = {}
    for row in rows:
        tenant_id = row.metadata.get(TENANT_KEY)
        if isinstance(tenant_id, str):
            split.setdefault(tenant_id, []).append(row)
    return split



def only_rows(page: ColumnPage, keep: set[str]) -> ColumnPage:
    """The rows of `page` whose ids are in `keep`."""
    if len(keep) == len(page):
        return page
    index = [i for i, row_id in enumerate(page.ids) if row_id in keep]
    embeddings = page.embeddings[index] if page.embeddings is not None and index else None
    return ColumnPage([page.ids[i] for i in index], [page.metadatas[i] for i in index],
                      [page.documents[i] for i in index], embeddings)
