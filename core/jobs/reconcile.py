"""The reconciliation pass: find each tenant's chunks stamped with a superseded config version,
report them, and (opt-in, guarded, archived first) tombstone them.

The decisions are `core.rules.reconcile`'s (which chunk is stale or actionable, the guards);
this is the I/O around them: tenants from the graph, candidate chunks from Chroma page by page,
tombstoning (`core.jobs.tombstoning`: archive exactly what a band's predicate returns, then let
the store delete by that predicate), and telemetry that must be written before a pass counts
as done.

Paging: the candidate read (`tenantId` and `tenantConfigVersion < current`, metadatas only) is
read-only, so it pages by offset; memory is bounded by one page plus the `ingestedAt` of at
most `reconciliationMaxDeletesPerTick` chunks (the oldest, which a capped pass deletes first).

Telemetry: a pass whose rows SQLite refuses (a lock held past busy_timeout) spools them to
`<dataDir>/telemetry-spool.jsonl`, reports `unrecordedRows` and is not ok (exit 1); the next
pass writes them first.
"""

from __future__ import annotations

import functools
import math
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import structlog

from core.jobs import tombstoning
from core.jobs.tombstoning import TombstoneJob, TombstoneProgress, tombstone_bands
from core.rules.errors import StoreUnavailable
from core.rules.explain_plan import TenantPlan, build_plan
from core.rules.figures import to_json
from core.rules.manifests import RepoManifest
from core.rules.reconcile import (
    GUARD_INVALID_CONFIG,
    GUARD_STALE_FRACTION,
    TENANT_KEY,
    Phase,
    ReconcileDisabled,
    ReconcileFigures,
    ReconcilePolicy,
    TenantOutcome,
    actionable_stamp_ceiling,
    candidate_where,
    stale_fraction_exceeded,
)
from core.rules.telemetry import EVENT_ERROR, EVENT_RECONCILE, MetricRow
from core.rules.tenant_policy import TenantPolicy, resolve_tenant_policy
from core.rules.tenant_scan import (
    ScanRules,
    TenantTally,
    orphan_bands,
    orphan_clauses,
    orphan_rule,
)
from core.rules.tenants import TenantConfig
from core.rules.tombstone_bands import plan_bands, stale_clauses, stale_rule
from core.stores.chroma import CollectionMissing
from core.stores.clock import now_ms
from core.stores.telemetry import insert_metric_rows, new_metric_row
from core.stores.telemetry_spool import MetricSpool
from core.stores.tenant_manifests import all_manifests, tenant_manifests
from core.stores.tenants import list_tenants

if TYPE_CHECKING:
    from core.jobs.context import TickContext
    from core.stores.chroma import VectorStore

log = structlog.get_logger(__name__)

#: Rows per page when counting a tenant's chunks for the guard (ids only). Each page re-runs
#: the `where` over the tenant and skips its offset, so fewer, larger pages are faster, while
#: Chroma's buffers for a page grow the process. Counting 100,000 chunks (measured): pages of
#: 2,000 ~4 s slower than 10,000; 10,000 1.1-1.6 s, +15 MB peak; 25,000 0.61-0.67 s, +31 MB;
#: 50,000 0.56-0.61 s, +47 MB. 25,000 takes most of the gain for half the memory of 50,000.
COUNT_PAGE_ROWS = 25_000


