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
from collections.abc import Coroutine, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import structlog

from core.jobs import tombstoning
from core.jobs.reconcile_fleet import scan_group, sweep_collection
from core.jobs.tombstoning import TombstoneJob, TombstoneProgress, tombstone_bands
from core.jobs.tombstoning_groups import tombstone_group
from core.rules.figures import to_json
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
    diff_tenant_chunks,
    is_actionable_stamp,
    stale_fraction_exceeded,
)
from core.rules.reconcile_groups import (
    TenantGroup,
    group_tenants,
    sweep_pays,
    within_cap,
)
from core.rules.rows import ChromaRow
from core.rules.telemetry import EVENT_ERROR, EVENT_RECONCILE, MetricRow
from core.rules.tenants import TenantConfig
from core.rules.tombstone_bands import OldestIngested, deletion_bound
from core.stores.chroma import CollectionMissing
from core.stores.clock import now_ms
from core.stores.telemetry import insert_metric_rows, new_metric_row
from core.stores.telemetry_spool import MetricSpool
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
    an earlier pass could not write are written (the spool). Tenants go by groups of one
    version (`core.rules.reconcile_groups`): one candidate read and one count read serve a
    group, then each tenant is guarded and tombstoned on its own, and the group's telemetry
    rows are written in one transaction. One tenant's failure is logged with its id and
    counted in `failedTenants`, and the pass goes on to the next; a group read that fails
    falls back to one read per tenant. `unrecordedRows` counts telemetry rows still not in
    SQLite when the pass ends (kept in the spool): such a pass has not succeeded. When the
    daemon is stopping, the pass returns between groups, tenants or bands (never inside one)
    with `stopped: true`; the next pass starts over, so nothing is lost.
    """
    settings = context.settings
    if not settings.reconciliation_enabled and not dry_run:
        log.info("reconcile.disabled", message="reconciliation disabled "
                 "(set reconciliationEnabled = true to run passes)")
        return ReconcileDisabled()
    policy = ReconcilePolicy.from_settings(settings, dry_run=dry_run, pass_id=uuid.uuid4().hex)
    if policy.invalid_guards and policy.auto_tombstone:
        log.warning("reconcile.guard_config_invalid", keys=list(policy.invalid_guards),
                    message="a destructive guard is set to an invalid value: this pass "
                    "deletes nothing (reports only) until it is fixed")
    spool = MetricSpool(settings.telemetry_spool_path)
    recorder = _Recorder(context, spool)
    if not dry_run:
        await recorder.flush_spool()
    tenants = await list_tenants(context.graph)
    outcomes = await _all_tenants(context, tenants, policy, recorder)
    return ReconcileFigures(
        enabled=settings.reconciliation_enabled,
        auto_tombstone=policy.auto_tombstone,
        pass_id=policy.pass_id,
        tenants=tuple(o.figures() for o in outcomes),
        failed_tenants=sum(o.failed for o in outcomes),
        stale_count=sum(o.stale_count for o in outcomes),
        tombstoned_count=sum(o.tombstoned_count for o in outcomes),
        archives=tuple(o.archive for o in outcomes if o.archive),
        spool_flushed=recorder.flushed,
        unrecorded_rows=spool.pending() + recorder.lost,
        stopped=len(outcomes) < len(tenants) or context.control.stopping,
    )


async def _all_tenants(
    context: TickContext, tenants: list[TenantConfig], policy: ReconcilePolicy,
    recorder: _Recorder,
) -> list[TenantOutcome]:
    """Every tenant's outcome, group by group (each group's telemetry recorded before the
    next), in the tenants' order; fewer when the daemon is stopping."""
    outcomes: list[TenantOutcome] = []
    for tenant in tenants:
        if tenant.version < 1:
            outcomes.append(await reconcile_tenant(context, tenant, policy))
    swept = await _read_sweep(context, [t for t in tenants if t.version >= 1], policy)
    for group in group_tenants(tenants):
        if context.control.stopping:
            log.info("reconcile.stopping", tenantsLeft=len(tenants) - len(outcomes))
            break
        read = swept.only(group) if swept else await _read_group(context, group, policy)
        done = (await _finish_group(context, read, policy) if read is not None
                else await _one_by_one(context, group, policy))
        if not policy.dry_run:
            await recorder.record(done, policy)
        outcomes.extend(done)
        context.control.progress()
    place = {tenant.tenant_id: i for i, tenant in enumerate(tenants)}
    outcomes.sort(key=lambda o: place[o.tenant_id])  # the figures list tenants in id order
    return outcomes


