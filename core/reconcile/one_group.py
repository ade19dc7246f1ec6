"""The one path every tenant takes (the package docstring's `one_group`). A shared read that
fails reads each of its tenants as a group of one instead.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

import structlog

from core.base.chroma import CollectionMissing
from core.base.rules.tenants import TenantConfig
from core.reconcile.deletion import TombstoneProgress
from core.reconcile.deletion_plans import tombstone_group
from core.reconcile.page_loop import scan_group, sweep_collection, until_stopping
from core.reconcile.rules.manifests import RepoManifest
from core.reconcile.rules.reconcile import ReconcilePolicy
from core.reconcile.rules.reconcile_groups import TenantGroup, sweep_pays, within_cap
from core.reconcile.rules.reconcile_outcome import Phase, TenantOutcome
from core.reconcile.rules.restore_holds import RestoreHold
from core.reconcile.scopes import GroupRead
from core.reconcile.tenant_steps import (
    drop_lapsed,
    failed,
    judge_tenant,
    log_outcome,
    tombstone_step,
)

if TYPE_CHECKING:
    from core.base.runtime.context import TickContext

log = structlog.get_logger(__name__)


async def reconcile_group(
    context: TickContext, group: TenantGroup, policy: ReconcilePolicy, *,
    swept: GroupRead | None = None,
    manifests: Mapping[str, Mapping[str, RepoManifest]] | None = None,
    holds: Mapping[str, Sequence[RestoreHold]] | None = None, explain: bool = False,
) -> tuple[list[TenantOutcome], GroupRead | None]:
    """The group's outcomes, in its order (fewer when the daemon is stopping), and its read
    (None when not read). `swept`: a sweep's read that holds this group's tenants. Never
    raises: a tenant's failure is in its outcome. Writes no telemetry."""
    if group.version < 1:
        return [skipped(tenant) for tenant in group.tenants], None
    read = (swept.only(group) if swept is not None
            else await read_group(context, group, policy, manifests=manifests, holds=holds,
                                  explain=explain))
    if read is not None:
        return await finish_group(context, read, policy), read
    done: list[TenantOutcome] = []
    for single in until_stopping(group.alone(), context.control):
        outcomes, _ = await reconcile_group(context, single, policy)
        done += outcomes
    return done, None


def skipped(tenant: TenantConfig) -> TenantOutcome:
    """The outcome of a tenant whose configuration node has no valid version: it is not read."""
    with structlog.contextvars.bound_contextvars(tenant=tenant.tenant_id):
        log.warning("reconcile.tenant_skipped", reason="no valid config version")
    return TenantOutcome(tenant.tenant_id, tenant.repo_slug, tenant.version)


async def read_sweep(context: TickContext, tenants: Sequence[TenantConfig],
                     policy: ReconcilePolicy) -> GroupRead | None:
    """All these tenants from ONE paged read of the whole collection, when it pays
    (`sweep_pays`); None when it does not or fails (each group is then read on its own)."""
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


async def read_group(
    context: TickContext, group: TenantGroup, policy: ReconcilePolicy, *,
    manifests: Mapping[str, Mapping[str, RepoManifest]] | None,
    holds: Mapping[str, Sequence[RestoreHold]] | None, explain: bool,
) -> GroupRead | None:
    """One read for all the group's tenants (a `whole` group's read counts it for the guard).
    When it fails, None for a shared group; a group of one has the failure in its outcome."""
    read = GroupRead.empty(context, group.tenants, policy, manifests=manifests, holds=holds,
                           explain=explain)
    bound = {"tenant": group.tenant_ids[0]} if len(group.tenants) == 1 else {}
    with structlog.contextvars.bound_contextvars(**bound):
        try:
            await scan_group(context.vectors, policy.collection, group, on_rows=read.tally,
                             control=context.control)
        except CollectionMissing:
            log.warning("reconcile.no_collection", collection=policy.collection)
            read.collection_missing = True
        except Exception as exc:
            if not bound:
                log.warning("reconcile.group_read_failed", tenants=len(group.tenants),
                            exc_info=True, message="reading these tenants one by one instead")
                return None
            [(tenant_id, outcome)] = read.outcomes.items()
            read.outcomes[tenant_id] = failed(outcome, Phase.SCAN, exc, policy)
    if group.whole and not read.collection_missing:
        read.counts = {t: tally.scanned for t, tally in read.tallies.items()}
    return read


async def finish_group(context: TickContext, read: GroupRead,
                       policy: ReconcilePolicy) -> list[TenantOutcome]:
    """Judge each read tenant on its own, tombstone those cleared, remove lapsed restore
    holds; the outcomes of the tenants done, in the group's order."""
    judged = [await judge_tenant(read, tenant_id)
              for tenant_id in until_stopping(read.outcomes, context.control)]
    tombstoned = await tombstone_cleared(context, read, policy,
                                         [o for o in judged if o.verdict.cleared])
    done: list[TenantOutcome] = []
    for outcome in judged:
        if outcome.verdict.cleared:
            if outcome.tenant_id not in tombstoned:
                continue  # not started: the next pass does it
            outcome = tombstoned[outcome.tenant_id]
        lapsed = read.lapsed.get(outcome.tenant_id)
        scope = read.scopes[outcome.tenant_id]
        if lapsed and not (scope.explain or policy.dry_run):
            outcome = await drop_lapsed(scope, outcome, lapsed)
        log_outcome(outcome, policy)
        done.append(outcome)
    return done


async def tombstone_cleared(context: TickContext, read: GroupRead, policy: ReconcilePolicy,
                            cleared: list[TenantOutcome]) -> dict[str, TenantOutcome]:
    """The cleared tenants' outcomes with what their tombstoning did: under the cap and
    config-stale only, several share one plan (`tombstone_group`); any other, and all of them
    when that plan fails, run plans of their own. A tenant not started is missing."""
    shared: list[TenantOutcome] = []
    alone: list[TenantOutcome] = []
    for outcome in cleared:
        # A shared plan deletes config-stale chunks only: a tenant whose selection holds any
        # other reason's (legacy ones included) runs its own plans (`tombstone_tenant`).
        chosen = read.tallies[outcome.tenant_id].first_to_go()
        sharable = within_cap(outcome.scan, policy) and len(chosen.stale) == len(chosen.order)
        (shared if sharable else alone).append(outcome)
    if len(shared) < 2:
        shared, alone = [], alone + shared
    progress = {outcome.tenant_id: TombstoneProgress() for outcome in cleared}
    if shared and not await tombstone_group(context, read, policy,
                                            [o.tenant_id for o in shared], progress):
        shared, alone = [], alone + shared
    done = {o.tenant_id: replace(o, tombstone=progress[o.tenant_id].figures()) for o in shared}
    for outcome in until_stopping(alone, context.control):
        tenant_id = outcome.tenant_id
        done[tenant_id] = await tombstone_step(read.scopes[tenant_id], outcome,
                                               read.tallies[tenant_id], progress[tenant_id])
    return done
