"""Config-invalidation reconciliation: find a tenant's chunks stamped with a superseded config
version, report them, and (opt-in, guarded, archived first) tombstone them.

Two layers, kept apart:

- **The engine** (`diff_tenant_chunks` and the small `*_` helpers beside it) is pure: plain
  data in, plain data out; no I/O, no clock. It is the only place that decides whether a chunk
  is stale or actionable, and it is applied again to every row right before it is deleted.
- **The pass** (`reconcile_tick`) is the I/O around it: tenants from the graph, candidate
  chunks from Chroma page by page, the stale-fraction guard, archive-then-delete, telemetry.

Paging: the candidate read (`tenantId` and `tenantConfigVersion < current`, metadatas only) is
read-only, so it pages by offset. The delete phase never does: deleting shifts every later
offset and would skip rows, so it takes the *first* page of the still-actionable set again and
again until the cap is reached or nothing actionable is left. Memory is bounded by one page.

Safety of a delete, in order: ids come only from a tenant-filtered read; the engine re-checks
each row; right before each batch a `get` of exactly those ids confirms every one still
carries this tenant's `tenantId` and an actionable stamp (others are dropped and logged); the
confirmed rows are archived and fsynced; then the batch is deleted by ids alone (never with
`where`: ~150x slower on Chroma 1.5.9).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import structlog

from core.clock import now_ms
from core.config import KEYS_BY_NAME
from core.telemetry import EVENT_ERROR, EVENT_RECONCILE, record_ingestion_metric
from core.tenants import TenantConfig, list_tenants
from core.tombstones import TombstoneArchive
from core.vectors import SCAN_PAGE_ROWS, CollectionMissing

if TYPE_CHECKING:
    from core.config import Settings
    from core.stores import Stores
    from core.vectors import ChromaRow, VectorStore

log = structlog.get_logger(__name__)

#: The gap used when the configured one is unusable: the config default, never re-spelled.
DEFAULT_ORPHAN_VERSION_GAP: float = KEYS_BY_NAME["reconciliationOrphanVersionGap"].default
#: The metadata keys the engine reads (CONTRACT's knowledge-base chunk fields).
TENANT_KEY = "tenantId"
STAMP_KEY = "tenantConfigVersion"
#: The telemetry/figures value of `guard` when the stale-fraction guard stopped a tenant.
GUARD_STALE_FRACTION = "stale-fraction"
#: Rows per delete batch. Each batch is read again with embeddings and documents (for the
#: archive), the heaviest read of a pass: embeddings arrive as Python floats (~32 bytes each),
#: and Chroma's buffers come on top. Measured on a 100,000-chunk tenant (384-dim embeddings,
#: 10,000 tombstoned in one pass), peak growth of the process: batches of 2,000 190-225 MB,
#: 1,000 130-140 MB, 500 80-105 MB, 250 72-91 MB; 250 takes ~11 s against ~9 s for 500.
#: 250 keeps a pass inside the 100 MB budget. See README "Reconciliation".
TOMBSTONE_BATCH_ROWS = 250
#: Rows per read of the actionable set in the delete phase (ids and metadatas only): the
#: candidate scan's page. Every read re-runs the `where` over the whole tenant (~0.13 s at
#: 100,000 chunks), so the set is read a page at a time and each page is then deleted
#: TOMBSTONE_BATCH_ROWS at a time. One read per 250-row batch took 40 reads, 5.3 s of a 10.5 s
#: pass tombstoning 10,000 of 100,000 chunks; pages of 10,000 were no faster than pages of
#: 2,000 but peaked 40 MB higher (measured).
TOMBSTONE_PAGE_ROWS = SCAN_PAGE_ROWS
#: Rows per page when counting a tenant's chunks for the guard (ids only). Each page re-runs
#: the `where` over the tenant and skips its offset, so fewer, larger pages are faster, while
#: Chroma's buffers for a page grow the process. Counting 100,000 chunks (measured): pages of
#: 2,000 ~4 s slower than 10,000; 10,000 1.1-1.6 s, +15 MB peak; 25,000 0.61-0.67 s, +31 MB;
#: 50,000 0.56-0.61 s, +47 MB. 25,000 takes most of the gain for half the memory of 50,000.
COUNT_PAGE_ROWS = 25_000
#: How many dropped ids a log line names (all of them are counted).
DROPPED_IDS_NAMED = 20


# --------------------------------------------------------------------------------------------
# The engine (pure)
# --------------------------------------------------------------------------------------------


def is_real_number(value: Any) -> bool:
    """True for a finite int or float; False for bool (an int subclass), NaN, ±inf, strings."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def resolve_orphan_version_gap(value: Any) -> float:
    """The gap threshold to use: `value` when it is a finite number >= 1, else the default.

    The floor is 1 because every stale chunk has a gap of at least 1: a threshold of 1 means
    "no grace", and anything lower would mean nothing different but look like a typo.
    """
    return value if is_real_number(value) and value >= 1 else DEFAULT_ORPHAN_VERSION_GAP


