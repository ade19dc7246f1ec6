"""Config-invalidation reconciliation's rules (pure): which of a tenant's chunks are stale,
which of those may be tombstoned, and when a pass must hold back.

A chunk is **stale** when its `tenantConfigVersion` is a real number below its tenant's
current version; it is **actionable** when it is at least `reconciliationOrphanVersionGap`
versions behind. Plain data in, plain data out; no I/O, no clock. The pass around it is
`core.jobs.reconcile`; the band predicates it deletes by are `core.rules.tombstone_bands`.

Fail-safe throughout: a current version that is not a positive number, a stamp that is not a
real number, a row without a string id give nothing to act on; a destructive guard configured
with an invalid value deletes nothing (`ReconcilePolicy.deletes_allowed`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from core.rules.camel_json import omitted_when_none
from core.rules.config import KEYS_BY_NAME, Settings
from core.rules.numbers import is_real_number
from core.rules.rows import id_and_metadata

#: The default gap (the config table's, never re-spelled); never a stand-in for an invalid one.
DEFAULT_ORPHAN_VERSION_GAP: float = KEYS_BY_NAME["reconciliationOrphanVersionGap"].default
#: The metadata keys the engine reads (CONTRACT's knowledge-base chunk fields).
TENANT_KEY = "tenantId"
STAMP_KEY = "tenantConfigVersion"
#: The telemetry/figures value of `guard` when the stale-fraction guard stopped a tenant.
GUARD_STALE_FRACTION = "stale-fraction"
#: The telemetry/figures value of `guard` when a destructive guard's setting is invalid.
GUARD_INVALID_CONFIG = "invalid-config"
#: The telemetry/figures value of `guard` when a repo's manifest would orphan too large a
#: share of the repo's chunks: that repo's manifest orphans are held (the rest goes on).
GUARD_MANIFEST_MISMATCH = "manifest-mismatch"
#: The guards whose invalid setting stops every deletion of a pass (the gap and the manifest
#: grace fail closed too, but each only for what it governs).
PASS_GUARDS: tuple[str, ...] = ("reconciliationMaxDeletesPerTick",
                                "reconciliationMaxStaleFraction")


def resolve_orphan_version_gap(value: Any) -> float | None:
    """The gap threshold to use: `value` when it is a finite number >= 1, else None, which
    makes nothing actionable by version (the setting fails closed: a looser default such as
    2 could delete what a stricter intended value would have kept).

    The floor is 1 because every stale chunk has a gap of at least 1: a threshold of 1 means
    "no grace", and anything lower would mean nothing different but look like a typo.
    """
    return value if is_real_number(value) and value >= 1 else None


@dataclass(frozen=True, slots=True)
class StaleOrphan:
    """A chunk stamped with an older config version than its tenant's current one."""

    id: str
    tenant_config_version: int | float
    version_gap: int | float


@dataclass(frozen=True, slots=True)
class TenantDiff:
    """The engine's verdict on a set of rows (JSON: `{staleOrphans, staleCount, actionableIds,
    actionableCount}`)."""

    stale_orphans: tuple[StaleOrphan, ...] = ()
    #: How many rows are stale (each id once).
    stale_count: int = field(init=False, default=0)
    actionable_ids: tuple[str, ...] = ()
    #: How many stale rows are at least the gap threshold behind.
    actionable_count: int = field(init=False, default=0)

    def __post_init__(self) -> None:
        object.__setattr__(self, "stale_count", len(self.stale_orphans))
        object.__setattr__(self, "actionable_count", len(self.actionable_ids))


EMPTY_DIFF = TenantDiff()