async def reconcile_tick(
    context: TickContext, dry_run: bool
) -> ReconcileFigures | ReconcileDisabled:
    """One reconciliation pass over every tenant with a config node: the tick function that
    `core.runtime.tick.run_tick("reconcile", ...)` runs for `--tick` and for the scheduler (which
    adds `durationMs`, and `dryRun` to its log line; the figures must not repeat them).

    Disabled (and not a dry run): logs "reconciliation disabled" and touches nothing. A dry
    run works either way and writes nothing: no telemetry, no archive, no delete. First, rows
    an earlier pass could not write are written (the spool). Tenants run one after another;
    one tenant's failure is logged with its id and counted in `failedTenants`, and the pass
    goes on to the next. `unrecordedRows` counts telemetry rows still not in SQLite when the
    pass ends (kept in the spool): such a pass has not succeeded. When the daemon is
    stopping, the pass returns between tenants or bands (never inside one) with `stopped:
    true`; the next pass starts over, so nothing is lost.
    """
    settings = context.settings
    if not settings.reconciliation_enabled and not dry_run:
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
    recorder = _Recorder(context, spool)
    if not dry_run:
        await recorder.flush_spool()
    outcomes: list[TenantOutcome] = []
    tenants = await list_tenants(context.graph)
    manifests = await all_manifests(context.graph)
    for tenant in tenants:
        if context.control.stopping:
            log.info("reconcile.stopping", tenantsLeft=len(tenants) - len(outcomes))
            break
        with structlog.contextvars.bound_contextvars(tenant=tenant.tenant_id):
            outcome, _ = await reconcile_tenant(context, tenant, policy,
                                                manifests.get(tenant.tenant_id, {}))
            if not dry_run:
                await recorder.record(outcome, policy)
            outcomes.append(outcome)
        context.control.progress()
    return ReconcileFigures.of(
        outcomes, enabled=settings.reconciliation_enabled, auto_tombstone=policy.auto_tombstone,
        pass_id=policy.pass_id, spool_flushed=recorder.flushed,
        unrecorded_rows=spool.pending() + recorder.lost, stopped=len(outcomes) < len(tenants))


async def reconcile_tenant(
    context: TickContext, tenant: TenantConfig, policy: ReconcilePolicy,
    manifests: Mapping[str, RepoManifest], *, explain: bool = False,
) -> tuple[TenantOutcome, TenantTally | None]:
    """Scan, guard and tombstone one tenant; never raises (a failure is recorded in the
    outcome with the phase it happened in, and logged with the tenant's id). Writes no
    telemetry (the caller does). With `explain`, nothing is deleted, every verdict is kept in
    the tally and the guards are judged as if tombstoning were on (`reconcile explain`)."""
    outcome = TenantOutcome(tenant.tenant_id, tenant.repo_slug, tenant.version)
    if tenant.version < 1:
        log.warning("reconcile.tenant_skipped", reason="no valid config version")
        return outcome, None
    scope = _TenantScope.of(context, tenant, policy, manifests, explain=explain)
    scope.describe(outcome)
    tally = TenantTally(scope.rules, cap=scope.cap, keep_rows=explain)
    try:
        await _reconcile(scope, outcome, tally)
    except CollectionMissing:
        # No knowledge-base collection yet: there is nothing of this tenant to reconcile.
        log.warning("reconcile.no_collection", collection=policy.collection)
    except Exception as exc:
        outcome.failed_phase = outcome.phase
        outcome.error = f"{type(exc).__name__}: {exc}"
        log.error("reconcile.tenant_failed", phase=str(outcome.phase), error=outcome.error,
                  exc_info=True)
    finally:
        log.info("reconcile.tenant", dryRun=policy.dry_run, failed=outcome.failed,
                 **to_json(outcome.figures()))
    return outcome, tally


async def _reconcile(scope: _TenantScope, outcome: TenantOutcome, tally: TenantTally) -> None:
    """Scan the tenant; then, when tombstoning is on for it and some chunks are actionable,
    hold back when a guard says so, else tombstone the oldest up to the cap."""
    policy = scope.policy
    await _scan(scope, outcome, tally)
    if not ((scope.tenant_policy.deletes or scope.explain) and outcome.actionable_count > 0):
        return
    if policy.invalid_pass_guards:
        outcome.guard = GUARD_INVALID_CONFIG
        return
    outcome.phase = Phase.COUNT
    if await _too_large_a_share(scope, outcome, tally) or not scope.deletes:
        return
    outcome.phase = Phase.TOMBSTONE
    await _tombstone(scope, outcome, tally)


async def _too_large_a_share(
    scope: _TenantScope, outcome: TenantOutcome, tally: TenantTally
) -> bool:
    """Count the tenant's chunks (known from the scan when it read them all; else counted only
    as far as the answer needs: past actionable / fraction it cannot change) and apply the
    stale-fraction guard to the union of actionable chunks; True (and the guard set) when the
    pass must not tombstone this tenant."""
    policy = scope.policy
    if scope.manifests:
        outcome.total_chunks, outcome.total_complete = tally.scanned, True
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


