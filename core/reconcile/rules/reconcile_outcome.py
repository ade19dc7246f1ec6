"""What one reconcile pass found, pure: each tenant's outcome, made of what each of its steps
returned (typed and frozen: `ScanFigures`, `GuardVerdict`, `TombstoneFigures`, `Failure`), and
the figures and telemetry detail made of it (`core.base.rules.camel_json` writes them as JSON).

A failed tenant is reported with the phase it failed in (`Phase`), and a pass succeeds only
when no tenant failed; a renamed field is a type error rather than a missing key downstream.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from core.base.rules.camel_json import omitted_when_none
from core.base.rules.telemetry import smallest_repo
from core.reconcile.rules.reconcile import GUARD_MANIFEST_MISMATCH, ReconcilePolicy


class Phase(StrEnum):
    """The steps of one tenant's pass, as telemetry names a failed one (`failedPhase`,
    `error_code` `reconcile-<phase>-failed`)."""

    SCAN = "scan"
    COUNT = "count"
    TOMBSTONE = "tombstone"


@dataclass(frozen=True, slots=True)
class ScanFigures:
    """What a tenant's read found, its tally settled (`TenantTally.figures`)."""

    scanned: int = 0
    stale_count: int = 0
    manifest_orphan_count: int = 0
    parser_orphan_count: int = 0
    extraction_orphan_count: int = 0
    #: Stale or orphaned, each chunk once (the union).
    total_orphan_count: int = 0
    #: Manifest paths no chunk carries, per repo (reported, never acted on).
    missing_paths: Mapping[str, int] = field(default_factory=dict)
    #: Actionable by any rule, each chunk once: what the guards judge.
    actionable_count: int = 0
    #: Actionable chunks no band can take (glossary: held).
    held_count: int = 0
    restore_held_count: int = 0
    #: Chunks read whose fields have unexpected types (skipped field by field, counted).
    malformed_count: int = 0
    #: Repos whose manifest orphans the manifest-mismatch guard holds, and how many.
    mismatched_repos: tuple[str, ...] = ()
    mismatch_held_count: int = 0
    smallest_repo: str | None = None

    @property
    def deletable(self) -> int:
        """Actionable chunks a band can take, restore holds aside."""
        return max(0, self.actionable_count - self.held_count - self.restore_held_count)


@dataclass(frozen=True, slots=True)
class GuardVerdict:
    """What the guards decided (`core.reconcile.tenant_steps.guard_tenant`)."""

    #: The guard that holds the tenant (invalid config, stale fraction), if one does.
    guard: str | None = None
    #: The tenant's chunks, counted for the stale-fraction guard; a lower bound when the count
    #: stopped as soon as the guard could no longer trip (`total_complete` False).
    total_chunks: int | None = None
    total_complete: bool = True
    cleared: bool = False


@dataclass(frozen=True, slots=True)
class TombstoneFigures:
    """What a tenant's tombstoning did (`TombstoneProgress.figures`), so far if it failed."""

    tombstoned_count: int = 0
    legacy_tombstoned_count: int = 0
    #: Chunks the archive holds as deleted (not the withdrawn).
    archived_count: int = 0
    #: Chunks archived, then found rewritten (or gone) at the delete: kept, and withdrawn.
    rewritten_kept_count: int = 0
    #: Bands left alone because the store and the rule disagreed, or the band kept changing.
    refused_bands: int = 0
    archive: str | None = None


@dataclass(frozen=True, slots=True)
class Failure:
    """The phase a tenant's pass failed in, and why."""

    phase: Phase
    error: str


