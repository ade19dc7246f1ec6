"""One tenant's steps after its group's read: settle its figures from its tally, apply its
guards (counting it only as far as the stale-fraction guard needs), remove its lapsed restore
holds; each run isolated (`run_isolated`), so a failure is recorded in the tenant's outcome with
the phase it happened in and one tenant cannot stop the others. Its tombstoning is the deletion
plans' (`deletion_plans`).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Coroutine, Sequence
from typing import TYPE_CHECKING, Any

import structlog

from core.base.chroma import CollectionMissing
from core.base.rules.camel_json import to_json
from core.base.rules.telemetry import smallest_repo
from core.reconcile.rules.reconcile import (
    GUARD_INVALID_CONFIG,
    GUARD_MANIFEST_MISMATCH,
    GUARD_STALE_FRACTION,
    TENANT_KEY,
    ReconcilePolicy,
    stale_fraction_exceeded,
)
from core.reconcile.rules.reconcile_outcome import Phase, TenantOutcome
from core.reconcile.rules.restore_holds import RestoreHold
from core.reconcile.rules.tenant_scan import TenantTally
from core.reconcile.scopes import TenantScope
from core.reconcile.stores.restore_holds import drop_lapsed_holds

if TYPE_CHECKING:
    from core.base.chroma import VectorStore

log = structlog.get_logger(__name__)

#: Rows per page when counting a tenant's chunks for the guard (ids only). Each page re-runs
#: the `where` over the tenant and skips its offset, so fewer, larger pages are faster, while
#: Chroma's buffers for a page grow the process: this bounds that growth (figures:
#: docs/performance.md, "Counting a tenant").
COUNT_PAGE_ROWS = 25_000


async def guard_tenant(scope: TenantScope, outcome: TenantOutcome, counted: int | None) -> bool:
    """When tombstoning is on for the tenant (or explaining) and some chunks are actionable,
    apply the guards; True (and the phase TOMBSTONE) when the pass may tombstone it now.
    `counted`: the tenant's chunk count when its read already has it."""
    if not ((scope.tenant_policy.deletes or scope.explain) and outcome.actionable_count > 0):
        return False
    if scope.policy.invalid_pass_guards:
        outcome.guard = GUARD_INVALID_CONFIG
        return False
    outcome.phase = Phase.COUNT
    if await too_large_a_share(scope, outcome, counted) or not scope.deletes:
        return False
    outcome.phase = Phase.TOMBSTONE
    return True


async def too_large_a_share(scope: TenantScope, outcome: TenantOutcome,
                            counted: int | None) -> bool:
    """Count the tenant's chunks (`counted` by its read when it read them all or swept the
    collection; else counted only as far as the answer needs: past actionable / fraction it
    cannot change) and apply the stale-fraction guard to the union of actionable chunks; True
    (and the guard set) when the pass must not tombstone this tenant."""
    policy = scope.policy
    if counted is not None:
        outcome.total_chunks, outcome.total_complete = counted, True
    else:
        enough = math.ceil(outcome.actionable_count / policy.max_stale_fraction)
        outcome.total_chunks, outcome.total_complete = await count_tenant_chunks(
            scope.context.vectors, policy.collection, scope.tenant.tenant_id, enough=enough)
    if not stale_fraction_exceeded(actionable=outcome.actionable_count,
                                   total=outcome.total_chunks,
                                   max_fraction=policy.max_stale_fraction):
        return False
    outcome.guard = GUARD_STALE_FRACTION
    log.warning(
        "reconcile.guard", guard=GUARD_STALE_FRACTION,
        actionableCount=outcome.actionable_count, totalChunks=outcome.total_chunks,
        maxStaleFraction=policy.max_stale_fraction,
        message="refusing to tombstone: too large a share of the tenant would go; "
        "check the tenant's config version and manifests before raising the limit",
    )
    return True


async def drop_lapsed(scope: TenantScope, lapsed: Sequence[RestoreHold]) -> None:
    """Remove the tenant's lapsed holds (the evidence changed after their restore)."""
    await drop_lapsed_holds(scope.context.graph, scope.tenant.tenant_id, lapsed)
    log.info("reconcile.restore_holds_lapsed", lapsed=len(lapsed),
             message="the evidence changed after the restore: these chunks are judged as "
             "any other again")