async def reconcile_tenant(
    context: TickContext, tenant: TenantConfig, policy: ReconcilePolicy
) -> TenantOutcome:
    """Scan, guard and tombstone one tenant on its own reads; never raises (a failure is
    recorded in the outcome with the phase it happened in, and logged with the tenant's id).
    Writes no telemetry (the caller does). The path of a tenant whose group read failed."""
    outcome = TenantOutcome(tenant.tenant_id, tenant.repo_slug, tenant.version)
    if tenant.version < 1:
        with structlog.contextvars.bound_contextvars(tenant=tenant.tenant_id):
            log.warning("reconcile.tenant_skipped", reason="no valid config version")
        return outcome
    scope = _TenantScope(context, tenant, policy, read_ms=now_ms())
    await _guarded(outcome, policy, _reconcile(scope, outcome))
    return outcome


async def _guarded(outcome: TenantOutcome, policy: ReconcilePolicy,
                   step: Coroutine[Any, Any, None], *, last: bool = True) -> None:
    """Run one tenant's step with the tenant bound to its log lines; never raises: a failure
    is recorded in the outcome with the phase it happened in and logged with the tenant's id,
    so one tenant cannot stop the others. The tenant's `reconcile.tenant` line is logged after
    its `last` step (a group logs it once its tenants are done)."""
    with structlog.contextvars.bound_contextvars(tenant=outcome.tenant_id):
        try:
            await step
        except CollectionMissing:
            # No knowledge-base collection yet: there is nothing of this tenant to reconcile.
            log.warning("reconcile.no_collection", collection=policy.collection)
        except Exception as exc:
            outcome.failed_phase = outcome.phase
            outcome.error = f"{type(exc).__name__}: {exc}"
            log.error("reconcile.tenant_failed", phase=str(outcome.phase), error=outcome.error,
                      exc_info=True)
        finally:
            if last:
                _log_outcome(outcome, policy)


def _log_outcome(outcome: TenantOutcome, policy: ReconcilePolicy) -> None:
    """The tenant's one `reconcile.tenant` line: its figures when its pass is done."""
    log.info("reconcile.tenant", dryRun=policy.dry_run, failed=outcome.failed,
             tenant=outcome.tenant_id, **to_json(outcome.figures()))


async def _reconcile(scope: _TenantScope, outcome: TenantOutcome) -> None:
    """Scan the tenant's candidates, then guard and tombstone it."""
    oldest = _oldest_for(scope.policy)
    await _scan_candidates(scope, outcome, oldest)
    await _clear_to_tombstone(scope, outcome, counted=None)
    if outcome.phase == Phase.TOMBSTONE:
        await _tombstone(scope, outcome, oldest, TombstoneProgress())


def _oldest_for(policy: ReconcilePolicy) -> OldestIngested:
    """Where a tenant's scan keeps the `ingestedAt` of the chunks a pass may delete."""
    return OldestIngested(policy.max_deletes_per_tick if policy.deletes_allowed else 0)


async def _clear_to_tombstone(scope: _TenantScope, outcome: TenantOutcome,
                              counted: int | None) -> None:
    """When tombstoning is on and some chunks are actionable, apply the guards; the outcome's
    phase becomes TOMBSTONE when none holds the tenant back. `counted` is the tenant's chunk
    count when a group read already has it (else the tenant is counted on its own)."""
    policy = scope.policy
    if outcome.held_count and policy.auto_tombstone:
        log.warning(
            "reconcile.chunks_held", heldCount=outcome.held_count,
            message="actionable chunks without a numeric ingestedAt (or with one later than "
            "this pass's read) are never tombstoned: nothing would tell a rewrite of them "
            "from the archived content",
        )
    if not (policy.auto_tombstone and outcome.actionable_count > 0):
        return
    if policy.invalid_guards:
        outcome.guard = GUARD_INVALID_CONFIG
        return
    outcome.phase = Phase.COUNT
    if await _too_large_a_share(scope, outcome, counted) or not policy.deletes_allowed:
        return
    outcome.phase = Phase.TOMBSTONE