@dataclass(frozen=True, slots=True)
class StaleOrphan:
    """A chunk stamped with an older config version than its tenant's current one."""

    id: str
    tenant_config_version: int | float
    version_gap: int | float

    def as_dict(self) -> dict[str, Any]:
        """The original's `{id, tenantConfigVersion, versionGap}` shape."""
        return {
            "id": self.id,
            "tenantConfigVersion": self.tenant_config_version,
            "versionGap": self.version_gap,
        }


@dataclass(frozen=True, slots=True)
class TenantDiff:
    """The engine's verdict on a set of rows."""

    stale_orphans: tuple[StaleOrphan, ...] = ()
    actionable_ids: tuple[str, ...] = ()

    @property
    def stale_count(self) -> int:
        """How many rows are stale (each id once)."""
        return len(self.stale_orphans)

    @property
    def actionable_count(self) -> int:
        """How many stale rows are at least the gap threshold behind."""
        return len(self.actionable_ids)

    def as_dict(self) -> dict[str, Any]:
        """`{staleOrphans, staleCount, actionableIds, actionableCount}`, as the original."""
        return {
            "staleOrphans": [o.as_dict() for o in self.stale_orphans],
            "staleCount": self.stale_count,
            "actionableIds": list(self.actionable_ids),
            "actionableCount": self.actionable_count,
        }


EMPTY_DIFF = TenantDiff()


def _id_and_metadata(row: Any) -> tuple[Any, Any]:
    """A row's id and metadata, from a `{id, metadata}` mapping or a ChromaRow-like object."""
    if isinstance(row, Mapping):
        return row.get("id"), row.get("metadata")
    return getattr(row, "id", None), getattr(row, "metadata", None)


def diff_tenant_chunks(
    rows: Any, current_version: Any, orphan_version_gap: Any = None
) -> TenantDiff:
    """Classify one tenant's rows into stale orphans and the actionable subset.

    A row is stale when its `tenantConfigVersion` is a real, finite number (a bool is not)
    below `current_version`; its gap is `current_version - stamp`; it is actionable when the
    gap is at least the resolved threshold (see `resolve_orphan_version_gap`).

    Fail-safe throughout: a current version that is not a positive number (a tenant with no
    config node is at 0), rows that are not a list, a row without a string id, and a row
    whose stamp is missing or not a number (ingested before stamps existed) give nothing to
    act on. Each id counts once (the original passed duplicates to delete twice); order is
    the input's.
    """
    if not isinstance(rows, (list, tuple)):
        return EMPTY_DIFF
    if not is_real_number(current_version) or current_version <= 0:
        return EMPTY_DIFF
    threshold = resolve_orphan_version_gap(orphan_version_gap)
    seen: set[str] = set()
    stale: list[StaleOrphan] = []
    actionable: list[str] = []
    for row in rows:
        row_id, metadata = _id_and_metadata(row)
        if not isinstance(row_id, str) or row_id in seen or not isinstance(metadata, Mapping):
            continue
        stamp: Any = metadata.get(STAMP_KEY)
        if not is_real_number(stamp) or not stamp < current_version:
            continue
        seen.add(row_id)
        gap = current_version - stamp
        stale.append(StaleOrphan(row_id, stamp, gap))
        if gap >= threshold:
            actionable.append(row_id)
    return TenantDiff(tuple(stale), tuple(actionable))