@dataclass(frozen=True, slots=True)
class _TenantScope:
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

    @classmethod
    def of(cls, context: TickContext, tenant: TenantConfig, policy: ReconcilePolicy,
           manifests: Mapping[str, RepoManifest], *, explain: bool) -> _TenantScope:
        """The tenant's scope, its policy resolved now (an invalid stored value warned)."""
        tenant_policy = resolve_tenant_policy(
            tenant.stored_policy, global_gap=policy.orphan_version_gap,
            global_grace_ms=policy.manifest_grace_ms,
            global_auto_tombstone=policy.auto_tombstone)
        if tenant_policy.invalid_keys:
            log.warning("reconcile.tenant_policy_invalid", keys=list(tenant_policy.invalid_keys),
                        message="an invalid per-tenant policy value fails closed: nothing is "
                        "actionable by what it governs until it is fixed (tenants set-policy)")
        rules = ScanRules(tenant.tenant_id, tenant.version, tenant_policy.gap, manifests,
                          tenant_policy.grace_ms, read_ms=now_ms())
        return cls(context, tenant, policy, tenant_policy, manifests, rules, explain)

    @property
    def deletes(self) -> bool:
        """Whether this tenant's pass may delete."""
        return (self.policy.deletes_allowed and self.tenant_policy.deletes
                and not self.explain)

    @property
    def cap(self) -> int:
        """How many chunks the scan keeps for bands (none when nothing will be deleted)."""
        return self.policy.max_deletes_per_tick if self.deletes else 0

    def describe(self, outcome: TenantOutcome) -> None:
        """Put the policy in force into the outcome (and so into telemetry)."""
        outcome.orphan_version_gap = self.tenant_policy.gap
        outcome.manifest_grace_ms = self.tenant_policy.grace_ms
        outcome.auto_tombstone = self.tenant_policy.deletes
        outcome.invalid_policy = self.tenant_policy.invalid_keys


