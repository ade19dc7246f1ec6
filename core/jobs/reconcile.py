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
import logging
import math
import uuid
from collections.abc import Coroutine, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import structlog

from core.jobs import tombstoning
from core.jobs.reconcile_fleet import scan_group, sweep_collection
from core.jobs.tombstoning import (
    DeletionPlan,
    DeletionTarget,
    TenantRule,
    TombstoneProgress,
    run_bands,
)
from core.rules.errors import StoreUnavailable
from core.rules.explain_plan import TenantPlan, build_plan
from core.rules.figures import to_json
from core.rules.manifests import RepoManifest
from core.rules.reconcile import (
    GUARD_INVALID_CONFIG,
    GUARD_MANIFEST_MISMATCH,
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
from core.rules.reconcile_groups import (
    TenantGroup,
    group_stale_clauses,
    group_tenants,
    sweep_pays,
    within_cap,
)
from core.rules.rows import ChromaRow
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
from core.rules.tombstone_bands import plan_bands, stale_rule
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
    an earlier pass could not write are written (the spool). A tenant with a manifest or a
    policy of its own is read, guarded and tombstoned on its own (the path `reconcile
    explain` runs); the others go by groups of one version (`core.rules.reconcile_groups`):
    one candidate read and one count read serve a group, then each tenant is guarded and
    tombstoned on its own, and the group's telemetry rows are written in one transaction.
    One tenant's failure is logged with its id and counted in `failedTenants`, and the pass
    goes on to the next; a group read that fails falls back to one read per tenant.
    `unrecordedRows` counts telemetry rows still not in SQLite when the pass ends (kept in
    the spool): such a pass has not succeeded. When the daemon is stopping, the pass returns
    between groups, tenants or bands (never inside one) with `stopped: true`; the next pass
    starts over, so nothing is lost.
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
    tenants = await list_tenants(context.graph)
    manifests = await all_manifests(context.graph)
    outcomes = await _all_tenants(context, tenants, policy, manifests, recorder)
    return ReconcileFigures.of(
        outcomes, enabled=settings.reconciliation_enabled, auto_tombstone=policy.auto_tombstone,
        pass_id=policy.pass_id, spool_flushed=recorder.flushed,
        unrecorded_rows=spool.pending() + recorder.lost,
        stopped=len(outcomes) < len(tenants) or context.control.stopping)


async def _all_tenants(
    context: TickContext, tenants: list[TenantConfig], policy: ReconcilePolicy,
    manifests: Mapping[str, Mapping[str, RepoManifest]], recorder: _Recorder,
) -> list[TenantOutcome]:
    """Every tenant's outcome, in the tenants' order; fewer when the daemon is stopping.
    The tenants the groups cannot serve exactly (`_grouped`) go one by one on the
    per-tenant path first, each tenant's row recorded as it is done; then the others by
    groups, each group's rows recorded before the next."""
    default = _resolve(None, policy)
    plain = [t for t in tenants if _grouped(t, policy, default, manifests)]
    plain_ids = {t.tenant_id for t in plain}
    outcomes: list[TenantOutcome] = []
    for tenant in (t for t in tenants if t.tenant_id not in plain_ids):
        if context.control.stopping:
            break
        with structlog.contextvars.bound_contextvars(tenant=tenant.tenant_id):
            outcome, _ = await reconcile_tenant(context, tenant, policy,
                                                manifests.get(tenant.tenant_id, {}))
        if not policy.dry_run:
            await recorder.record([outcome], policy)
        outcomes.append(outcome)
        context.control.progress()
    if not context.control.stopping:
        outcomes += await _by_groups(context, plain, policy, recorder)
    if context.control.stopping:
        log.info("reconcile.stopping", tenantsLeft=len(tenants) - len(outcomes))
    place = {tenant.tenant_id: i for i, tenant in enumerate(tenants)}
    outcomes.sort(key=lambda o: place[o.tenant_id])  # the figures list tenants in id order
    return outcomes


def _grouped(tenant: TenantConfig, policy: ReconcilePolicy, default: TenantPolicy,
             manifests: Mapping[str, Mapping[str, RepoManifest]]) -> bool:
    """Whether the groups serve this tenant: a valid version, no manifest (a group reads
    candidates by version only; a manifest needs all the tenant's chunks) and the pass's
    own policy in force (a group's shared bands use one gap; a tenant's own gap, grace or
    autoTombstone, or an invalid stored value, takes the per-tenant path). When in doubt,
    the per-tenant path: it is the reference the groups must equal. `default` is the pass's
    own policy resolved once (`_resolve(None, policy)`), which is also what a tenant with
    nothing stored resolves to."""
    if tenant.version < 1 or manifests.get(tenant.tenant_id):
        return False
    own = default if tenant.stored_policy is None else _resolve(tenant.stored_policy, policy)
    return not own.invalid_keys and (own.gap, own.grace_ms, own.deletes) == (
        default.gap, default.grace_ms, default.deletes)


def _resolve(stored: Any, policy: ReconcilePolicy) -> TenantPolicy:
    """The policy in force for a tenant whose node holds `stored`, under the pass's."""
    return resolve_tenant_policy(stored, global_gap=policy.orphan_version_gap,
                                 global_grace_ms=policy.manifest_grace_ms,
                                 global_auto_tombstone=policy.auto_tombstone)


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
    await _guarded(outcome, policy, _reconcile(scope, outcome, tally))
    _log_outcome(outcome, policy)
    return outcome, tally


async def _reconcile(scope: _TenantScope, outcome: TenantOutcome, tally: TenantTally) -> None:
    """Scan the tenant; then, when tombstoning is on for it and some chunks are actionable,
    hold back when a guard says so, else tombstone the oldest up to the cap."""
    await _scan(scope, outcome, tally)
    if await _clear_to_tombstone(scope, outcome, tally, counted=None):
        await _tombstone(scope, outcome, tally)


async def _clear_to_tombstone(scope: _TenantScope, outcome: TenantOutcome, tally: TenantTally,
                              counted: int | None) -> bool:
    """When tombstoning is on for the tenant (or explaining) and some chunks are actionable,
    apply the guards; True (and the phase TOMBSTONE) when the pass may tombstone it now.
    `counted`: the tenant's chunk count when a group read already has it."""
    if not ((scope.tenant_policy.deletes or scope.explain) and outcome.actionable_count > 0):
        return False
    if scope.policy.invalid_pass_guards:
        outcome.guard = GUARD_INVALID_CONFIG
        return False
    outcome.phase = Phase.COUNT
    if await _too_large_a_share(scope, outcome, tally, counted) or not scope.deletes:
        return False
    outcome.phase = Phase.TOMBSTONE
    return True


async def _too_large_a_share(
    scope: _TenantScope, outcome: TenantOutcome, tally: TenantTally, counted: int | None
) -> bool:
    """Count the tenant's chunks (known from the scan when it read them all, or `counted` by a
    group read; else counted only as far as the answer needs: past actionable / fraction it
    cannot change) and apply the stale-fraction guard to the union of actionable chunks; True
    (and the guard set) when the pass must not tombstone this tenant."""
    policy = scope.policy
    if scope.manifests:
        outcome.total_chunks, outcome.total_complete = tally.scanned, True
    elif counted is not None:
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
        tenant_policy = _resolve(tenant.stored_policy, policy)
        if tenant_policy.invalid_keys:
            log.warning("reconcile.tenant_policy_invalid", keys=list(tenant_policy.invalid_keys),
                        message="an invalid per-tenant policy value fails closed: nothing is "
                        "actionable by what it governs until it is fixed (tenants set-policy)")
        rules = ScanRules(tenant.tenant_id, tenant.version, tenant_policy.gap, manifests,
                          tenant_policy.grace_ms, read_ms=now_ms(),
                          max_stale_fraction=policy.max_stale_fraction)
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
    _take_tally(scope, outcome, tally)


def _take_tally(scope: _TenantScope, outcome: TenantOutcome, tally: TenantTally) -> None:
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
    outcome.scanned = tally.scanned
    outcome.stale_count = tally.stale_count
    outcome.manifest_orphan_count = tally.manifest_orphan_count
    outcome.total_orphan_count = tally.total_orphan_count
    outcome.actionable_count = tally.actionable_count
    outcome.held_count = tally.held_count
    outcome.malformed_count = tally.malformed_count
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


async def _tombstone(scope: _TenantScope, outcome: TenantOutcome, tally: TenantTally,
                     progress: TombstoneProgress | None = None) -> None:
    """Archive and delete the oldest actionable chunks, band by band, up to the cap: the
    config-stale ones first, then each repo's manifest orphans (one archive for the tenant;
    the cap counts both). `progress`: what an earlier plan of this pass already did for the
    tenant."""
    context, tenant, rules = scope.context, scope.tenant, scope.rules
    outcome.phase = Phase.TOMBSTONE
    progress = progress or TombstoneProgress()
    run = functools.partial(run_bands, _target(context, scope.policy),
                            cap=scope.policy.max_deletes_per_tick,
                            progress={tenant.tenant_id: progress}, control=context.control)
    try:
        if len(tally.oldest_stale) and rules.gap is not None:
            ceiling = actionable_stamp_ceiling(tenant.version, rules.gap)
            await run(_stale_plan([scope], ceiling, tally.oldest_stale.sorted()))
        for slug, oldest in sorted(tally.oldest_orphans.items()):
            if len(oldest) and not context.control.stopping:
                manifest = scope.manifests[slug]
                await run(DeletionPlan(
                    "manifest-orphan", orphan_clauses(tenant.tenant_id, manifest),
                    {tenant.tenant_id: TenantRule(orphan_rule(tenant.tenant_id, manifest),
                                                  rules.read_ms)},
                    orphan_bands(oldest.sorted(), band_rows=tombstoning.BAND_ROWS)))
    finally:
        _apply(outcome, progress)


def _apply(outcome: TenantOutcome, progress: TombstoneProgress) -> None:
    """The tenant's figures from what its tombstoning did so far."""
    outcome.tombstoned_count = progress.tombstoned
    outcome.archived_count = progress.archived
    outcome.refused_bands = progress.bands_refused
    outcome.archive = str(progress.archive.path) if progress.archive else None


def _target(context: TickContext, policy: ReconcilePolicy) -> DeletionTarget:
    """Where this pass deletes from and archives to."""
    return DeletionTarget(context.vectors, policy.collection,
                          context.settings.tombstones_dir, policy.pass_id)


def _stale_plan(scopes: Sequence[_TenantScope], ceiling: int | float,
                values: Sequence[int | float]) -> DeletionPlan:
    """The config-stale plan of these tenants (stamps at or below `ceiling`, one shared by
    them all), over the sorted `ingestedAt` of their oldest deletable chunks."""
    ids = [s.tenant.tenant_id for s in scopes]
    return DeletionPlan(
        "stale", group_stale_clauses(ids, ceiling),
        {s.tenant.tenant_id: TenantRule(stale_rule(s.tenant.tenant_id,
                                                   s.rules.stale_actionable), s.rules.read_ms)
         for s in scopes},
        plan_bands(values, band_rows=tombstoning.BAND_ROWS))


async def _by_groups(context: TickContext, tenants: Sequence[TenantConfig],
                     policy: ReconcilePolicy, recorder: _Recorder) -> list[TenantOutcome]:
    """The grouped tenants' outcomes, group by group (one sweep of the whole collection when
    it pays, else one candidate read per group; a failed group read falls back to one read
    per tenant), each group's telemetry recorded before the next; fewer when stopping."""
    outcomes: list[TenantOutcome] = []
    swept = await _read_sweep(context, tenants, policy)
    for group in group_tenants(tenants):
        if context.control.stopping:
            break
        read = swept.only(group) if swept else await _read_group(context, group, policy)
        done = (await _finish_group(context, read, policy) if read is not None
                else await _one_by_one(context, group, policy))
        if not policy.dry_run:
            await recorder.record(done, policy)
        outcomes.extend(done)
        context.control.progress()
    return outcomes


@dataclass(slots=True)
class _GroupRead:
    """What the reads of a group of tenants found, per tenant: its scope, its figures so far,
    its tally (the same one a per-tenant scan keeps), and its chunk count when a read
    counted it."""

    scopes: dict[str, _TenantScope]
    outcomes: dict[str, TenantOutcome]
    tallies: dict[str, TenantTally]
    counts: dict[str, int]

    @classmethod
    def empty(cls, context: TickContext, tenants: Sequence[TenantConfig],
              policy: ReconcilePolicy) -> _GroupRead:
        """Nothing read yet (each tenant's read time is now; grouped tenants have no
        manifest)."""
        scopes = {t.tenant_id: _TenantScope.of(context, t, policy, {}, explain=False)
                  for t in tenants}
        outcomes = {t.tenant_id: TenantOutcome(t.tenant_id, t.repo_slug, t.version)
                    for t in tenants}
        for tenant_id, scope in scopes.items():
            scope.describe(outcomes[tenant_id])
        return cls(scopes, outcomes,
                   {t: TenantTally(s.rules, cap=s.cap, keep_rows=False)
                    for t, s in scopes.items()}, {})

    def tally(self, tenant_id: str, rows: list[ChromaRow]) -> None:
        """Add a page's candidate rows of one tenant."""
        self.tallies[tenant_id].add_page(rows)

    def only(self, group: TenantGroup) -> _GroupRead:
        """The part of a sweep's read that is this group's."""
        ids = group.tenant_ids
        return _GroupRead({t: self.scopes[t] for t in ids}, {t: self.outcomes[t] for t in ids},
                          {t: self.tallies[t] for t in ids},
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
        await _guarded(outcome, policy, _judge(read, tenant_id))
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
                                                   read.tallies[tenant_id], progress[tenant_id]))
    for outcome in done:
        _log_outcome(outcome, policy)
    return done