def stale_fraction_exceeded(*, actionable: int, total: int, max_fraction: float) -> bool:
    """Whether tombstoning `actionable` of a tenant's `total` chunks is too much at once.

    True when actionable / total > max_fraction. With actionable chunks but a total of 0 (the
    chunks vanished between the two reads) it is True: when in doubt, delete nothing.
    """
    if actionable <= 0:
        return False
    if total <= 0:
        return True
    return actionable / total > max_fraction


def actionable_stamp_ceiling(current_version: int, orphan_version_gap: Any) -> int | float:
    """The operand for Chroma's `$lte` that selects the actionable stamps (`stamp <= current -
    gap`), as an int when whole.

    Chroma 1.5.9 compares an integer stamp against a fractional operand by truncating the
    operand toward zero (measured: `$lte 2.5` matches int 2, `$lte -0.5` matches int 0). That
    is exact for a ceiling >= 0; below zero the ceiling is floored instead, so no integer stamp
    above it comes back (a fractional stamp between the two is then left for a later look:
    never deleted wrongly, and the engine re-checks every row anyway).
    """
    ceiling = current_version - resolve_orphan_version_gap(orphan_version_gap)
    if float(ceiling).is_integer():
        return int(ceiling)
    return ceiling if ceiling >= 0 else math.floor(ceiling)


def confirm_tombstone_rows(
    rows: Sequence[ChromaRow],
    *,
    tenant_id: str,
    current_version: int,
    orphan_version_gap: Any,
) -> list[ChromaRow]:
    """The rows, freshly read, that may still be deleted: this tenant's and still actionable.

    Guards against everything that can change between the candidate read and the delete: an
    id re-used by another tenant, a chunk re-ingested at the current version meanwhile.
    """
    actionable = set(
        diff_tenant_chunks(
            [r for r in rows if r.metadata.get(TENANT_KEY) == tenant_id],
            current_version,
            orphan_version_gap,
        ).actionable_ids
    )
    confirmed: list[ChromaRow] = []
    for row in rows:
        if row.id in actionable:
            confirmed.append(row)
            actionable.discard(row.id)
    return confirmed


def candidate_where(tenant_id: str, current_version: int) -> dict[str, Any]:
    """Chroma `where` for a tenant's possibly stale chunks (stamp below the current version).

    Chroma's `$lt` matches numeric metadata only, so string and boolean stamps never come
    back; the engine would skip them anyway.
    """
    return {"$and": [{TENANT_KEY: tenant_id}, {STAMP_KEY: {"$lt": current_version}}]}


def actionable_where(tenant_id: str, ceiling: int | float) -> dict[str, Any]:
    """Chroma `where` for a tenant's actionable chunks (stamp at or below the ceiling)."""
    return {"$and": [{TENANT_KEY: tenant_id}, {STAMP_KEY: {"$lte": ceiling}}]}


# --------------------------------------------------------------------------------------------
# The pass (I/O)
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ReconcilePolicy:
    """The settings one pass runs under, read once so every tenant sees the same ones."""

    collection: str
    auto_tombstone: bool
    orphan_version_gap: float
    max_deletes_per_tick: int
    max_stale_fraction: float
    dry_run: bool

    @classmethod
    def from_settings(cls, settings: Settings, *, dry_run: bool) -> ReconcilePolicy:
        """The pass's policy; `auto_tombstone` is exactly the setting (a TOML `true` only,
        already enforced by the config reader)."""
        return cls(
            collection=settings.knowledge_base_collection,
            auto_tombstone=settings.reconciliation_auto_tombstone is True,
            orphan_version_gap=resolve_orphan_version_gap(
                settings.reconciliation_orphan_version_gap
            ),
            max_deletes_per_tick=settings.reconciliation_max_deletes_per_tick,
            max_stale_fraction=settings.reconciliation_max_stale_fraction,
            dry_run=dry_run,
        )