async def _scan(scope: _TenantScope, outcome: TenantOutcome, tally: TenantTally) -> None:
    """Judge the tenant's chunks one page of metadatas at a time: only the possibly stale ones
    (stamp below the current version) for a tenant without manifests, every chunk of the
    tenant for one with manifests (orphans and missing paths need them all). Memory is one
    page plus the tally's bounded keep, whatever the tenant's size."""
    context, tenant = scope.context, scope.tenant
    where = ({TENANT_KEY: tenant.tenant_id} if scope.manifests
             else candidate_where(tenant.tenant_id, tenant.version))
    async for page in context.vectors.scan(
        scope.policy.collection, where=where, include=("metadatas",)
    ):
        tally.add_page(page)
        context.control.progress()
    outcome.scanned = tally.scanned
    outcome.stale_count = tally.stale_count
    outcome.manifest_orphan_count = tally.manifest_orphan_count
    outcome.total_orphan_count = tally.total_orphan_count
    outcome.actionable_count = tally.actionable_count
    outcome.held_count = tally.held_count
    outcome.missing_paths = {slug: len(p) for slug, p in tally.missing_paths().items()}
    if outcome.held_count and scope.tenant_policy.deletes:
        log.warning(
            "reconcile.chunks_held", heldCount=outcome.held_count,
            message="actionable chunks without a numeric ingestedAt (or with one later than "
            "this pass's read) are never tombstoned: nothing would tell a rewrite of them "
            "from the archived content",
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


async def _tombstone(scope: _TenantScope, outcome: TenantOutcome, tally: TenantTally) -> None:
    """Archive and delete the oldest actionable chunks, band by band, up to the cap: the
    config-stale ones first, then each repo's manifest orphans (one archive for the tenant;
    the cap counts both)."""
    context, tenant, rules = scope.context, scope.tenant, scope.rules
    progress = TombstoneProgress()
    run = functools.partial(tombstone_bands, cap=scope.policy.max_deletes_per_tick,
                            progress=progress, stopping=lambda: context.control.stopping,
                            beat=context.control.progress)
    try:
        if len(tally.oldest_stale) and rules.gap is not None:
            ceiling = actionable_stamp_ceiling(tenant.version, rules.gap)
            await run(_job(scope, stale_clauses(tenant.tenant_id, ceiling),
                           stale_rule(tenant.tenant_id, rules.stale_actionable)),
                      plan_bands(tally.oldest_stale.sorted(), band_rows=tombstoning.BAND_ROWS))
        for slug, oldest in sorted(tally.oldest_orphans.items()):
            if len(oldest) and not context.control.stopping:
                manifest = scope.manifests[slug]
                await run(_job(scope, orphan_clauses(tenant.tenant_id, manifest),
                               orphan_rule(tenant.tenant_id, manifest)),
                          orphan_bands(oldest.sorted(), band_rows=tombstoning.BAND_ROWS))
    finally:
        outcome.tombstoned_count = progress.tombstoned
        outcome.archived_count = progress.archived
        outcome.refused_bands = progress.bands_refused
        outcome.archive = str(progress.archive.path) if progress.archive else None


def _job(scope: _TenantScope, clauses: tuple[dict[str, Any], ...],
         may_delete: Callable[[Mapping[str, Any]], bool]) -> TombstoneJob:
    """A tombstoning job of the tenant under one predicate."""
    return TombstoneJob(
        vectors=scope.context.vectors, collection=scope.policy.collection,
        tenant_id=scope.tenant.tenant_id, clauses=clauses, may_delete=may_delete,
        read_ms=scope.rules.read_ms, tombstones_dir=scope.context.settings.tombstones_dir,
        pass_id=scope.policy.pass_id)


class _Recorder:
    """Writes each tenant's telemetry row, spooling what SQLite refuses (see MetricSpool)."""

    def __init__(self, context: TickContext, spool: MetricSpool) -> None:
        self.graph = context.graph
        self.spool = spool
        #: Rows from earlier passes written by this one.
        self.flushed = 0
        #: Rows neither written nor spooled (both SQLite and the disk refused): logged whole.
        self.lost = 0

    async def flush_spool(self) -> None:
        """Write what earlier passes could not; a failure keeps the spool for the next."""
        try:
            self.flushed = await self.spool.flush(self.graph)
        except Exception:
            log.error("reconcile.spool_flush_failed", path=str(self.spool.path),
                      pending=self.spool.pending(), exc_info=True)

    async def record(self, outcome: TenantOutcome, policy: ReconcilePolicy) -> None:
        """One `reconcile` row for a tenant with drift (stale or orphaned chunks, or missing
        paths; none for a clean one); an `error` row for a tenant that failed before its
        counts were known."""
        row = _telemetry_row(outcome, policy)
        if row is None:
            return
        try:
            await insert_metric_rows(self.graph, [row])
            return
        except Exception as exc:
            log.error("reconcile.telemetry_unrecorded", path=str(self.spool.path),
                      error=str(exc), message="kept in the spool; the next pass writes it, "
                      "and this pass does not count as done")
        try:
            await self.spool.append([row])
        except Exception:
            self.lost += 1
            log.error("reconcile.telemetry_lost", row=row.as_json(), exc_info=True)


def _telemetry_row(outcome: TenantOutcome, policy: ReconcilePolicy) -> MetricRow | None:
    """The tenant's telemetry row, or None for a clean tenant."""
    error_code = f"reconcile-{outcome.failed_phase}-failed" if outcome.failed else None
    if outcome.drifted and outcome.failed_phase != Phase.SCAN:
        return new_metric_row(
            tenant_id=outcome.tenant_id, repo_slug=outcome.repo_slug,
            event_type=EVENT_RECONCILE, chunks_total=outcome.total_orphan_count,
            chunks_deleted=outcome.tombstoned_count, error_code=error_code,
            detail=to_json(outcome.telemetry_detail(policy)),
        )
    if outcome.failed:
        return new_metric_row(
            tenant_id=outcome.tenant_id, repo_slug=outcome.repo_slug,
            event_type=EVENT_ERROR, error_code=error_code,
            detail=to_json(outcome.telemetry_detail(policy)),
        )
    return None


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
    outcome, tally = await reconcile_tenant(context, tenant, policy, manifests, explain=True)
    if outcome.failed or tally is None:
        raise StoreUnavailable(f"the plan of tenant {tenant_id!r} could not be made: "
                               f"{outcome.error}")
    return build_plan(outcome, tally, policy, manifests,
                      enabled=context.settings.reconciliation_enabled)
