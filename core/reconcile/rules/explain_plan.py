"""`reconcile explain`'s plan (pure): what one tenant's pass would find and do, chunk by chunk,
built from the very tally and outcome a pass produces, so that its numbers are the pass's.

Like `terraform plan`, it changes nothing. The guards are judged as if tombstoning were on, so
the plan says which would hold the pass even while it is off.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from core.base.rules.camel_json import omitted_when_none
from core.reconcile.rules.generations.orphans import GenerationOrphan
from core.reconcile.rules.manifests import RepoManifest
from core.reconcile.rules.reconcile import (
    GUARD_INVALID_CONFIG,
    GUARD_MANIFEST_MISMATCH,
    GUARD_STALE_FRACTION,
    ReconcilePolicy,
)
from core.reconcile.rules.reconcile_outcome import TenantFigures, TenantOutcome
from core.reconcile.rules.restore_holds import RestoreHold, release_command
from core.reconcile.rules.retention import TenantRetention
from core.reconcile.rules.scan_verdicts import MalformedChunk, RowVerdict
from core.reconcile.rules.tenant_scan import TenantTally

#: Why nothing would be deleted, in the order they are checked.
WHY_DISABLED = "reconciliationEnabled is false: the daemon idles (explain and --dry-run work)"
WHY_MASTER_OFF = "reconciliationAutoTombstone is false (the master switch)"
WHY_TENANT_OFF = "the tenant's policy sets autoTombstone off"
WHY_NOTHING = "nothing is actionable"
_OPTIONAL = omitted_when_none()


@dataclass(frozen=True, slots=True)
class ChunkLine:
    """One stale or orphaned chunk: what it is, why, and whether the pass may act on it."""

    id: str
    repo_slug: str | None
    source_path: str | None
    stamp: Any
    ingested_at: Any
    #: `config-stale`, `manifest-orphan` or both.
    reasons: tuple[str, ...]
    #: Versions behind, for a config-stale chunk.
    version_gap: Any
    actionable: bool
    held: bool
    #: Among the first to go; False whenever the pass would delete nothing.
    would_delete: bool = False
    #: True only when held by a restore.
    restore_held: bool | None = field(default=None, metadata=_OPTIONAL)

    @classmethod
    def of(cls, verdict: RowVerdict, *, would_delete: bool = False,
           restore_held: bool = False) -> ChunkLine:
        """The line of a row's verdict."""
        return cls(verdict.id, verdict.repo_slug, verdict.source_path, verdict.stamp,
                   verdict.ingested_at, verdict.reasons, verdict.version_gap,
                   verdict.actionable, verdict.held, would_delete, restore_held or None)


@dataclass(frozen=True, slots=True)
class HoldLine:
    """The tenant's restore holds in force, and the command that lifts them."""

    chunk_count: int
    archives: tuple[str, ...]
    release: str


@dataclass(frozen=True, slots=True)
class ManifestLine:
    """One repo's manifest and whether its orphans are actionable yet (grace)."""

    repo_slug: str
    path_count: int
    updated_at: int | float
    revision: str | None
    #: At least `manifestGraceMs` old when the pass read the tenant.
    past_grace: bool
    missing_paths: tuple[str, ...]
    chunk_count: int
    orphan_count: int
    #: The manifest-mismatch guard holds its orphans.
    mismatch: bool


@dataclass(frozen=True, slots=True)
class GuardCheck:
    """The guards, judged as a tombstoning pass would judge them, with their numbers."""

    guard: str | None
    mismatched_repos: tuple[str, ...]
    actionable_count: int
    held_count: int
    total_chunks: int | None
    #: False when the count stopped early (the guard's answer could no longer change).
    total_complete: bool
    max_stale_fraction: float
    max_deletes_per_tick: int
    invalid_guards: tuple[str, ...]
    #: What a tombstoning pass would delete now (0 when held or switched off).
    would_delete: int
    #: Actionable chunks past the cap, left for later passes.
    over_cap: int
    why_not: str | None
    restore_held_count: int | None = field(default=None, metadata=_OPTIONAL)


@dataclass(frozen=True, slots=True)
class TenantPlan:
    """The whole plan (`explain --json`: this object, every chunk listed)."""

    tenant_id: str
    repo_slug: str | None
    current_version: int
    orphan_version_gap: float | None
    manifest_grace_ms: float | None
    auto_tombstone: bool
    invalid_policy: tuple[str, ...]
    #: The same figures a pass reports for the tenant.
    figures: TenantFigures
    guards: GuardCheck
    manifests: tuple[ManifestLine, ...]
    chunks: tuple[ChunkLine, ...]
    malformed: tuple[MalformedChunk, ...] = ()
    generation_orphans: tuple[GenerationLine, ...] = ()
    #: What retention would take now, nothing deleted.
    retention: TenantRetention | None = None
    restore_holds: HoldLine | None = field(default=None, metadata=_OPTIONAL)