@dataclass(frozen=True, slots=True)
class TenantOutcome:
    """One tenant's pass: the policy in force, then what each step returned."""

    tenant_id: str
    #: The tenant config's own `repoSlug` (None when it names none, as the original's).
    repo_slug: str | None
    current_version: int
    #: The tenant's policy in force (None: invalid, fails closed) and its invalid keys.
    orphan_version_gap: float | None = None
    manifest_grace_ms: float | None = None
    auto_tombstone: bool = False
    invalid_policy: tuple[str, ...] = ()
    #: The smallest repo the tenant's config and manifests name (`telemetry_repo`).
    declared_repo: str | None = None
    scan: ScanFigures = field(default_factory=ScanFigures)
    verdict: GuardVerdict = field(default_factory=GuardVerdict)
    tombstone: TombstoneFigures = field(default_factory=TombstoneFigures)
    failure: Failure | None = None

    @property
    def failed(self) -> bool:
        """Whether this tenant's pass could not finish."""
        return self.failure is not None

    @property
    def guard(self) -> str | None:
        """The guard that holds the tenant (or some of its repos), if one does."""
        return self.verdict.guard or (GUARD_MANIFEST_MISMATCH if self.scan.mismatched_repos
                                      else None)

    @property
    def reached(self) -> Phase:
        """The last phase the tenant's pass entered (counting: the guards counted it)."""
        verdict = self.verdict
        if verdict.cleared:
            return Phase.TOMBSTONE
        return Phase.SCAN if verdict.total_chunks is None else Phase.COUNT

    @property
    def telemetry_repo(self) -> str | None:
        """The repo the tenant's telemetry row names: the config's `repoSlug`, else the
        smallest its data names (None: the recorder's default applies)."""
        return self.repo_slug or smallest_repo((self.declared_repo, self.scan.smallest_repo))

    @property
    def missing_path_count(self) -> int:
        """Manifest paths no chunk carries, over all the tenant's repos."""
        return sum(self.scan.missing_paths.values())

    @property
    def drifted(self) -> bool:
        """Whether the tenant has drift to report (a clean tenant writes no row)."""
        return self.scan.total_orphan_count > 0 or self.missing_path_count > 0

    def figures(self) -> TenantFigures:
        """The tenant's entry in the pass's figures."""
        scan, gone = self.scan, self.tombstone
        return TenantFigures(self.tenant_id, self.repo_slug, self.current_version, scan.scanned,
                             scan.stale_count, scan.manifest_orphan_count,
                             scan.total_orphan_count, self.missing_path_count,
                             scan.actionable_count, scan.held_count, gone.tombstoned_count,
                             self.guard, scan.malformed_count,
                             scan.parser_orphan_count or None,
                             scan.extraction_orphan_count or None,
                             gone.legacy_tombstoned_count or None,
                             gone.rewritten_kept_count or None,
                             scan.restore_held_count or None)

    def telemetry_detail(self, policy: ReconcilePolicy) -> ReconcileDetail:
        """The `detail` of the tenant's `reconcile` row."""
        scan, verdict, gone, failure = self.scan, self.verdict, self.tombstone, self.failure
        return ReconcileDetail(
            stale_count=scan.stale_count,
            manifest_orphan_count=scan.manifest_orphan_count,
            parser_orphan_count=scan.parser_orphan_count,
            extraction_orphan_count=scan.extraction_orphan_count,
            total_orphan_count=scan.total_orphan_count,
            missing_path_count=self.missing_path_count,
            actionable_count=scan.actionable_count,
            tombstoned_count=gone.tombstoned_count,
            current_version=self.current_version,
            auto_tombstone=self.auto_tombstone,
            orphan_version_gap=self.orphan_version_gap,
            manifest_grace_ms=self.manifest_grace_ms,
            missing_paths_by_repo=dict(scan.missing_paths) or None,
            invalid_policy=self.invalid_policy or None,
            manifest_mismatch_repos=scan.mismatched_repos or None,
            manifest_mismatch_count=scan.mismatch_held_count if scan.mismatched_repos else None,
            max_deletes_per_tick=policy.max_deletes_per_tick,
            scanned=scan.scanned,
            held_count=scan.held_count or None,
            restore_held_count=scan.restore_held_count or None,
            legacy_tombstoned_count=gone.legacy_tombstoned_count or None,
            malformed_count=scan.malformed_count or None,
            guard=self.guard,
            invalid_guards=policy.invalid_guards or None,
            total_chunks=verdict.total_chunks if verdict.total_complete else None,
            total_chunks_at_least=None if verdict.total_complete else verdict.total_chunks,
            max_stale_fraction=policy.max_stale_fraction if self.guard else None,
            archive=gone.archive,
            archived_count=gone.archived_count or None,
            pass_id=policy.pass_id if gone.archive else None,
            refused_bands=gone.refused_bands or None,
            failed_phase=failure.phase if failure else None,
            error=failure.error if failure else None,
        )


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
    malformed_count: int = 0
    #: These only when there are some.
    parser_orphan_count: int | None = field(default=None, metadata=_OPTIONAL)
    extraction_orphan_count: int | None = field(default=None, metadata=_OPTIONAL)
    legacy_tombstoned_count: int | None = field(default=None, metadata=_OPTIONAL)
    rewritten_kept_count: int | None = field(default=None, metadata=_OPTIONAL)
    restore_held_count: int | None = field(default=None, metadata=_OPTIONAL)


@dataclass(frozen=True, slots=True)
class ReconcileDetail:
    """The `detail` of a tenant's `reconcile` (or `error`) telemetry row: CONTRACT's keys
    first, then what explains them, each written only when it says something."""

    stale_count: int
    manifest_orphan_count: int
    parser_orphan_count: int
    extraction_orphan_count: int
    total_orphan_count: int
    missing_path_count: int
    actionable_count: int
    tombstoned_count: int
    current_version: int
    #: Whether the tenant's chunks may be tombstoned (the master switch and its policy).
    auto_tombstone: bool
    #: Null when invalid (fails closed).
    orphan_version_gap: float | None
    manifest_grace_ms: float | None
    max_deletes_per_tick: int
    scanned: int
    missing_paths_by_repo: dict[str, int] | None = field(default=None, metadata=_OPTIONAL)
    invalid_policy: tuple[str, ...] | None = field(default=None, metadata=_OPTIONAL)
    manifest_mismatch_repos: tuple[str, ...] | None = field(default=None, metadata=_OPTIONAL)
    manifest_mismatch_count: int | None = field(default=None, metadata=_OPTIONAL)
    held_count: int | None = field(default=None, metadata=_OPTIONAL)
    restore_held_count: int | None = field(default=None, metadata=_OPTIONAL)
    legacy_tombstoned_count: int | None = field(default=None, metadata=_OPTIONAL)
    malformed_count: int | None = field(default=None, metadata=_OPTIONAL)
    guard: str | None = field(default=None, metadata=_OPTIONAL)
    invalid_guards: tuple[str, ...] | None = field(default=None, metadata=_OPTIONAL)
    total_chunks: int | None = field(default=None, metadata=_OPTIONAL)
    #: When the count stopped early (the guard could no longer trip).
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
    #: The daemon's stop ended the pass before its last tenant.
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
            stale_count=sum(o.scan.stale_count for o in outcomes),
            manifest_orphan_count=sum(o.scan.manifest_orphan_count for o in outcomes),
            total_orphan_count=sum(o.scan.total_orphan_count for o in outcomes),
            missing_path_count=sum(o.missing_path_count for o in outcomes),
            tombstoned_count=sum(o.tombstone.tombstoned_count for o in outcomes),
            archives=tuple(a for o in outcomes if (a := o.tombstone.archive)),
            spool_flushed=spool_flushed, unrecorded_rows=unrecorded_rows, stopped=stopped)

    @property
    def succeeded(self) -> bool:
        """No tenant failed and every telemetry row the pass owes is in SQLite: deletions
        nobody can see did not succeed."""
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