async def _judge(read: _GroupRead, tenant_id: str) -> None:
    """A read tenant's figures from its tally, then its guards (the phase TOMBSTONE when
    cleared), as its own pass would judge them."""
    scope, outcome, tally = read.scopes[tenant_id], read.outcomes[tenant_id], read.tallies[
        tenant_id]
    _take_tally(scope, outcome, tally)
    await _clear_to_tombstone(scope, outcome, tally, read.counts.get(tenant_id))


async def _guarded(outcome: TenantOutcome, policy: ReconcilePolicy,
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
            outcome.failed_phase = outcome.phase
            outcome.error = f"{type(exc).__name__}: {exc}"
            log.error("reconcile.tenant_failed", phase=str(outcome.phase), error=outcome.error,
                      exc_info=True)


def _log_outcome(outcome: TenantOutcome, policy: ReconcilePolicy) -> None:
    """The tenant's one `reconcile.tenant` line: its figures when its pass is done. Not
    built when info lines are off (at 10,000 tenants, building them was about a third of a
    dry pass's own Python work in a profile)."""
    if not log.isEnabledFor(logging.INFO):
        return
    log.info("reconcile.tenant", dryRun=policy.dry_run, failed=outcome.failed,
             tenant=outcome.tenant_id, **to_json(outcome.figures()))


async def _tombstone_shared(context: TickContext, read: _GroupRead, policy: ReconcilePolicy,
                            tenant_ids: list[str],
                            progress: dict[str, TombstoneProgress]) -> bool:
    """Tombstone these tenants (one version, one gap, each under the cap) with one plan, whose
    bands serve them all; False when they do not share one stamp ceiling, or when the plan
    raised (a read, a write or a delete failed: the engine's failure policy,
    `core.jobs.tombstoning`). The caller then runs each tenant as a plan of its own,
    continuing its progress, so that only the tenant whose part fails is failed: one tenant
    cannot fail the others."""
    scopes = [read.scopes[t] for t in tenant_ids]
    ceilings = {actionable_stamp_ceiling(s.tenant.version, s.rules.gap)
                for s in scopes if s.rules.gap is not None}
    if len(ceilings) != 1 or any(s.rules.gap is None for s in scopes):
        return False
    values = sorted(v for t in tenant_ids for v in read.tallies[t].oldest_stale.sorted())
    try:
        await run_bands(_target(context, policy), _stale_plan(scopes, ceilings.pop(), values),
                        cap=policy.max_deletes_per_tick,
                        progress={t: progress[t] for t in tenant_ids}, control=context.control)
    except Exception as exc:
        log.warning("reconcile.shared_plan_failed", tenants=len(tenant_ids),
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
        with structlog.contextvars.bound_contextvars(tenant=tenant.tenant_id):
            outcome, _ = await reconcile_tenant(context, tenant, policy, {})
        done.append(outcome)
    return done


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
        """One `reconcile` row per tenant with drift (stale or orphaned chunks, or missing
        paths; none for a clean one) and an `error` row per tenant that failed before its
        counts were known, a group's rows in ONE transaction; what SQLite refuses goes to the
        spool."""
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