@dataclass(slots=True)
class _GroupRead:
    """What the reads of a group of tenants found, per tenant: its scope, its figures so far,
    the `ingestedAt` of its deletable chunks, and its chunk count when a read counted it."""

    scopes: dict[str, _TenantScope]
    outcomes: dict[str, TenantOutcome]
    oldest: dict[str, OldestIngested]
    counts: dict[str, int]

    @classmethod
    def empty(cls, context: TickContext, tenants: Sequence[TenantConfig],
              policy: ReconcilePolicy) -> _GroupRead:
        """Nothing read yet (the tenants' read time is now)."""
        read_ms = now_ms()
        return cls({t.tenant_id: _TenantScope(context, t, policy, read_ms) for t in tenants},
                   {t.tenant_id: TenantOutcome(t.tenant_id, t.repo_slug, t.version)
                    for t in tenants},
                   {t.tenant_id: _oldest_for(policy) for t in tenants}, {})

    def tally(self, tenant_id: str, rows: list[ChromaRow]) -> None:
        """Add a page's candidate rows of one tenant."""
        _tally(self.scopes[tenant_id], self.outcomes[tenant_id], self.oldest[tenant_id], rows)

    def only(self, group: TenantGroup) -> _GroupRead:
        """The part of a sweep's read that is this group's."""
        ids = group.tenant_ids
        return _GroupRead({t: self.scopes[t] for t in ids}, {t: self.outcomes[t] for t in ids},
                          {t: self.oldest[t] for t in ids},
                          {t: self.counts[t] for t in ids if t in self.counts})


async def _read_sweep(context: TickContext, tenants: Sequence[TenantConfig],
                      policy: ReconcilePolicy) -> _GroupRead | None:
    """All tenants from ONE paged read of the whole collection, when their chunks are few
    enough that it costs less than a read per group (`sweep_pays`): candidates and counts
    alike. None when it does not pay or fails (the groups then read on their own)."""
    try:
        chunks = await context.vectors.count(policy.collection)
        if not sweep_pays(tenants=len(tenants), chunks=chunks):
            return None
        read = _GroupRead.empty(context, tenants, policy)
        read.counts = dict(await sweep_collection(
            context.vectors, policy.collection, {t.tenant_id: t.version for t in tenants},
            on_rows=read.tally, beat=context.control.progress))
    except CollectionMissing:
        return None
    except Exception:
        log.warning("reconcile.sweep_failed", tenants=len(tenants), exc_info=True,
                    message="reading the tenants by groups instead")
        return None
    return read


async def _read_group(context: TickContext, group: TenantGroup,
                      policy: ReconcilePolicy) -> _GroupRead | None:
    """One group: one candidate read for all its tenants (each tenant the guard needs counted
    then counts itself, stopping as soon as the guard's answer cannot change: for tenants of
    1,000 chunks or more that is cheaper than one read of all their chunks, measured). None
    when the candidate read fails (the tenants then read one by one)."""
    read = _GroupRead.empty(context, group.tenants, policy)
    try:
        await scan_group(context.vectors, policy.collection, group, on_rows=read.tally,
                         beat=context.control.progress)
    except CollectionMissing:
        log.warning("reconcile.no_collection", collection=policy.collection)
        return read
    except Exception:
        log.warning("reconcile.group_read_failed", tenants=len(group.tenants), exc_info=True,
                    message="reading these tenants one by one instead")
        return None
    return read


