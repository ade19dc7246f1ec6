"""Config-invalidation reconciliation's rules (pure): which of a tenant's chunks are stale,
which of those may be tombstoned, and when a pass must hold back.

A chunk is **stale** when its `tenantConfigVersion` is a real number below its tenant's
current version; it is **actionable** when it is at least `reconciliationOrphanVersionGap`
versions behind. Plain data in, plain data out; no I/O, no clock. The pass around it is
`core.reconcile`; the band predicates it deletes by are `core.reconcile.rules.tombstone_bands`.

Fail-safe throughout: a current version that is not a positive number, a stamp that is not a
real number, a row without a string id give nothing to act on; a destructive guard configured
with an invalid value deletes nothing (`ReconcilePolicy.deletes_allowed`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from core.base.config.config import KEYS_BY_NAME, Settings
from core.base.rules.numbers import is_real_number
from core.base.rules.rows import id_and_metadata

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
