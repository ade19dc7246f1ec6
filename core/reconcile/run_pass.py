"""The reconciliation pass over every tenant: the tick function of the reconcile daemon.

Every tenant is read as a member of a group (`rules.reconcile_groups.plan_groups`) and takes
the one path (`one_group`). Each group's telemetry rows are written before the next.
"""

from __future__ import annotations

import uuid
from collections.abc import Collection, Mapping, Sequence
from typing import TYPE_CHECKING

import structlog

from core.base.rules.tenants import TenantConfig, named_as_recorded
from core.base.state.graph import original_tenants
from core.base.state.telemetry import recorded_repos
from core.base.state.telemetry_spool import MetricSpool
from core.base.state.tenants import list_tenants
from core.reconcile.one_group import read_sweep, reconcile_group
from core.reconcile.page_loop import until_stopping
from core.reconcile.recording import TelemetryRecorder
from core.reconcile.rules.manifests import RepoManifest
from core.reconcile.rules.reconcile import ReconcilePolicy
from core.reconcile.rules.reconcile_groups import TenantGroup, plan_groups
from core.reconcile.rules.reconcile_outcome import (
    ReconcileDisabled,
    ReconcileFigures,
    TenantOutcome,
)
from core.reconcile.rules.restore_holds import RestoreHold
from core.reconcile.scopes import GroupRead
from core.reconcile.stores.restore_holds import hold_counts, tenant_holds
from core.reconcile.stores.tenant_manifests import all_manifests

if TYPE_CHECKING:
    from core.base.runtime.context import TickContext

log = structlog.get_logger(__name__)


async def reconcile_tick(
    context: TickContext, dry_run: bool
) -> ReconcileFigures | ReconcileDisabled:
    """One reconciliation pass over every tenant with a config node (`run_tick("reconcile")`
    for `--tick` and the scheduler, which adds `durationMs` and `dryRun`: the figures must not
    repeat them).

    A dry run writes nothing: no telemetry, no archive, no delete. First the spooled rows of an
    earlier pass are written, then every group in turn. One tenant's failure is counted in
    `failedTenants` and the pass goes on; a shared read that fails reads each tenant alone.
    When the daemon is stopping, the pass returns between groups, tenants or bands (never
    inside one) with `stopped: true`; the next pass starts over.
    """
    settings = context.settings
    if not settings.reconcile.enabled and not dry_run:
        log.info("reconcile.disabled", message="reconciliation disabled "
                 "(set reconciliationEnabled = true to run passes)")
        return ReconcileDisabled()
    policy = ReconcilePolicy.from_settings(settings, dry_run=dry_run, pass_id=uuid.uuid4().hex)
    if policy.invalid_guards and policy.auto_tombstone:
        log.warning("reconcile.guard_config_invalid", keys=list(policy.invalid_guards),
                    message="a setting that fails closed is invalid: until it is fixed, this "
                    "pass deletes nothing (a delete cap or stale fraction), nothing by version "
                    "(the gap) or nothing by manifest (the grace)")
    spool = MetricSpool(settings.telemetry_spool_path)
    recorder = TelemetryRecorder(context, spool)
    if not dry_run:
        await recorder.flush_spool()
    tenants = await list_tenants(context.graph)
    if original_tenants(context.graph):  # the original's reconciler names the repo so
        tenants = named_as_recorded(tenants, await recorded_repos(context.graph))
    manifests = await all_manifests(context.graph)
    holding = set(await hold_counts(context.graph))
    outcomes = await reconcile_all_tenants(context, tenants, policy, manifests, recorder,
                                           holding=holding)
    return ReconcileFigures.of(
        outcomes, enabled=settings.reconcile.enabled, auto_tombstone=policy.auto_tombstone,
        pass_id=policy.pass_id, spool_flushed=recorder.flushed,
        unrecorded_rows=spool.pending() + recorder.lost,
        stopped=len(outcomes) < len(tenants) or context.control.stopping)


async def reconcile_all_tenants(
    context: TickContext, tenants: list[TenantConfig], policy: ReconcilePolicy,
    manifests: Mapping[str, Mapping[str, RepoManifest]], recorder: TelemetryRecorder,
    *, holding: Collection[str] = frozenset(),
) -> list[TenantOutcome]:
    """Every tenant's outcome, in the tenants' order; fewer when the daemon is stopping.
    Every tenant takes one path (`one_group.reconcile_group`) as a member of its group
    (`plan_groups`): first those read alone, then the shared groups, which one sweep of the
    collection serves when it pays; each group's telemetry rows are recorded before the next
    group. The tenants `holding` restore holds are read alone: their own read judges them."""
    groups = plan_groups(tenants, policy, manifests, holding)
    outcomes: list[TenantOutcome] = []
    for group in until_stopping(groups.alone, context.control):
        [tenant] = group.tenants
        holds = ({tenant.tenant_id: await tenant_holds(context.graph, tenant.tenant_id)}
                 if tenant.tenant_id in holding else None)
        outcomes += await reconcile_and_record(context, group, policy, recorder,
                                               manifests=manifests, holds=holds)
    swept = (await read_sweep(context, groups.shared_tenants, policy)
             if groups.shared and not context.control.stopping else None)
    for group in until_stopping(groups.shared, context.control):
        outcomes += await reconcile_and_record(context, group, policy, recorder, swept=swept)
    if context.control.stopping:
        log.info("reconcile.stopping", tenantsLeft=len(tenants) - len(outcomes))
    place = {tenant.tenant_id: i for i, tenant in enumerate(tenants)}
    outcomes.sort(key=lambda o: place[o.tenant_id])  # the figures list tenants in id order
    return outcomes


async def reconcile_and_record(
    context: TickContext, group: TenantGroup, policy: ReconcilePolicy,
    recorder: TelemetryRecorder, *, swept: GroupRead | None = None,
    manifests: Mapping[str, Mapping[str, RepoManifest]] | None = None,
    holds: Mapping[str, Sequence[RestoreHold]] | None = None,
) -> list[TenantOutcome]:
    """One group through the one path, its telemetry rows recorded (not on a dry run)."""
    done, _ = await reconcile_group(context, group, policy, swept=swept, manifests=manifests,
                                    holds=holds)
    if not policy.dry_run:
        await recorder.record(done, policy)
    context.control.progress()
    return done