def diff_tenant_chunks(
    rows: Any, current_version: Any, orphan_version_gap: Any = None
) -> TenantDiff:
    """Classify one tenant's rows into stale orphans and the actionable subset.

    A row is stale when its `tenantConfigVersion` is a real, finite number (a bool is not)
    below `current_version`; its gap is `current_version - stamp`; it is actionable when the
    gap is at least the resolved threshold (see `resolve_orphan_version_gap`: an invalid or
    missing one makes nothing actionable).

    Fail-safe throughout: a current version that is not a positive number (a tenant with no
    config node is at 0), rows that are not a list, a row without a string id, and a row
    whose stamp is missing or not a number (ingested before stamps existed) give nothing to
    act on. Each id counts once (a duplicate row is never acted on twice); order is
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
        row_id, metadata = id_and_metadata(row)
        if not isinstance(row_id, str) or row_id in seen or not isinstance(metadata, Mapping):
            continue
        stamp: Any = metadata.get(STAMP_KEY)
        if not is_real_number(stamp) or not stamp < current_version:
            continue
        seen.add(row_id)
        gap = current_version - stamp
        stale.append(StaleOrphan(row_id, stamp, gap))
        # The store's own comparison (`stamp <= current - threshold`), not `gap >= threshold`:
        # in floating point the two differ (2 - 7e-216 >= 2, yet 7e-216 <= 0 is false), and a
        # chunk this rule calls actionable must be one the delete's `where` selects.
        if threshold is not None and stamp <= current_version - threshold:
            actionable.append(row_id)
    return TenantDiff(tuple(stale), actionable_ids=tuple(actionable))


def is_actionable_stamp(stamp: Any, current_version: Any, orphan_version_gap: Any) -> bool:
    """Whether one stamp is actionable under `diff_tenant_chunks`' rule (pure): a real number
    below a positive current version by at least the resolved gap (never, when the gap is
    invalid)."""
    threshold = resolve_orphan_version_gap(orphan_version_gap)
    return (threshold is not None and is_real_number(current_version) and current_version > 0
            and is_real_number(stamp) and stamp < current_version
            and stamp <= current_version - threshold)


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


def manifest_mismatched(*, orphans: int, chunks: int, max_fraction: float) -> bool:
    """Whether a repo's manifest disagrees with too many of the repo's chunks to be trusted:
    it orphans more than `max_fraction` of them (`stale_fraction_exceeded`'s rule, per repo).

    A manifest is the operator's claim about one repo; one that orphans most of the repo is
    far more often the wrong folder or list than a push that removed most files. The tenant
    guard cannot see it when the tenant has other repos (their chunks dilute the share), so
    each repo with a manifest is judged on its own. A fraction outside (0, 1] (an invalid
    setting reads as 0) holds every repo with an orphan: it fails closed."""
    if not 0 < max_fraction <= 1:
        return orphans > 0
    return stale_fraction_exceeded(actionable=orphans, total=chunks, max_fraction=max_fraction)


def actionable_stamp_ceiling(current_version: int, orphan_version_gap: float) -> int | float:
    """The operand for Chroma's `$lte` that selects the actionable stamps (`stamp <= current -
    gap`), as an int when whole.

    Chroma 1.5.9 compares an integer stamp against a fractional operand by truncating the
    operand toward zero (measured: `$lte 2.5` matches int 2, `$lte -0.5` matches int 0). That
    is exact for a ceiling >= 0; below zero the ceiling is floored instead, so no integer stamp
    above it comes back (a fractional stamp between the two is then left for a later look:
    never deleted wrongly, and the engine re-checks every row anyway).
    """
    ceiling = current_version - orphan_version_gap
    if float(ceiling).is_integer():
        return int(ceiling)
    return ceiling if ceiling >= 0 else math.floor(ceiling)


def candidate_where(tenant_id: str, current_version: int) -> dict[str, Any]:
    """Chroma `where` for a tenant's possibly stale chunks (stamp below the current version).

    Chroma's `$lt` matches numeric metadata only, so string and boolean stamps never come
    back; the engine would skip them anyway.
    """
    return {"$and": [{TENANT_KEY: tenant_id}, {STAMP_KEY: {"$lt": current_version}}]}


@dataclass(frozen=True, slots=True)
class ReconcilePolicy:
    """The settings one pass runs under, read once so every tenant sees the same ones."""

    collection: str
    auto_tombstone: bool
    #: The `[knowledgeBase]` gap (math.inf when invalid: it fails closed, per tenant too).
    orphan_version_gap: float
    #: The `[knowledgeBase]` manifest grace (math.inf when invalid: fails closed).
    manifest_grace_ms: float
    max_deletes_per_tick: int
    max_stale_fraction: float
    dry_run: bool
    #: Keys that fail closed configured with an invalid value. While a pass-wide guard
    #: (PASS_GUARDS) is listed, the pass deletes nothing (CONTRACT: the guards fail closed);
    #: an invalid gap or grace shuts off only what it governs (by its closed value).
    invalid_guards: tuple[str, ...] = ()
    #: This pass's id, written into each archive's header.
    pass_id: str = ""

    @classmethod
    def from_settings(
        cls, settings: Settings, *, dry_run: bool, pass_id: str = ""
    ) -> ReconcilePolicy:
        """The pass's policy; `auto_tombstone` is exactly the setting (a TOML `true` only,
        already enforced by the config reader)."""
        return cls(
            collection=settings.knowledge_base_collection,
            auto_tombstone=settings.reconciliation_auto_tombstone is True,
            orphan_version_gap=settings.reconciliation_orphan_version_gap,
            manifest_grace_ms=settings.reconciliation_manifest_grace_ms,
            max_deletes_per_tick=settings.reconciliation_max_deletes_per_tick,
            max_stale_fraction=settings.reconciliation_max_stale_fraction,
            dry_run=dry_run,
            invalid_guards=settings.invalid_guards,
            pass_id=pass_id,
        )

    @property
    def invalid_pass_guards(self) -> tuple[str, ...]:
        """The pass-wide guards set to an invalid value (the pass deletes nothing)."""
        return tuple(k for k in self.invalid_guards if k in PASS_GUARDS)

    @property
    def deletes_allowed(self) -> bool:
        """Whether this pass may delete anything at all."""
        return self.auto_tombstone and not self.dry_run and not self.invalid_pass_guards


class Phase(StrEnum):
    """The steps of one tenant's pass, as telemetry names a failed one (`failedPhase`,
    `error_code` `reconcile-<phase>-failed`)."""

    SCAN = "scan"
    COUNT = "count"
    TOMBSTONE = "tombstone"


@dataclass(slots=True)
class TenantOutcome:
    """One tenant's figures, filled in as its pass proceeds."""

    tenant_id: str
    repo_slug: str | None
    current_version: int
    scanned: int = 0
    stale_count: int = 0
    #: Chunks whose path their repo's manifest no longer claims.
    manifest_orphan_count: int = 0
    #: Generation orphans by parser pair and by extraction identity (issue 25).
    parser_orphan_count: int = 0
    extraction_orphan_count: int = 0
    #: Stale or orphaned, each chunk once (the union).
    total_orphan_count: int = 0
    #: Manifest paths no chunk carries, per repo (reported, never acted on).
    missing_paths: dict[str, int] = field(default_factory=dict)
    #: Actionable by either rule, each chunk once: what the guards judge.
    actionable_count: int = 0
    tombstoned_count: int = 0
    #: Of `tombstoned_count`, the legacy chunks (no numeric `ingestedAt`) deleted by id.
    legacy_tombstoned_count: int = 0
    #: Actionable chunks no band can hold (no numeric `ingestedAt`, or one after the read).
    held_count: int = 0
    #: Chunks read whose fields have unexpected types (skipped field by field, counted:
    #: `core.rules.tenant_scan`).
    malformed_count: int = 0
    guard: str | None = None
    #: The tenant's chunks, counted for the guard; a lower bound when the count stopped as
    #: soon as the guard could no longer trip (`total_complete` False).
    total_chunks: int | None = None
    total_complete: bool = True
    archive: str | None = None
    #: Chunks archived (a capped last band can archive more than it deletes).
    archived_count: int = 0
    #: Bands left alone because the store and the rule disagreed, or the band kept changing.
    refused_bands: int = 0
    #: What the tenant's pass is doing now (scanning, counting for the guard, tombstoning).
    phase: Phase = Phase.SCAN
    #: The phase the tenant failed in, and why; None when it did not.
    failed_phase: Phase | None = None
    error: str | None = None
    #: The tenant's policy in force: gap (None: closed), grace (None: closed), deletes.
    orphan_version_gap: float | None = None
    manifest_grace_ms: float | None = None
    auto_tombstone: bool = False
    #: Keys of the tenant's stored policy that were invalid (each fails closed).
    invalid_policy: tuple[str, ...] = ()
    #: Repos whose manifest orphans are held by the manifest-mismatch guard, and how many
    #: orphans that holds.
    mismatched_repos: tuple[str, ...] = ()
    mismatch_held_count: int = 0

    @property
    def failed(self) -> bool:
        """Whether this tenant's pass could not finish."""
        return self.failed_phase is not None

    @property
    def missing_path_count(self) -> int:
        """Manifest paths no chunk carries, over all the tenant's repos."""
        return sum(self.missing_paths.values())

    @property
    def drifted(self) -> bool:
        """Whether the tenant has drift to report (a clean tenant writes no row)."""
        return self.total_orphan_count > 0 or self.missing_path_count > 0

    def figures(self) -> TenantFigures:
        """The tenant's entry in the pass's figures."""
        return TenantFigures(self.tenant_id, self.repo_slug, self.current_version, self.scanned,
                             self.stale_count, self.manifest_orphan_count,
                             self.total_orphan_count, self.missing_path_count,
                             self.actionable_count, self.held_count, self.tombstoned_count,
                             self.guard, self.malformed_count,
                             self.parser_orphan_count or None,
                             self.extraction_orphan_count or None,
                             self.legacy_tombstoned_count or None)

    def telemetry_detail(self, policy: ReconcilePolicy) -> ReconcileDetail:
        """The `detail` of the tenant's `reconcile` row."""
        return ReconcileDetail(
            stale_count=self.stale_count,
            manifest_orphan_count=self.manifest_orphan_count,
            parser_orphan_count=self.parser_orphan_count,
            extraction_orphan_count=self.extraction_orphan_count,
            total_orphan_count=self.total_orphan_count,
            missing_path_count=self.missing_path_count,
            actionable_count=self.actionable_count,
            tombstoned_count=self.tombstoned_count,
            current_version=self.current_version,
            auto_tombstone=self.auto_tombstone,
            orphan_version_gap=self.orphan_version_gap,
            manifest_grace_ms=self.manifest_grace_ms,
            missing_paths_by_repo=dict(self.missing_paths) or None,
            invalid_policy=self.invalid_policy or None,
            manifest_mismatch_repos=self.mismatched_repos or None,
            manifest_mismatch_count=self.mismatch_held_count if self.mismatched_repos else None,
            max_deletes_per_tick=policy.max_deletes_per_tick,
            scanned=self.scanned,
            held_count=self.held_count or None,
            legacy_tombstoned_count=self.legacy_tombstoned_count or None,
            malformed_count=self.malformed_count or None,
            guard=self.guard,
            invalid_guards=policy.invalid_guards or None,
            total_chunks=self.total_chunks if self.total_complete else None,
            total_chunks_at_least=None if self.total_complete else self.total_chunks,
            max_stale_fraction=policy.max_stale_fraction if self.guard else None,
            archive=self.archive,
            archived_count=self.archived_count or None,
            pass_id=policy.pass_id if self.archive else None,
            refused_bands=self.refused_bands or None,
            failed_phase=self.failed_phase,
            error=self.error,
        )


#: An optional key of the detail: written only when it says something.
_OPTIONAL = omitted_when_none()


@dataclass(frozen=True, slots=True)
class TenantFigures:
    """A tenant's entry in a pass's `tenants` figures."""

    tenant_id: str
    repo_slug: str | None
    current_version: int
    scanned: int
    stale_count: int
    manifest_orphan_count: int
    total_orphan_count: int
    missing_path_count: int
    actionable_count: int
    held_count: int
    tombstoned_count: int
    guard: str | None
    #: Chunks read whose fields have unexpected types (skipped field by field, counted).
    malformed_count: int = 0
    #: Generation orphans (issue 25), written only when there are some.
    parser_orphan_count: int | None = field(default=None, metadata=_OPTIONAL)
    extraction_orphan_count: int | None = field(default=None, metadata=_OPTIONAL)
    #: Legacy chunks (no numeric `ingestedAt`) tombstoned by id, counted apart.
    legacy_tombstoned_count: int | None = field(default=None, metadata=_OPTIONAL)




@dataclass(frozen=True, slots=True)
class ReconcileDetail:
    """The `detail` of a tenant's `reconcile` (or `error`) telemetry row: CONTRACT's keys
    first, then what explains them, each written only when it says something."""

    stale_count: int
    manifest_orphan_count: int
    #: Generation orphans (the original's `parserOrphanCount`, `extractionOrphanCount`).
    parser_orphan_count: int
    extraction_orphan_count: int
    total_orphan_count: int
    missing_path_count: int
    actionable_count: int
    tombstoned_count: int
    current_version: int
    #: Whether the tenant's chunks may be tombstoned (the master switch and its policy).
    auto_tombstone: bool
    #: The gap and grace in force for the tenant; null when invalid (fails closed).
    orphan_version_gap: float | None
    manifest_grace_ms: float | None
    max_deletes_per_tick: int
    scanned: int
    missing_paths_by_repo: dict[str, int] | None = field(default=None, metadata=_OPTIONAL)
    invalid_policy: tuple[str, ...] | None = field(default=None, metadata=_OPTIONAL)
    #: Repos held by the manifest-mismatch guard, and the manifest orphans it holds.
    manifest_mismatch_repos: tuple[str, ...] | None = field(default=None, metadata=_OPTIONAL)
    manifest_mismatch_count: int | None = field(default=None, metadata=_OPTIONAL)
    held_count: int | None = field(default=None, metadata=_OPTIONAL)
    #: Legacy chunks (no numeric `ingestedAt`) tombstoned by id (`legacyTombstonedCount`).
    legacy_tombstoned_count: int | None = field(default=None, metadata=_OPTIONAL)
    #: Chunks read whose fields have unexpected types (`malformedCount`).
    malformed_count: int | None = field(default=None, metadata=_OPTIONAL)
    guard: str | None = field(default=None, metadata=_OPTIONAL)
    invalid_guards: tuple[str, ...] | None = field(default=None, metadata=_OPTIONAL)
    total_chunks: int | None = field(default=None, metadata=_OPTIONAL)
    #: The tenant's chunks when the count stopped early (the guard could no longer trip).
    total_chunks_at_least: int | None = field(default=None, metadata=_OPTIONAL)
    max_stale_fraction: float | None = field(default=None, metadata=_OPTIONAL)
    archive: str | None = field(default=None, metadata=_OPTIONAL)
    archived_count: int | None = field(default=None, metadata=_OPTIONAL)
    pass_id: str | None = field(default=None, metadata=_OPTIONAL)
    refused_bands: int | None = field(default=None, metadata=_OPTIONAL)
    failed_phase: Phase | None = field(default=None, metadata=_OPTIONAL)
    error: str | None = field(default=None, metadata=_OPTIONAL)


@dataclass(frozen=True, slots=True)
class ReconcileFigures:
    """A pass's figures (`reconcile --tick --json`)."""

    enabled: bool
    auto_tombstone: bool
    pass_id: str
    tenants: tuple[TenantFigures, ...]
    failed_tenants: int
    stale_count: int
    manifest_orphan_count: int
    total_orphan_count: int
    missing_path_count: int
    tombstoned_count: int
    archives: tuple[str, ...]
    #: Telemetry rows an earlier pass spooled that this one wrote.
    spool_flushed: int
    #: Telemetry rows still not in SQLite when the pass ended (kept in the spool).
    unrecorded_rows: int
    #: Whether the daemon's stop ended the pass before its last tenant.
    stopped: bool

    @classmethod
    def of(cls, outcomes: list[TenantOutcome], *, enabled: bool, auto_tombstone: bool,
           pass_id: str, spool_flushed: int, unrecorded_rows: int, stopped: bool
           ) -> ReconcileFigures:
        """A pass's figures from its tenants' outcomes."""
        return cls(
            enabled=enabled, auto_tombstone=auto_tombstone, pass_id=pass_id,
            tenants=tuple(o.figures() for o in outcomes),
            failed_tenants=sum(o.failed for o in outcomes),
            stale_count=sum(o.stale_count for o in outcomes),
            manifest_orphan_count=sum(o.manifest_orphan_count for o in outcomes),
            total_orphan_count=sum(o.total_orphan_count for o in outcomes),
            missing_path_count=sum(o.missing_path_count for o in outcomes),
            tombstoned_count=sum(o.tombstoned_count for o in outcomes),
            archives=tuple(o.archive for o in outcomes if o.archive),
            spool_flushed=spool_flushed, unrecorded_rows=unrecorded_rows, stopped=stopped)

    @property
    def succeeded(self) -> bool:
        """A pass did its work when no tenant failed and every telemetry row it owes (its own
        and those spooled by earlier passes) is in SQLite: deletions nobody can see did not
        succeed."""
        return not self.failed_tenants and not self.unrecorded_rows


@dataclass(frozen=True, slots=True)
class ReconcileDisabled:
    """The figures of a pass that did not run: reconciliation is disabled."""

    enabled: bool = False
    tenants: tuple[TenantFigures, ...] = ()
    failed_tenants: int = 0

    @property
    def succeeded(self) -> bool:
        """Nothing to do is done."""
        return True
