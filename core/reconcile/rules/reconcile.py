"""Config-invalidation reconciliation's rules (pure): the stale chunks' `where` and threshold,
and when a pass must hold back.

A chunk is **stale** when its `tenantConfigVersion` is a real number below its tenant's
current version; **actionable** when it is at least `reconciliationOrphanVersionGap` versions
behind, by the store's own comparison (`actionable_stamp_ceiling`).

Fail-safe throughout: a current version that is not a positive number or a stamp that is not a
real number gives nothing to act on; a destructive guard configured with an invalid value
deletes nothing (`ReconcilePolicy.deletes_allowed`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from core.base.config.config import Settings

TENANT_KEY = "tenantId"
STAMP_KEY = "tenantConfigVersion"
#: The values of `guard` in telemetry and figures; the manifest-mismatch guard holds only the
#: mismatched repos' manifest orphans (the rest goes on).
GUARD_STALE_FRACTION = "stale-fraction"
GUARD_INVALID_CONFIG = "invalid-config"
GUARD_MANIFEST_MISMATCH = "manifest-mismatch"
#: The guards whose invalid setting stops every deletion of a pass (the gap and the manifest
#: grace fail closed too, but each only for what it governs).
PASS_GUARDS: tuple[str, ...] = ("reconciliationMaxDeletesPerTick",
                                "reconciliationMaxStaleFraction")


def stale_fraction_exceeded(*, actionable: int, total: int, max_fraction: float) -> bool:
    """Whether tombstoning `actionable` of a tenant's `total` chunks is too much at once.

    A total of 0 with actionable chunks (they vanished between the two reads) is too much: when
    in doubt, delete nothing.
    """
    if actionable <= 0:
        return False
    if total <= 0:
        return True
    return actionable / total > max_fraction


def manifest_mismatched(*, orphans: int, chunks: int, max_fraction: float) -> bool:
    """Whether a repo's manifest orphans more than `max_fraction` of the repo's chunks.

    One that orphans most of the repo is far more often the wrong folder or list than a push
    that removed most files; judged per repo, since a tenant's other repos dilute the share. A
    fraction outside (0, 1] holds every repo with an orphan: it fails closed."""
    if not 0 < max_fraction <= 1:
        return orphans > 0
    return stale_fraction_exceeded(actionable=orphans, total=chunks, max_fraction=max_fraction)


def actionable_stamp_ceiling(current_version: int, orphan_version_gap: float) -> int | float:
    """The operand for Chroma's `$lte` that selects the actionable stamps (`stamp <= current -
    gap`), as an int when whole.

    Chroma truncates a fractional operand toward zero against an integer stamp (`$lte -0.5`
    matches 0), exact for a ceiling >= 0; below zero the ceiling is floored, so no integer
    stamp above it comes back (a fractional one between is only left for later).
    """
    ceiling = current_version - orphan_version_gap
    if float(ceiling).is_integer():
        return int(ceiling)
    return ceiling if ceiling >= 0 else math.floor(ceiling)


def candidate_where(tenant_id: str, current_version: int) -> dict[str, Any]:
    """Chroma `where` for a tenant's possibly stale chunks (`$lt` matches numbers only)."""
    return {"$and": [{TENANT_KEY: tenant_id}, {STAMP_KEY: {"$lt": current_version}}]}


@dataclass(frozen=True, slots=True)
class ReconcilePolicy:
    """The settings one pass runs under, read once so every tenant sees the same ones."""

    collection: str
    auto_tombstone: bool
    #: math.inf when invalid: fails closed (as the grace).
    orphan_version_gap: float
    manifest_grace_ms: float
    max_deletes_per_tick: int
    max_stale_fraction: float
    dry_run: bool
    #: Keys configured with an invalid value: a pass-wide guard (PASS_GUARDS) listed, the pass
    #: deletes nothing (CONTRACT); an invalid gap or grace shuts off only what it governs.
    invalid_guards: tuple[str, ...] = ()
    #: Written into each archive's header.
    pass_id: str = ""

    @classmethod
    def from_settings(
        cls, settings: Settings, *, dry_run: bool, pass_id: str = ""
    ) -> ReconcilePolicy:
        """The pass's policy (`auto_tombstone`: a TOML `true` only)."""
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
