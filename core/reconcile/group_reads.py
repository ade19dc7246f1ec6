"""Tenants reconciled by groups: one read serves a whole group (one sweep of the collection
when its tenants are small, else one candidate read per version group: `page_loop`), then
every tenant is guarded on its own and the group's cleared tenants share one deletion plan.
A group read that fails falls back to one read per tenant.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import structlog

from core.base.chroma import CollectionMissing
from core.base.rules.tenants import TenantConfig
from core.reconcile.deletion import TombstoneProgress
from core.reconcile.deletion_plans import tombstone_group, tombstone_tenant
from core.reconcile.one_tenant import (
    guard_tenant,
    log_outcome,
    reconcile_tenant,
    run_isolated,
    settle_outcome,
)
from core.reconcile.page_loop import scan_group, sweep_collection, until_stopping
from core.reconcile.recording import TelemetryRecorder
from core.reconcile.rules.reconcile import ReconcilePolicy
from core.reconcile.rules.reconcile_groups import (
    TenantGroup,
    group_tenants,
    sweep_pays,
    within_cap,
)
from core.reconcile.rules.reconcile_outcome import Phase, TenantOutcome
from core.reconcile.scopes import GroupRead

if TYPE_CHECKING:
    from core.base.runtime.context import TickContext

log = structlog.get_logger(__name__)


async def reconcile_by_groups(context: TickContext, tenants: Sequence[TenantConfig],
                     policy: ReconcilePolicy, recorder: TelemetryRecorder) -> list[TenantOutcome]:
    """The grouped tenants' outcomes, group by group (one sweep of the whole collection when
    it pays, else one candidate read per group; a failed group read falls back to one read
    per tenant), each group's telemetry recorded before the next; fewer when stopping."""
    outcomes: list[TenantOutcome] = []
    swept = await read_sweep(context, tenants, policy)
    for group in until_stopping(group_tenants(tenants), context.control):
        read = swept.only(group) if swept else await read_group(context, group, policy)
        done = (await finish_group(context, read, policy) if read is not None
                else await reconcile_one_by_one(context, group, policy))
        if not policy.dry_run:
            await recorder.record(done, policy)
        outcomes.extend(done)
        context.control.progress()
    return outcomes




async def read_sweep(context: TickContext, tenants: Sequence[TenantConfig],
                      policy: ReconcilePolicy) -> GroupRead | None:
    """All tenants from ONE paged read of the whole collection, when their chunks are few
    enough that it costs less than a read per group (`sweep_pays`): candidates and counts
    alike. None when it does not pay or fails (the groups then read on their own)."""
    try:
        chunks = await context.vectors.count(policy.collection)
        if not sweep_pays(tenants=len(tenants), chunks=chunks):
            return None
        read = GroupRead.empty(context, tenants, policy)
        read.counts = dict(await sweep_collection(
            context.vectors, policy.collection, {t.tenant_id: t.version for t in tenants},
            on_rows=read.tally, control=context.control))
    except CollectionMissing:
        return None
    except Exception:
        log.warning("reconcile.sweep_failed", tenants=len(tenants), exc_info=True,
                    message="reading the tenants by groups instead")
        return None
    return read


async def read_group(context: TickContext, group: TenantGroup,
                      policy: ReconcilePolicy) -> GroupRead | None:
    """One group: one candidate read for all its tenants (each tenant the guard needs counted
    then counts itself, stopping as soon as the guard's answer cannot change: for tenants of
    1,000 chunks or more that is cheaper than one read of all their chunks, measured). None
    when the candidate read fails (the tenants then read one by one)."""
    read = GroupRead.empty(context, group.tenants, policy)
    try:
        await scan_group(context.vectors, policy.collection, group, on_rows=read.tally,
                         control=context.control)
    except CollectionMissing:
        log.warning("reconcile.no_collection", collection=policy.collection)
        return read
    except Exception:
        log.warning("reconcile.group_read_failed", tenants=len(group.tenants), exc_info=True,
                    message="reading these tenants one by one instead")
        return None
    return read


async def finish_group(context: TickContext, read: GroupRead,
                        policy: ReconcilePolicy) -> list[TenantOutcome]:
    """Guard each tenant of a read group on its own; tombstone those cleared and under the cap
    with shared bands, the others on their own. The outcomes of the tenants done, in the
    group's order (fewer when the daemon is stopping)."""
    done: list[TenantOutcome] = []
    shared: list[str] = []
    alone: list[str] = []
    for tenant_id, outcome in until_stopping(read.outcomes.items(), context.control):
        await run_isolated(outcome, policy, guard_read_tenant(read, tenant_id))
        done.append(outcome)
        if outcome.phase == Phase.TOMBSTONE and not outcome.failed:
            # A shared plan deletes config-stale chunks only: a tenant whose selection holds
            # any other reason's (legacy ones included) runs its own plans (`tombstone_tenant`).
            chosen = read.tallies[tenant_id].first_to_go()
            sharable = (within_cap(outcome, policy) and len(chosen.stale) == len(chosen.order))
            (shared if sharable else alone).append(tenant_id)
    if len(shared) < 2:
        shared, alone = [], alone + shared
    progress = {tenant_id: TombstoneProgress() for tenant_id in shared + alone}
    if shared and not await tombstone_group(context, read, policy, shared, progress):
        alone += shared
    finished: set[str] = set()
    for tenant_id in until_stopping(alone, context.control):
        outcome = read.outcomes[tenant_id]
        await run_isolated(outcome, policy, tombstone_tenant(
            read.scopes[tenant_id], outcome, read.tallies[tenant_id], progress[tenant_id]))
        finished.add(tenant_id)
    # The tenants not started are not done: the next pass does them.
    done = [o for o in done if o.tenant_id not in set(alone) - finished]
    for outcome in done:
        log_outcome(outcome, policy)
    return done


async def guard_read_tenant(read: GroupRead, tenant_id: str) -> None:
    """A read tenant's figures from its tally, then its guards (the phase TOMBSTONE when
    cleared), as its own pass would judge them."""
    scope, outcome, tally = read.scopes[tenant_id], read.outcomes[tenant_id], read.tallies[
        tenant_id]
    settle_outcome(scope, outcome, tally)
    await guard_tenant(scope, outcome, tally, read.counts.get(tenant_id))


async def reconcile_one_by_one(
    context: TickContext, group: TenantGroup, policy: ReconcilePolicy
) -> list[TenantOutcome]:
    """The group's tenants on their own reads (after a group read failed), until stopping."""
    done = []
    for tenant in until_stopping(group.tenants, context.control):
        with structlog.contextvars.bound_contextvars(tenant=tenant.tenant_id):
            outcome, _ = await reconcile_tenant(context, tenant, policy, {})
        done.append(outcome)
    return done