def settle_outcome(scope: TenantScope, outcome: TenantOutcome, tally: TenantTally) -> None:
    """The tenant's figures from its scan's tally, settled (the manifest-mismatch guard
    applied: `TenantTally.settle`), warning of held repos and of chunks no band can hold."""
    tally.settle()
    if tally.mismatched_repos:
        outcome.guard = GUARD_MANIFEST_MISMATCH
        outcome.mismatched_repos = tally.mismatched_repos
        outcome.mismatch_held_count = tally.mismatch_held_count
        log.warning(
            "reconcile.guard", guard=GUARD_MANIFEST_MISMATCH,
            repos=list(tally.mismatched_repos), heldCount=tally.mismatch_held_count,
            maxStaleFraction=scope.policy.max_stale_fraction,
            message="holding these repos' manifest orphans: each manifest would orphan more "
            "than the stale fraction of its repo's chunks; check the folder or list it was "
            "made from (kb-reconcile explain), then set it again")
    outcome.data_repo = smallest_repo((outcome.data_repo, tally.smallest_repo))
    outcome.scanned = tally.scanned
    outcome.stale_count = tally.stale_count
    outcome.manifest_orphan_count = tally.manifest_orphan_count
    outcome.total_orphan_count = tally.total_orphan_count
    outcome.actionable_count = tally.actionable_count
    outcome.held_count = tally.held_count
    outcome.restore_held_count = tally.restore_held_count
    outcome.malformed_count = tally.malformed_count
    if tally.generations is not None:
        outcome.parser_orphan_count = tally.generations.parser_orphan_count
        outcome.extraction_orphan_count = tally.generations.extraction_orphan_count
    outcome.missing_paths = {slug: len(p) for slug, p in tally.missing_paths().items()}
    if outcome.malformed_count:
        log.warning(
            "reconcile.chunks_malformed", malformedCount=outcome.malformed_count,
            message="chunks whose fields have unexpected types: each such field is read as "
            "absent (reconcile explain lists them)",
        )
    if outcome.held_count and scope.tenant_policy.deletes:
        log.warning(
            "reconcile.chunks_held", heldCount=outcome.held_count,
            message="actionable chunks whose ingestedAt is later than this pass's read, of an "
            "unexpected type, or legacy on a manifest or generation orphan only are never "
            "tombstoned: nothing would tell a rewrite of them from the archived content "
            "(legacy config-stale chunks go by id)",
        )


async def count_tenant_chunks(
    vectors: VectorStore, collection: str, tenant_id: str, *, enough: int | None = None
) -> tuple[int, bool]:
    """A tenant's chunks, counted from an ids-only paged read, and whether the count is
    complete: it reads `enough` + 1 first and stops once it has `enough` (the guard's answer
    cannot change past it; at 100,000 chunks that saves ~0.6 s of a pass and the memory of
    the later pages). Offset paging never counts a row twice, and a ratio needs no more."""
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


async def run_isolated(outcome: TenantOutcome, policy: ReconcilePolicy,
                   step: Coroutine[Any, Any, None]) -> None:
    """Run one tenant's step with the tenant bound to its log lines; never raises: a failure
    is recorded in the outcome with the phase it happened in and logged with the tenant's
    id, so one tenant cannot stop the others."""
    with structlog.contextvars.bound_contextvars(tenant=outcome.tenant_id):
        try:
            await step
        except CollectionMissing:
            # No knowledge-base collection yet: there is nothing of this tenant to reconcile.
            log.warning("reconcile.no_collection", collection=policy.collection)
        except Exception as exc:
            record_failure(outcome, exc)


def record_failure(outcome: TenantOutcome, exc: Exception) -> None:
    """The tenant failed in its current phase: recorded in its outcome, logged with its id
    (the caller binds it) and the traceback."""
    outcome.failed_phase = outcome.phase
    outcome.error = f"{type(exc).__name__}: {exc}"
    log.error("reconcile.tenant_failed", phase=str(outcome.phase), error=outcome.error,
              exc_info=True)


def log_outcome(outcome: TenantOutcome, policy: ReconcilePolicy) -> None:
    """The tenant's one `reconcile.tenant` line: its figures when its pass is done. Not
    built when info lines are off (at 10,000 tenants, building them was about a third of a
    dry pass's own Python work in a profile)."""
    if not log.isEnabledFor(logging.INFO):
        return
    log.info("reconcile.tenant", dryRun=policy.dry_run, failed=outcome.failed,
             tenant=outcome.tenant_id, **to_json(outcome.figures()))