async def _finish_group(context: TickContext, read: _GroupRead,
                        policy: ReconcilePolicy) -> list[TenantOutcome]:
    """Guard each tenant of a read group on its own; tombstone those cleared and under the cap
    with shared bands, the others on their own. The outcomes of the tenants done, in the
    group's order (fewer when the daemon is stopping)."""
    done: list[TenantOutcome] = []
    shared: list[str] = []
    alone: list[str] = []
    for tenant_id, outcome in read.outcomes.items():
        if context.control.stopping:
            break
        await _guarded(outcome, policy, _clear_to_tombstone(
            read.scopes[tenant_id], outcome, read.counts.get(tenant_id)), last=False)
        done.append(outcome)
        if outcome.phase == Phase.TOMBSTONE and not outcome.failed:
            (shared if within_cap(outcome, policy) else alone).append(tenant_id)
    if len(shared) < 2:
        shared, alone = [], alone + shared
    progress = {tenant_id: TombstoneProgress() for tenant_id in shared + alone}
    if shared and not await _tombstone_shared(context, read, policy, shared, progress):
        alone += shared
    for i, tenant_id in enumerate(alone):
        if context.control.stopping:  # the tenants left are not done: the next pass does them
            left = set(alone[i:])
            done = [o for o in done if o.tenant_id not in left]
            break
        outcome = read.outcomes[tenant_id]
        await _guarded(outcome, policy, _tombstone(read.scopes[tenant_id], outcome,
                                                   read.oldest[tenant_id], progress[tenant_id]),
                       last=False)
    for outcome in done:
        _log_outcome(outcome, policy)
    return done


async def _tombstone_shared(context: TickContext, read: _GroupRead, policy: ReconcilePolicy,
                            tenant_ids: list[str],
                            progress: dict[str, TombstoneProgress]) -> bool:
    """Tombstone these tenants (one version, each under the cap) with shared bands; False when
    the shared bands were abandoned (the caller then tombstones them one by one, continuing
    their progress)."""
    jobs = {t: _tombstone_job(read.scopes[t]) for t in tenant_ids}
    values = sorted(v for t in tenant_ids for v in read.oldest[t].sorted())
    try:
        await tombstone_group(jobs, values, cap=policy.max_deletes_per_tick,
                              progress={t: progress[t] for t in tenant_ids},
                              stopping=lambda: context.control.stopping,
                              beat=context.control.progress)
    except Exception as exc:
        log.warning("reconcile.shared_bands_abandoned", tenants=len(tenant_ids),
                    error=f"{type(exc).__name__}: {exc}",
                    message="tombstoning these tenants one by one instead")
        return False
    finally:
        for t in tenant_ids:
            _apply(read.outcomes[t], progress[t])
    return True


async def _one_by_one(
    context: TickContext, group: TenantGroup, policy: ReconcilePolicy
) -> list[TenantOutcome]:
    """The group's tenants on their own reads (after a group read failed), until stopping."""
    done = []
    for tenant in group.tenants:
        if context.control.stopping:
            break
        done.append(await reconcile_tenant(context, tenant, policy))
    return done


async def _too_large_a_share(
    scope: _TenantScope, outcome: TenantOutcome, counted: int | None
) -> bool:
    """Apply the stale-fraction guard to the tenant's chunk count (`counted`, or counted here
    only as far as the answer needs: past actionable / fraction it cannot change); True (and
    the guard set) when the pass must not tombstone this tenant."""
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
        "check the tenant's config version before raising the limit",
    )
    return True


@dataclass(frozen=True, slots=True)
class _TenantScope:
    """What one tenant's scan and tombstoning share: the stores, the tenant, the policy, and
    when the pass started reading it (epoch ms; no chunk ingested later is deleted)."""

    context: TickContext
    tenant: TenantConfig
    policy: ReconcilePolicy
    read_ms: int


async def _scan_candidates(
    scope: _TenantScope, outcome: TenantOutcome, oldest: OldestIngested
) -> None:
    """Count the tenant's stale and actionable chunks, one page of metadatas at a time, and
    keep the `ingestedAt` of the oldest actionable ones a pass may delete (see
    `core.jobs.tombstoning`); memory is one page plus `oldest`, whatever the tenant's size."""
    where = candidate_where(scope.tenant.tenant_id, scope.tenant.version)
    async for page in scope.context.vectors.scan(
        scope.policy.collection, where=where, include=("metadatas",)
    ):
        _tally(scope, outcome, oldest, page)
        scope.context.control.progress()