@dataclass(slots=True)
class TenantOutcome:
    """One tenant's figures, filled in as its pass proceeds."""

    tenant_id: str
    repo_slug: str | None
    current_version: int
    scanned: int = 0
    stale_count: int = 0
    actionable_count: int = 0
    tombstoned_count: int = 0
    guard: str | None = None
    #: All of the tenant's chunks, when counted (only for the guard).
    total_chunks: int | None = None
    archive: str | None = None
    #: Ids dropped by the pre-delete confirmation.
    dropped_count: int = 0
    #: Where the tenant failed ("scan", "count", "tombstone") and why; None when it did not.
    failed_phase: str | None = None
    error: str | None = None

    @property
    def failed(self) -> bool:
        """Whether this tenant's pass could not finish."""
        return self.failed_phase is not None

    def figures(self) -> dict[str, Any]:
        """The tenant's entry in the tick's `--json` figures."""
        return {
            "tenantId": self.tenant_id,
            "repoSlug": self.repo_slug,
            "currentVersion": self.current_version,
            "scanned": self.scanned,
            "staleCount": self.stale_count,
            "actionableCount": self.actionable_count,
            "tombstonedCount": self.tombstoned_count,
            "guard": self.guard,
        }

    def telemetry_detail(self, policy: ReconcilePolicy) -> dict[str, Any]:
        """The `detail` of the tenant's `reconcile` row (CONTRACT's keys first)."""
        detail: dict[str, Any] = {
            "staleCount": self.stale_count,
            "actionableCount": self.actionable_count,
            "tombstonedCount": self.tombstoned_count,
            "currentVersion": self.current_version,
            "autoTombstone": policy.auto_tombstone,
            "orphanVersionGap": policy.orphan_version_gap,
            "maxDeletesPerTick": policy.max_deletes_per_tick,
            "scanned": self.scanned,
        }
        optional = {
            "guard": self.guard,
            "totalChunks": self.total_chunks,
            "maxStaleFraction": policy.max_stale_fraction if self.guard else None,
            "archive": self.archive,
            "droppedCount": self.dropped_count or None,
            "failedPhase": self.failed_phase,
            "error": self.error,
        }
        detail.update({k: v for k, v in optional.items() if v is not None})
        return detail


class TombstoneFailed(Exception):
    """A delete batch failed; the outcome already holds what actually went."""


async def reconcile_tick(stores: Stores, dry_run: bool) -> dict[str, Any]:
    """One reconciliation pass over every tenant with a config node: the tick function that
    `core.ticks.run_tick("reconcile", ...)` runs for `--tick` and for the scheduler (which
    adds `durationMs`, and `dryRun` to its log line; the figures must not repeat them).

    Disabled (and not a dry run): logs "reconciliation disabled" and touches nothing. A dry
    run works either way and writes nothing: no telemetry, no archive, no delete. Tenants run
    one after another; one tenant's failure is logged with its id and counted in
    `failedTenants`, and the pass goes on to the next. When the daemon is stopping, the pass
    returns between tenants or delete batches (never inside one) with `stopped: true`; the
    next pass starts over, so nothing is lost.
    """
    settings = stores.settings
    if not settings.reconciliation_enabled and not dry_run:
        log.info("reconcile.disabled", message="reconciliation disabled "
                 "(set reconciliationEnabled = true to run passes)")
        return {"enabled": False, "tenants": [], "failedTenants": 0}
    policy = ReconcilePolicy.from_settings(settings, dry_run=dry_run)
    outcomes: list[TenantOutcome] = []
    tenants = await list_tenants(stores.graph)
    for tenant in tenants:
        if stores.control.stopping:
            log.info("reconcile.stopping", tenantsLeft=len(tenants) - len(outcomes))
            break
        with structlog.contextvars.bound_contextvars(tenant=tenant.tenant_id):
            outcomes.append(await reconcile_tenant(stores, tenant, policy))
        stores.control.progress()
    return {
        "enabled": settings.reconciliation_enabled,
        "autoTombstone": policy.auto_tombstone,
        "tenants": [o.figures() for o in outcomes],
        "failedTenants": sum(o.failed for o in outcomes),
        "staleCount": sum(o.stale_count for o in outcomes),
        "tombstonedCount": sum(o.tombstoned_count for o in outcomes),
        "archives": [o.archive for o in outcomes if o.archive],
        "stopped": len(outcomes) < len(tenants),
    }


