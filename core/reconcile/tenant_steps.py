"""One tenant's steps after its group's read, each returning what it found (typed, frozen):
its scan's figures from its tally (`settle_scan`), its guards' verdict (counting it only as far
as the stale-fraction guard needs: `guard_tenant`), its tombstoning (`tombstone_step`, the
deletion plans' work) and the removal of its lapsed restore holds. `judge_tenant` and
`tombstone_step` never raise: a failure becomes the outcome's `Failure`, with the phase it
happened in, so one tenant cannot stop the others.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

import structlog

from core.base.chroma import CollectionMissing
from core.base.rules.camel_json import to_json
from core.reconcile.deletion import TombstoneProgress
from core.reconcile.deletion_plans import tombstone_tenant
from core.reconcile.rules.reconcile import (
    GUARD_INVALID_CONFIG,
    GUARD_MANIFEST_MISMATCH,
    GUARD_STALE_FRACTION,
    TENANT_KEY,
    ReconcilePolicy,
    stale_fraction_exceeded,
)
from core.reconcile.rules.reconcile_outcome import (
    Failure,
    GuardVerdict,
    Phase,
    ScanFigures,
    TenantOutcome,
)
from core.reconcile.rules.restore_holds import RestoreHold
from core.reconcile.rules.tenant_scan import TenantTally
from core.reconcile.scopes import GroupRead, TenantScope
from core.reconcile.stores.restore_holds import drop_lapsed_holds

if TYPE_CHECKING:
    from core.base.chroma import VectorStore

log = structlog.get_logger(__name__)

#: Rows per page when counting a tenant's chunks for the guard: fewer, larger pages are faster,
#: but Chroma's buffers for a page grow the process (docs/performance.md, "Counting a tenant").
COUNT_PAGE_ROWS = 25_000


async def judge_tenant(read: GroupRead, tenant_id: str) -> TenantOutcome:
    """A read tenant's outcome with its scan's figures and its guards' verdict, as a group of
    one would judge it. Never raises."""
    outcome = read.outcomes[tenant_id]
    if outcome.failed or read.collection_missing:
        return outcome
    scope = read.scopes[tenant_id]
    with structlog.contextvars.bound_contextvars(tenant=tenant_id):
        try:
            outcome = replace(outcome, scan=settle_scan(scope, read.tallies[tenant_id]))
        except Exception as exc:
            return failed(outcome, Phase.SCAN, exc, scope.policy)
        try:
            verdict = await guard_tenant(scope, outcome.scan, read.counts.get(tenant_id))
        except Exception as exc:
            return failed(outcome, Phase.COUNT, exc, scope.policy)
    return replace(outcome, verdict=verdict)


async def tombstone_step(scope: TenantScope, outcome: TenantOutcome, tally: TenantTally,
                         progress: TombstoneProgress) -> TenantOutcome:
    """The outcome with what the tenant's tombstoning did (`tombstone_tenant`; `progress`:
    what an earlier plan of this pass did for it). Never raises."""
    with structlog.contextvars.bound_contextvars(tenant=outcome.tenant_id):
        try:
            await tombstone_tenant(scope, tally, progress)
        except Exception as exc:
            return failed(replace(outcome, tombstone=progress.figures()), Phase.TOMBSTONE, exc,
                          scope.policy)
    return replace(outcome, tombstone=progress.figures())


async def guard_tenant(scope: TenantScope, scan: ScanFigures,
                       counted: int | None) -> GuardVerdict:
    """The guards' verdict, when tombstoning is on for the tenant (or explaining) and some
    chunks are actionable. `counted`: the tenant's chunk count when its read already has it;
    else it is counted only as far as the answer needs."""
    policy = scope.policy
    if not ((scope.tenant_policy.deletes or scope.explain) and scan.actionable_count > 0):
        return GuardVerdict()
    if policy.invalid_pass_guards:
        return GuardVerdict(GUARD_INVALID_CONFIG)
    if counted is not None:
        total, complete = counted, True
    else:
        enough = math.ceil(scan.actionable_count / policy.max_stale_fraction)
        total, complete = await count_tenant_chunks(
            scope.context.vectors, policy.collection, scope.tenant.tenant_id, enough=enough)
    if stale_fraction_exceeded(actionable=scan.actionable_count, total=total,
                               max_fraction=policy.max_stale_fraction):
        log.warning(
            "reconcile.guard", guard=GUARD_STALE_FRACTION,
            actionableCount=scan.actionable_count, totalChunks=total,
            maxStaleFraction=policy.max_stale_fraction,
            message="refusing to tombstone: too large a share of the tenant would go; "
            "check the tenant's config version and manifests before raising the limit",
        )
        return GuardVerdict(GUARD_STALE_FRACTION, total, complete)
    return GuardVerdict(None, total, complete, cleared=scope.deletes)


async def drop_lapsed(scope: TenantScope, outcome: TenantOutcome,
                      lapsed: Sequence[RestoreHold]) -> TenantOutcome:
    """Remove the tenant's lapsed holds (the evidence changed after their restore). Never
    raises: a failure is the outcome's, in the phase the tenant reached."""
    with structlog.contextvars.bound_contextvars(tenant=outcome.tenant_id):
        try:
            await drop_lapsed_holds(scope.context.graph, scope.tenant.tenant_id, lapsed)
        except Exception as exc:
            return failed(outcome, outcome.reached, exc, scope.policy)
        log.info("reconcile.restore_holds_lapsed", lapsed=len(lapsed),
                 message="the evidence changed after the restore: these chunks are judged as "
                 "any other again")
    return outcome


