"""`reconcile explain`: one tenant's pass run in explain mode, as a plan: the tenant read as a
group of one on the pass's one path (`one_group`), with nothing deleted."""

from __future__ import annotations

from typing import TYPE_CHECKING

import structlog

from core.base.rules.errors import StoreUnavailable
from core.base.state.tenants import list_tenants
from core.reconcile.one_group import reconcile_group
from core.reconcile.retention import tenant_expiry
from core.reconcile.rules.explain_plan import TenantPlan, build_plan
from core.reconcile.rules.reconcile import ReconcilePolicy
from core.reconcile.rules.reconcile_groups import TenantGroup, reads_whole
from core.reconcile.stores.restore_holds import tenant_holds
from core.reconcile.stores.tenant_manifests import tenant_manifests

if TYPE_CHECKING:
    from core.base.runtime.context import TickContext

log = structlog.get_logger(__name__)


async def explain_tenant(context: TickContext, tenant_id: str) -> TenantPlan:
    """`reconcile explain`: one tenant's pass run in explain mode (the same scan, rules and
    guards as a pass, with nothing deleted and no telemetry written), as a plan. Raises
    LookupError for a tenant without a usable configuration node (the pass never reconciles
    it) and
    StoreUnavailable when the tenant's scan failed."""
    tenant = next((t for t in await list_tenants(context.graph) if t.tenant_id == tenant_id),
                  None)
    if tenant is None or tenant.version < 1:
        raise LookupError(f"tenant {tenant_id!r} has no configuration node with a valid "
                          "version (a pass never reconciles it)")
    manifests = await tenant_manifests(context.graph, tenant_id)
    policy = ReconcilePolicy.from_settings(context.settings, dry_run=True)
    holds = await tenant_holds(context.graph, tenant_id)
    group = TenantGroup(tenant.version, (tenant,), reads_whole(tenant, manifests))
    [outcome], read = await reconcile_group(context, group, policy,
                                            manifests={tenant_id: manifests},
                                            holds={tenant_id: holds}, explain=True)
    if outcome.failed or read is None:
        raise StoreUnavailable(f"the plan of tenant {tenant_id!r} could not be made: "
                               f"{outcome.failure.error if outcome.failure else 'not read'}")
    tally = read.tallies[tenant_id]
    return build_plan(outcome, tally, policy, manifests,
                      enabled=context.settings.reconcile.enabled,
                      retention=await tenant_expiry(context, tenant), holds=holds)

