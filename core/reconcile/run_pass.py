"""The reconciliation pass over every tenant: the tick function of the reconcile daemon.

Tenants the groups cannot serve exactly (a manifest, a policy of their own) go one by one
(`one_tenant`); the others by groups (`group_reads`). Each tenant's telemetry row is written
(`recording`) before the pass counts as done.
"""

from __future__ import annotations

import uuid
from collections.abc import Collection, Mapping
from typing import TYPE_CHECKING

import structlog

from core.base.rules.tenants import TenantConfig, named_as_recorded
from core.base.state.graph import original_tenants
from core.base.state.telemetry import recorded_repos
from core.base.state.telemetry_spool import MetricSpool
from core.base.state.tenants import list_tenants
from core.reconcile.group_reads import reconcile_by_groups
from core.reconcile.one_tenant import reconcile_tenant
from core.reconcile.page_loop import until_stopping
from core.reconcile.recording import TelemetryRecorder
from core.reconcile.rules.generations.orphans import declares_generations
from core.reconcile.rules.manifests import RepoManifest
from core.reconcile.rules.reconcile import ReconcilePolicy
from core.reconcile.rules.reconcile_outcome import (
    ReconcileDisabled,
    ReconcileFigures,
    TenantOutcome,
)
from core.reconcile.rules.tenant_policy import TenantPolicy
from core.reconcile.scopes import resolve_policy
from core.reconcile.stores.restore_holds import hold_counts, tenant_holds
from core.reconcile.stores.tenant_manifests import all_manifests

if TYPE_CHECKING:
    from core.base.runtime.context import TickContext

log = structlog.get_logger(__name__)


async def reconcile_tick(
    context: TickContext, dry_run: bool
) -> ReconcileFigures | ReconcileDisabled:
    """One reconciliation pass over every tenant with a config node: the tick function that
    `core.suite.tick.run_tick("reconcile", ...)` runs for `--tick` and for the scheduler (which
    adds `durationMs`, and `dryRun` to its log line; the figures must not repeat them).

    Disabled (and not a dry run): logs "reconciliation disabled" and touches nothing. A dry
    run works either way and writes nothing: no telemetry, no archive, no delete. First, rows
    an earlier pass could not write are written (the spool). A tenant with a manifest or a
    policy of its own is read, guarded and tombstoned on its own (the path `reconcile
    explain` runs); the others go by groups of one version
    (`core.reconcile.rules.reconcile_groups`): one candidate read and one count read serve a group,
    then each tenant is guarded and tombstoned on its own, and the group's telemetry rows are
    written in one transaction. One tenant's failure is logged with its id and counted in
    `failedTenants`, and the pass goes on to the next; a group read that fails falls back to one
    read per tenant.
    `unrecordedRows` counts telemetry rows still not in SQLite when the pass ends (kept in
    the spool): such a pass has not succeeded. When the daemon is stopping, the pass returns
    between groups, tenants or bands (never inside one) with `stopped: true`; the next pass
    starts over, so nothing is lost.
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
    The tenants the groups cannot serve exactly (`groups_serve`) go one by one on the
    per-tenant path first, each tenant's row recorded as it is done; then the others by
    groups, each group's rows recorded before the next. The tenants `holding` restore holds
    take the per-tenant path too: it judges their holds."""
    default = resolve_policy(None, policy)
    grouped = [t for t in tenants if t.tenant_id not in holding
               and groups_serve(t, policy, default, manifests)]
    grouped_ids = {t.tenant_id for t in grouped}
    outcomes: list[TenantOutcome] = []
    alone = [t for t in tenants if t.tenant_id not in grouped_ids]
    for tenant in until_stopping(alone, context.control):
        with structlog.contextvars.bound_contextvars(tenant=tenant.tenant_id):
            holds = (await tenant_holds(context.graph, tenant.tenant_id)
                     if tenant.tenant_id in holding else ())
            outcome, _ = await reconcile_tenant(context, tenant, policy,
                                                manifests.get(tenant.tenant_id, {}),
                                                holds=holds)
        if not policy.dry_run:
            await recorder.record([outcome], policy)
        outcomes.append(outcome)
        context.control.progress()
    if not context.control.stopping:
        outcomes += await reconcile_by_groups(context, grouped, policy, recorder)
    if context.control.stopping:
        log.info("reconcile.stopping", tenantsLeft=len(tenants) - len(outcomes))
    place = {tenant.tenant_id: i for i, tenant in enumerate(tenants)}
    outcomes.sort(key=lambda o: place[o.tenant_id])  # the figures list tenants in id order
    return outcomes


def groups_serve(tenant: TenantConfig, policy: ReconcilePolicy, default: TenantPolicy,
             manifests: Mapping[str, Mapping[str, RepoManifest]]) -> bool:
    """Whether the groups serve this tenant: a valid version, no manifest (a group reads
    candidates by version only; a manifest needs all the tenant's chunks) and the pass's
    own policy in force (a group's shared bands use one gap; a tenant's own gap, grace or
    autoTombstone, or an invalid stored value, takes the per-tenant path). When in doubt,
    the per-tenant path: it is the reference the groups must equal. `default` is the pass's
    own policy resolved once (`resolve_policy(None, policy)`), which is also what a tenant with
    nothing stored resolves to."""
    if tenant.version < 1 or manifests.get(tenant.tenant_id):
        return False
    if declares_generations(tenant.tenant_repos):  # its generation signals read every chunk
        return False
    own = default if tenant.stored_policy is None else resolve_policy(tenant.stored_policy, policy)
    return not own.invalid_keys and (own.gap, own.grace_ms, own.deletes) == (
        default.gap, default.grace_ms, default.deletes)