def settle_scan(scope: TenantScope, tally: TenantTally) -> ScanFigures:
    """The tenant's scan figures from its settled tally, warning of held repos and chunks."""
    scan = tally.figures()
    if scan.mismatched_repos:
        log.warning(
            "reconcile.guard", guard=GUARD_MANIFEST_MISMATCH,
            repos=list(scan.mismatched_repos), heldCount=scan.mismatch_held_count,
            maxStaleFraction=scope.policy.max_stale_fraction,
            message="holding these repos' manifest orphans: each manifest would orphan more "
            "than the stale fraction of its repo's chunks; check the folder or list it was "
            "made from (kb-reconcile explain), then set it again")
    if scan.malformed_count:
        log.warning(
            "reconcile.chunks_malformed", malformedCount=scan.malformed_count,
            message="chunks whose fields have unexpected types: each such field is read as "
            "absent (reconcile explain lists them)",
        )
    if scan.held_count and scope.tenant_policy.deletes:
        log.warning(
            "reconcile.chunks_held", heldCount=scan.held_count,
            message="actionable chunks whose ingestedAt is later than this pass's read, of an "
            "unexpected type, or legacy on a manifest or generation orphan only are never "
            "tombstoned: nothing would tell a rewrite of them from the archived content "
            "(legacy config-stale chunks go by id)",
        )
    return scan


async def count_tenant_chunks(
    vectors: VectorStore, collection: str, tenant_id: str, *, enough: int | None = None
) -> tuple[int, bool]:
    """A tenant's chunks, counted from an ids-only paged read, and whether the count is
    complete: it stops once it has `enough` (the guard's answer cannot change past it)."""
    total = 0
    first = min(enough + 1, COUNT_PAGE_ROWS) if enough is not None else None
    async for page in vectors.scan(
        collection, where={TENANT_KEY: tenant_id}, include=(), page_rows=COUNT_PAGE_ROWS,
        first_page_rows=first,
    ):
        total += len(page)
        if enough is not None and total >= enough:
            return total, False
    return total, True


def failed(outcome: TenantOutcome, phase: Phase, exc: Exception,
           policy: ReconcilePolicy) -> TenantOutcome:
    """The outcome of a step that raised: failed in `phase`, logged with the traceback. A
    missing knowledge-base collection is no failure: the outcome is returned as it was."""
    if isinstance(exc, CollectionMissing):
        log.warning("reconcile.no_collection", collection=policy.collection)
        return outcome
    failure = Failure(phase, f"{type(exc).__name__}: {exc}")
    log.error("reconcile.tenant_failed", phase=str(phase), error=failure.error, exc_info=True)
    return replace(outcome, failure=failure)


def log_outcome(outcome: TenantOutcome, policy: ReconcilePolicy) -> None:
    """The tenant's one `reconcile.tenant` line: its figures when its pass is done (not built
    when info lines are off: at fleet scale it is costly)."""
    if not log.isEnabledFor(logging.INFO):
        return
    log.info("reconcile.tenant", dryRun=policy.dry_run, failed=outcome.failed,
             tenant=outcome.tenant_id, **to_json(outcome.figures()))