def _tally(scope: _TenantScope, outcome: TenantOutcome, oldest: OldestIngested,
           rows: list[ChromaRow]) -> None:
    """Add one page of the tenant's candidate rows to its figures and to `oldest`."""
    policy = scope.policy
    diff = diff_tenant_chunks(rows, scope.tenant.version, policy.orphan_version_gap)
    outcome.scanned += len(rows)
    outcome.stale_count += diff.stale_count
    outcome.actionable_count += diff.actionable_count
    if diff.actionable_ids:
        metadata = {row.id: row.metadata for row in rows}
        for row_id in diff.actionable_ids:
            bound = deletion_bound(metadata[row_id], read_ms=scope.read_ms)
            if bound is None:
                outcome.held_count += 1
            else:
                oldest.offer(bound)


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


def _tombstone_job(scope: _TenantScope) -> TombstoneJob:
    """What tombstoning the tenant needs: its stores, its staleness rule, its read time."""
    context, tenant, policy = scope.context, scope.tenant, scope.policy
    version, gap = tenant.version, policy.orphan_version_gap
    return TombstoneJob(
        vectors=context.vectors,
        collection=policy.collection,
        tenant_id=tenant.tenant_id,
        ceiling=actionable_stamp_ceiling(version, gap),
        is_actionable=functools.partial(is_actionable_stamp, current_version=version,
                                        orphan_version_gap=gap),
        read_ms=scope.read_ms,
        tombstones_dir=context.settings.tombstones_dir,
        pass_id=policy.pass_id,
        band_rows=tombstoning.BAND_ROWS,
    )


async def _tombstone(scope: _TenantScope, outcome: TenantOutcome, oldest: OldestIngested,
                     progress: TombstoneProgress) -> None:
    """Archive and delete the oldest actionable chunks, band by band, up to the cap
    (`progress`: what earlier shared bands already did for the tenant)."""
    context = scope.context
    outcome.phase = Phase.TOMBSTONE
    try:
        await tombstone_bands(
            _tombstone_job(scope), oldest.sorted(), cap=scope.policy.max_deletes_per_tick,
            progress=progress, stopping=lambda: context.control.stopping,
            beat=context.control.progress,
        )
    finally:
        _apply(outcome, progress)


def _apply(outcome: TenantOutcome, progress: TombstoneProgress) -> None:
    """The tenant's figures from what its tombstoning did so far."""
    outcome.tombstoned_count = progress.tombstoned
    outcome.archived_count = progress.archived
    outcome.refused_bands = progress.bands_refused
    outcome.archive = str(progress.archive.path) if progress.archive else None


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

    async def record(self, outcomes: Sequence[TenantOutcome], policy: ReconcilePolicy) -> None:
        """The `reconcile` rows of a group's tenants with stale chunks (none for a clean one)
        and `error` rows for those that failed before their stale count was known, in ONE
        transaction; what SQLite refuses goes to the spool."""
        rows = [row for o in outcomes if (row := _telemetry_row(o, policy)) is not None]
        if not rows:
            return
        try:
            await insert_metric_rows(self.graph, rows)
            return
        except Exception as exc:
            log.error("reconcile.telemetry_unrecorded", path=str(self.spool.path),
                      rows=len(rows), error=str(exc), message="kept in the spool; the next "
                      "pass writes them, and this pass does not count as done")
        try:
            await self.spool.append(rows)
        except Exception:
            self.lost += len(rows)
            for row in rows:
                log.error("reconcile.telemetry_lost", row=row.as_json(), exc_info=True)


def _telemetry_row(outcome: TenantOutcome, policy: ReconcilePolicy) -> MetricRow | None:
    """The tenant's telemetry row, or None for a clean tenant."""
    error_code = f"reconcile-{outcome.failed_phase}-failed" if outcome.failed else None
    if outcome.stale_count > 0 and outcome.failed_phase != Phase.SCAN:
        return new_metric_row(
            tenant_id=outcome.tenant_id, repo_slug=outcome.repo_slug,
            event_type=EVENT_RECONCILE, chunks_total=outcome.stale_count,
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