async def reconcile_tenant(
    stores: Stores, tenant: TenantConfig, policy: ReconcilePolicy
) -> TenantOutcome:
    """Scan, guard, tombstone and report one tenant; never raises (failures are recorded in
    the outcome and logged with the tenant's id)."""
    outcome = TenantOutcome(tenant.tenant_id, tenant.repo_slug, tenant.version)
    if tenant.version < 1:
        log.warning("reconcile.tenant_skipped", reason="no valid config version")
        return outcome
    vectors = stores.vectors
    phase = "scan"
    try:
        await _scan_candidates(stores, tenant, policy, outcome)
        if policy.auto_tombstone and outcome.actionable_count > 0:
            phase = "count"
            outcome.total_chunks = await count_tenant_chunks(
                vectors, policy.collection, tenant.tenant_id
            )
            if stale_fraction_exceeded(
                actionable=outcome.actionable_count,
                total=outcome.total_chunks,
                max_fraction=policy.max_stale_fraction,
            ):
                outcome.guard = GUARD_STALE_FRACTION
                log.warning(
                    "reconcile.guard", guard=GUARD_STALE_FRACTION,
                    actionableCount=outcome.actionable_count, totalChunks=outcome.total_chunks,
                    maxStaleFraction=policy.max_stale_fraction,
                    message="refusing to tombstone: too large a share of the tenant would go; "
                    "check the tenant's config version before raising the limit",
                )
            elif not policy.dry_run:
                phase = "tombstone"
                await _tombstone_actionable(stores, tenant, policy, outcome)
    except CollectionMissing:
        # No knowledge-base collection yet: there is nothing of this tenant to reconcile.
        log.warning("reconcile.no_collection", collection=policy.collection)
    except Exception as exc:
        outcome.failed_phase = phase
        outcome.error = f"{type(exc).__name__}: {exc}"
        log.error("reconcile.tenant_failed", phase=phase, error=outcome.error, exc_info=True)
    if not policy.dry_run:
        await _record_outcome(stores, outcome, policy)
    log.info("reconcile.tenant", dryRun=policy.dry_run, failed=outcome.failed,
             **outcome.figures())
    return outcome


async def _scan_candidates(
    stores: Stores, tenant: TenantConfig, policy: ReconcilePolicy, outcome: TenantOutcome
) -> None:
    """Count the tenant's stale and actionable chunks, one page of metadatas at a time (only
    the figures are kept, so memory is one page whatever the tenant's size)."""
    where = candidate_where(tenant.tenant_id, tenant.version)
    async for page in stores.vectors.scan(
        policy.collection, where=where, include=("metadatas",)
    ):
        diff = diff_tenant_chunks(page, tenant.version, policy.orphan_version_gap)
        outcome.scanned += len(page)
        outcome.stale_count += diff.stale_count
        outcome.actionable_count += diff.actionable_count
        stores.control.progress()


async def count_tenant_chunks(vectors: VectorStore, collection: str, tenant_id: str) -> int:
    """All of a tenant's chunks, counted from an ids-only paged read (nothing is deleting
    during it, so offset paging is exact)."""
    total = 0
    async for page in vectors.scan(
        collection, where={TENANT_KEY: tenant_id}, include=(), page_rows=COUNT_PAGE_ROWS
    ):
        total += len(page)
    return total


