"""The deletion plans of a pass: which reasons to delete apply to a tenant (config-stale,
then each repo's manifest orphans) or to a group of tenants sharing one stamp ceiling, built
as `DeletionPlan`s and handed to the one band runner (`deletion.run_bands`).
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import structlog

from core.reconcile import deletion
from core.reconcile.deletion import (
    DeletionPlan,
    DeletionTarget,
    TenantRule,
    TombstoneProgress,
    run_bands,
)
from core.reconcile.page_loop import until_stopping
from core.reconcile.rules.orphan_bands import orphan_bands, orphan_clauses, orphan_rule
from core.reconcile.rules.reconcile import ReconcilePolicy, actionable_stamp_ceiling
from core.reconcile.rules.reconcile_groups import group_stale_clauses
from core.reconcile.rules.tenant_scan import TenantTally
from core.reconcile.rules.tombstone_bands import (
    Number,
    id_bands,
    legacy_bands,
    legacy_stale_rule,
    stale_rule,
)
from core.reconcile.scopes import GroupRead, TenantScope
from core.reconcile.stores.archives.shared import shared_archives
from core.reconcile.stores.restore_holds import RestoreHolds

if TYPE_CHECKING:
    from core.base.runtime.context import TickContext

log = structlog.get_logger(__name__)


async def tombstone_tenant(scope: TenantScope, tally: TenantTally,
                           progress: TombstoneProgress) -> None:
    """Archive and delete exactly the chunks `explain` marks (`TenantTally.first_to_go`), each
    reason's share as a plan of the one engine. `progress`: what went so far in this pass."""
    context, tenant, rules = scope.context, scope.tenant, scope.rules
    run = functools.partial(run_bands, deletion_target(context, scope.policy),
                            cap=scope.policy.max_deletes_per_tick,
                            progress={tenant.tenant_id: progress}, control=context.control)
    chosen = tally.first_to_go()
    gap = rules.orphan_version_gap
    if chosen.legacy and gap is not None:
        before = progress.tombstoned
        try:
            await run(legacy_plan(scope, actionable_stamp_ceiling(tenant.version, gap),
                                  chosen.legacy))
        finally:
            progress.legacy_tombstoned += progress.tombstoned - before
    if chosen.stale and gap is not None:
        ceiling = actionable_stamp_ceiling(tenant.version, gap)
        await run(stale_plan([scope], ceiling, chosen.stale))
    for slug, oldest in until_stopping(sorted(chosen.orphans.items()), context.control):
        manifest = scope.manifests[slug]
        await run(DeletionPlan(
            "manifest-orphan", orphan_clauses(tenant.tenant_id, manifest),
            {tenant.tenant_id: TenantRule(orphan_rule(tenant.tenant_id, manifest),
                                          rules.read_ms, scope.evidence)},
            orphan_bands(oldest, band_rows=deletion.BAND_ROWS)))
    await _tombstone_generations(scope, tally, chosen.generations, run)


async def _tombstone_generations(scope: TenantScope, tally: TenantTally,
                                 chosen: Mapping[Any, list[tuple[Number, str, str]]],
                                 run: Callable[[DeletionPlan], Awaitable[None]]) -> None:
    """Each generation job (one tier of one old stamp of one repo) with chunks among the first
    to go, as one more plan of the same engine."""
    generations = tally.generations
    if generations is None:
        return
    tenant_id = scope.tenant.tenant_id
    jobs = sorted(chosen.items(), key=lambda job: job[1][0][:2])
    for key, chunks in until_stopping(jobs, scope.context.control):
        await run(DeletionPlan(
            "generation-orphan", generations.clauses(key),
            {tenant_id: TenantRule(generations.may_delete(key), scope.rules.read_ms,
                                   scope.evidence)},
            orphan_bands(chunks, band_rows=deletion.BAND_ROWS)))


def deletion_target(context: TickContext, policy: ReconcilePolicy) -> DeletionTarget:
    """Where this pass deletes from and archives to."""
    return DeletionTarget(context.vectors, policy.collection,
                          context.settings.tombstones_dir, policy.pass_id,
                          shared_archives(context.settings, context.graph),
                          RestoreHolds(context.graph))


def legacy_plan(scope: TenantScope, ceiling: int | float,
                chunks: Sequence[tuple[str, Any]]) -> DeletionPlan:
    """The config-stale plan of a tenant's legacy chunks (`legacy_bands`)."""
    tenant_id = scope.tenant.tenant_id
    return DeletionPlan(
        "stale-legacy", group_stale_clauses([tenant_id], ceiling),
        {tenant_id: TenantRule(legacy_stale_rule(tenant_id, scope.rules.stale_actionable),
                               scope.rules.read_ms, scope.evidence)},
        legacy_bands(chunks, band_rows=deletion.BAND_ROWS))


def stale_plan(scopes: Sequence[TenantScope], ceiling: int | float,
               chunks: Sequence[tuple[Number, str]]) -> DeletionPlan:
    """The config-stale plan of these tenants of one `ceiling`: ids of many tenants may share
    a band."""
    ids = [s.tenant.tenant_id for s in scopes]
    return DeletionPlan(
        "stale", group_stale_clauses(ids, ceiling),
        {s.tenant.tenant_id: TenantRule(stale_rule(s.tenant.tenant_id,
                                                   s.rules.stale_actionable), s.rules.read_ms,
                                        s.evidence)
         for s in scopes},
        id_bands(chunks, band_rows=deletion.BAND_ROWS))


async def tombstone_group(context: TickContext, read: GroupRead, policy: ReconcilePolicy,
                            tenant_ids: list[str],
                            progress: dict[str, TombstoneProgress]) -> bool:
    """Tombstone these tenants (each under the cap) with one plan whose bands serve them all;
    False when they do not share one stamp ceiling or the plan raised: the caller then runs
    each tenant as a plan of its own (the engine's failure policy, `core.reconcile.deletion`)."""
    scopes = [read.scopes[t] for t in tenant_ids]
    ceilings = {actionable_stamp_ceiling(s.tenant.version, s.rules.orphan_version_gap)
                for s in scopes if s.rules.orphan_version_gap is not None}
    if len(ceilings) != 1 or any(s.rules.orphan_version_gap is None for s in scopes):
        return False
    chunks = sorted(c for t in tenant_ids for c in read.tallies[t].first_to_go().stale)
    try:
        await run_bands(deletion_target(context, policy),
                        stale_plan(scopes, ceilings.pop(), chunks), cap=policy.max_deletes_per_tick,
                        progress={t: progress[t] for t in tenant_ids}, control=context.control)
    except Exception as exc:
        log.warning("reconcile.shared_plan_failed", tenants=len(tenant_ids),
                    error=f"{type(exc).__name__}: {exc}",
                    message="tombstoning these tenants one by one instead")
        return False
    return True