@dataclass(frozen=True, slots=True)
class GenerationLine:
    """One generation orphan: its kind, stamp against the declared one, tier and why."""

    id: str
    kind: str
    repo_slug: str
    source_path: str
    stamp: tuple[str, ...]
    declared: tuple[str, ...]
    tier: str
    reason: str
    actionable: bool
    ingested_at: Any
    why: str
    would_delete: bool = False
    restore_held: bool | None = field(default=None, metadata=_OPTIONAL)

    @classmethod
    def of(cls, orphan: GenerationOrphan, *, would_delete: bool = False,
           restore_held: bool = False) -> GenerationLine:
        """The line of a classified orphan."""
        return cls(orphan.id, orphan.kind, orphan.repo_slug, orphan.source_path, orphan.stamp,
                   orphan.declared, orphan.tier, orphan.reason, orphan.actionable,
                   orphan.ingested_at, orphan.why, would_delete, restore_held or None)


def _why_not(outcome: TenantOutcome, policy: ReconcilePolicy, *, enabled: bool) -> str | None:
    if not enabled:
        return WHY_DISABLED
    if not policy.auto_tombstone:
        return WHY_MASTER_OFF
    if not outcome.auto_tombstone:
        return WHY_TENANT_OFF
    if outcome.guard == GUARD_INVALID_CONFIG:
        return f"a guard is set to an invalid value: {', '.join(policy.invalid_pass_guards)}"
    if outcome.guard == GUARD_STALE_FRACTION:
        return "the stale-fraction guard holds the tenant"
    if outcome.scan.deletable <= 0:
        if outcome.scan.restore_held_count:
            return (f"its actionable chunks are held by a restore "
                    f"({release_command(outcome.tenant_id)} lifts the hold)")
        if outcome.guard == GUARD_MANIFEST_MISMATCH:
            return (f"the manifest-mismatch guard holds the orphans of "
                    f"{', '.join(outcome.scan.mismatched_repos)}")
        return WHY_NOTHING
    return None


def guard_check(outcome: TenantOutcome, policy: ReconcilePolicy, *, enabled: bool) -> GuardCheck:
    """The guards' verdict and numbers for an outcome the pass judged in explain mode."""
    scan, verdict = outcome.scan, outcome.verdict
    deletable = scan.deletable
    why_not = _why_not(outcome, policy, enabled=enabled)
    would = 0 if why_not else min(deletable, policy.max_deletes_per_tick)
    return GuardCheck(
        guard=outcome.guard, mismatched_repos=scan.mismatched_repos,
        actionable_count=scan.actionable_count,
        held_count=scan.held_count, total_chunks=verdict.total_chunks,
        total_complete=verdict.total_complete, max_stale_fraction=policy.max_stale_fraction,
        max_deletes_per_tick=policy.max_deletes_per_tick,
        invalid_guards=policy.invalid_guards, would_delete=would,
        over_cap=max(0, deletable - policy.max_deletes_per_tick), why_not=why_not,
        restore_held_count=scan.restore_held_count or None)


def build_plan(
    outcome: TenantOutcome, tally: TenantTally, policy: ReconcilePolicy,
    manifests: dict[str, RepoManifest], *, enabled: bool,
    retention: TenantRetention | None = None, holds: Sequence[RestoreHold] = (),
) -> TenantPlan:
    """The plan of one tenant's explain-mode pass (its chunks sorted by repo, path, id)."""
    missing = tally.missing_paths()
    lines = tuple(ManifestLine(slug, len(m.paths_after_push), m.updated_at, m.revision,
                               slug in tally.rules.ripe_repos, missing.get(slug, ()),
                               tally.repo_chunks[slug], tally.repo_orphans[slug],
                               slug in tally.mismatched_repos)
                  for slug, m in sorted(manifests.items()))
    chunks = sorted(tally.rows, key=lambda v: (v.repo_slug or "", v.source_path or "", v.id))
    guards = guard_check(outcome, policy, enabled=enabled)
    # The chunks a pass would take first under the cap, marked only when it would delete.
    going = tally.first_to_go().ids if guards.why_not is None else frozenset()
    held = tally.restore_held
    return TenantPlan(
        tenant_id=outcome.tenant_id, repo_slug=outcome.repo_slug,
        current_version=outcome.current_version,
        orphan_version_gap=outcome.orphan_version_gap,
        manifest_grace_ms=outcome.manifest_grace_ms, auto_tombstone=outcome.auto_tombstone,
        invalid_policy=outcome.invalid_policy, figures=outcome.figures(),
        guards=guards, manifests=lines,
        chunks=tuple(ChunkLine.of(v, would_delete=v.id in going,
                                  restore_held=v.id in held) for v in chunks),
        malformed=tuple(sorted(tally.malformed, key=lambda m: m.id)),
        generation_orphans=tuple(GenerationLine.of(o, would_delete=o.id in going,
                                                   restore_held=o.id in held) for o in sorted(
            tally.generations.rows if tally.generations else (),
            key=lambda o: (o.repo_slug, o.source_path, o.id, o.kind))),
        retention=retention, restore_holds=_hold_line(outcome.tenant_id, holds, held & {
            v.id for v in (*tally.rows, *(tally.generations.rows if tally.generations
                                          else ()))}))


def _hold_line(tenant_id: str, holds: Sequence[RestoreHold],
               shown: set[str] | frozenset[str]) -> HoldLine | None:
    """The holds in force on the chunks the plan lists (the others have nothing to keep)."""
    in_force = [h for h in holds if h.chunk_id in shown]
    if not in_force:
        return None
    return HoldLine(len(in_force), tuple(sorted({h.archive for h in in_force})),
                    release_command(tenant_id))