async def _tombstone_actionable(
    stores: Stores, tenant: TenantConfig, policy: ReconcilePolicy, outcome: TenantOutcome
) -> None:
    """Delete up to the cap of the tenant's actionable chunks, archiving each batch first.

    Takes the first page of the actionable set each time (never an offset into a set it is
    shrinking) and deletes it batch by batch, each batch confirmed by a fresh read right
    before it goes. Stops early when a page or a batch holds nothing the engine and the
    confirmation accept, so rows that Chroma matches but the engine refuses cannot make it spin.
    """
    where = actionable_where(
        tenant.tenant_id, actionable_stamp_ceiling(tenant.version, policy.orphan_version_gap)
    )
    vectors = stores.vectors
    archive: TombstoneArchive | None = None
    remaining = policy.max_deletes_per_tick
    while remaining > 0 and not stores.control.stopping:
        page = await vectors.first_page(
            policy.collection, where=where, include=("metadatas",),
            page_rows=min(TOMBSTONE_PAGE_ROWS, remaining),
        )
        page_ids = diff_tenant_chunks(
            page, tenant.version, policy.orphan_version_gap
        ).actionable_ids
        if not page_ids:
            if page:
                log.warning("reconcile.unclassifiable_page", rows=len(page))
            return
        for start in range(0, len(page_ids), TOMBSTONE_BATCH_ROWS):
            if stores.control.stopping:
                return
            candidate_ids = page_ids[start:start + TOMBSTONE_BATCH_ROWS]
            fresh = await vectors.get_by_ids(
                policy.collection, candidate_ids,
                include=("metadatas", "documents", "embeddings"),
            )
            confirmed = confirm_tombstone_rows(
                fresh, tenant_id=tenant.tenant_id, current_version=tenant.version,
                orphan_version_gap=policy.orphan_version_gap,
            )
            _log_dropped(candidate_ids, confirmed, outcome)
            if not confirmed:
                return
            if archive is None:
                archive = await TombstoneArchive.create(
                    stores.settings.tombstones_dir, collection=policy.collection,
                    tenant_id=tenant.tenant_id, now_ms=now_ms(),
                )
                outcome.archive = str(archive.path)
            await archive.append(confirmed, archived_at_ms=now_ms())
            ids = [row.id for row in confirmed]
            try:
                await vectors.delete_ids(policy.collection, ids)
            except Exception as exc:
                gone = await _count_gone(vectors, policy.collection, ids)
                outcome.tombstoned_count += gone
                raise TombstoneFailed(
                    f"delete of {len(ids)} chunks failed ({gone} went): {exc}"
                ) from exc
            outcome.tombstoned_count += len(ids)
            remaining -= len(ids)
            stores.control.progress()
            log.info("reconcile.tombstoned_batch", count=len(ids), archive=outcome.archive)


def _log_dropped(
    candidate_ids: Sequence[str], confirmed: Sequence[ChromaRow], outcome: TenantOutcome
) -> None:
    """Name (some of) the ids the pre-delete confirmation refused, and count them all."""
    kept = {row.id for row in confirmed}
    dropped = [i for i in candidate_ids if i not in kept]
    if dropped:
        outcome.dropped_count += len(dropped)
        log.warning(
            "reconcile.ids_dropped", count=len(dropped), ids=dropped[:DROPPED_IDS_NAMED],
            message="no longer this tenant's or no longer actionable (gone, re-used by "
            "another tenant, or re-ingested) between the read and the delete; not deleted",
        )


async def _count_gone(vectors: VectorStore, collection: str, ids: Sequence[str]) -> int:
    """How many of `ids` no longer exist, after a failing delete (0 when that cannot be read:
    the telemetry must not claim deletions that may not have happened)."""
    try:
        still_there = await vectors.get_by_ids(collection, ids, include=())
    except Exception:
        log.warning("reconcile.delete_outcome_unknown", count=len(ids), exc_info=True)
        return 0
    return len(ids) - len(still_there)


async def _record_outcome(stores: Stores, outcome: TenantOutcome, policy: ReconcilePolicy) -> None:
    """One `reconcile` row for a tenant with stale chunks (none for a clean one); an `error`
    row for a tenant that failed before its stale count was known."""
    if outcome.stale_count > 0 and outcome.failed_phase != "scan":
        await record_ingestion_metric(
            stores.graph,
            tenant_id=outcome.tenant_id,
            repo_slug=outcome.repo_slug,
            event_type=EVENT_RECONCILE,
            chunks_total=outcome.stale_count,
            chunks_deleted=outcome.tombstoned_count,
            error_code=f"reconcile-{outcome.failed_phase}-failed" if outcome.failed else None,
            detail=outcome.telemetry_detail(policy),
        )
    elif outcome.failed:
        await record_ingestion_metric(
            stores.graph,
            tenant_id=outcome.tenant_id,
            repo_slug=outcome.repo_slug,
            event_type=EVENT_ERROR,
            error_code=f"reconcile-{outcome.failed_phase}-failed",
            detail=outcome.telemetry_detail(policy),
        )
