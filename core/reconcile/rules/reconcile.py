"""Config-invalidation reconciliation's rules (pure): the stale chunks' `where` and threshold,
and when a pass must hold back.

A chunk is **stale** when its `tenantConfigVersion` is a real number below its tenant's
current version; it is **actionable** when it is at least `reconciliationOrphanVersionGap`
versions behind, by the store's own comparison (`stamp <= current - gap`:
`actionable_stamp_ceiling`). Each row is judged by `core.reconcile.rules.scan_verdicts`; the
band predicates it deletes by are `core.reconcile.rules.tombstone_bands`. Plain data in, plain
data out; no I/O, no clock. The pass around it is `core.reconcile`.

Fail-safe throughout: a current version that is not a positive number or a stamp that is not a
real number gives nothing to act on; a destructive guard configured with an invalid value
deletes nothing (`ReconcilePolicy.deletes_allowed`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from core.base.config.config import Settings

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
        reconcile = settings.reconcile
        return cls(
            collection=settings.chroma.knowledge_base_collection,
            auto_tombstone=reconcile.auto_tombstone is True,
            orphan_version_gap=reconcile.orphan_version_gap,
            manifest_grace_ms=reconcile.manifest_grace_ms,
            max_deletes_per_tick=reconcile.max_deletes_per_tick,
            max_stale_fraction=reconcile.max_stale_fraction,
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
