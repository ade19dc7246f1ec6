"""The tests' oracles: the original's engines restated as whole-list diffs (`diffTenantChunks`,
`diffTenantManifest`, `diffTenantParserIdentity`, the successor's `diffTenantExtractionIdentity`),
each over one tenant's rows at once, so a test can hold the pass's row-by-row rules
(`core.reconcile.rules.scan_verdicts.judge_row`, `tenant_scan`, the generation tally) to them.

Production never uses them: it states each rule once, row by row. They are pure (plain data in
and out, only the pure rules imported), so the tests of the pure rules may use them too.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from core.base.config.config import KEYS_BY_NAME
from core.base.rules.numbers import is_real_number
from core.base.rules.rows import id_and_metadata
from core.reconcile.rules.generations.extraction_snapshot import ExtractionSnapshot
from core.reconcile.rules.generations.orphans import (
    KIND_EXTRACTION,
    KIND_PARSER,
    PARSER_ID_KEY,
    PARSER_VERSION_KEY,
    GenerationClassifier,
    GenerationOrphan,
    GenerationRule,
    Stamp,
    YieldAuthority,
    extraction_authority,
)
from core.reconcile.rules.manifests import (
    ManifestOrphan,
    RepoManifest,
    manifest_orphan,
    manifest_ripe,
    usable_manifest,
)
from core.reconcile.rules.reconcile import STAMP_KEY
from core.reconcile.rules.tenant_policy import valid_gap

# The stale-chunk engine (`diffTenantChunks`).

#: The default gap (the config table's, never re-spelled); never a stand-in for an invalid one.
DEFAULT_ORPHAN_VERSION_GAP: float = KEYS_BY_NAME["reconciliationOrphanVersionGap"].default

def resolve_orphan_version_gap(value: Any) -> float | None:
    """The gap threshold to use: `value` when it is a valid gap
    (`core.reconcile.rules.tenant_policy.valid_gap`: a finite number >= 1), else None, which
    makes nothing actionable by version (the setting fails closed)."""
    return value if valid_gap(value) else None


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


# The manifest engine (`diffTenantManifest`).

@dataclass(frozen=True, slots=True)
class ManifestDiff:
    """The verdict on a set of rows (JSON: `{manifestOrphans, orphanCount, actionableIds,
    actionableCount}`, the original's shape)."""

    manifest_orphans: tuple[ManifestOrphan, ...] = ()
    orphan_count: int = field(init=False, default=0)
    actionable_ids: tuple[str, ...] = ()
    actionable_count: int = field(init=False, default=0)

    def __post_init__(self) -> None:
        object.__setattr__(self, "orphan_count", len(self.manifest_orphans))
        object.__setattr__(self, "actionable_count", len(self.actionable_ids))


def diff_tenant_manifest(
    rows: Any, manifests_by_repo: Any, *, now_ms: int | None = None,
    grace_ms: float | None = None,
) -> ManifestDiff:
    """Classify one tenant's rows (`{id, metadata}` mappings or ChromaRow-like objects)
    against its manifests (a stored `{repoSlug: entry}` map or parsed `RepoManifest`s).

    Every orphan is actionable, as in the original, unless `now_ms` is given: then only the
    orphans of manifests at least `grace_ms` old are (`manifest_ripe`). Each id counts once;
    order is the input's. Malformed input of any kind gives the empty result.
    """
    if not isinstance(rows, (list, tuple)) or not isinstance(manifests_by_repo, Mapping):
        return ManifestDiff()
    manifests = {slug: m if isinstance(m, RepoManifest) else usable_manifest(slug, m)
                 for slug, m in manifests_by_repo.items()}
    usable = {slug: m for slug, m in manifests.items() if m is not None}
    if not usable:
        return ManifestDiff()
    orphans: list[ManifestOrphan] = []
    actionable: list[str] = []
    seen: set[str] = set()
    for row in rows:
        row_id, metadata = id_and_metadata(row)
        if not isinstance(row_id, str) or row_id in seen or not isinstance(metadata, Mapping):
            continue
        orphan = manifest_orphan(row_id, metadata, usable)
        if orphan is None:
            continue
        seen.add(row_id)
        orphans.append(orphan)
        if now_ms is None or manifest_ripe(usable[orphan.repo_slug], now_ms=now_ms,
                                           grace_ms=grace_ms):
            actionable.append(row_id)
    return ManifestDiff(tuple(orphans), actionable_ids=tuple(actionable))


def ordered_union(*id_lists: Sequence[str]) -> tuple[str, ...]:
    """Every id of the lists once, in first-seen order (config-stale ids first, then the
    manifest orphans that are not also stale: the original's first version counted an id in
    both twice)."""
    return tuple(dict.fromkeys(i for ids in id_lists for i in ids))


# The generation engines (`diffTenantParserIdentity`, `diffTenantExtractionIdentity`).

@dataclass(frozen=True, slots=True)
class GenerationDiff:
    """A rule's result, as the original's engine returns it."""

    orphans: tuple[GenerationOrphan, ...]
    actionable_ids: tuple[str, ...]

    @property
    def orphan_count(self) -> int:
        return len(self.orphans)

    @property
    def actionable_count(self) -> int:
        return len(self.actionable_ids)


def _diff(rows: Sequence[Any], tenant_id: Any, rule: GenerationRule) -> GenerationDiff:
    if not isinstance(tenant_id, str) or not tenant_id:
        return GenerationDiff((), ())
    classifier = GenerationClassifier(rule, tenant_id)
    for row in rows:
        classifier.observe(row.id, row.metadata)
    orphans = tuple(classifier.orphans())
    return GenerationDiff(orphans, tuple(o.id for o in orphans if o.actionable))


def diff_tenant_parser_identity(
    rows: Sequence[Any], tenant_id: Any, declared_by_repo: Mapping[str, Any],
    yielded_paths_by_repo: Mapping[str, Iterable[str]] | None = None,
) -> GenerationDiff:
    """The original's `diffTenantParserIdentity` (PR #17395): `declared_by_repo` maps a repo
    to `{parserId, parserVersion}` (a pair that is not two strings is never guessed at), the
    yielded paths are the repo's without a freshness fence (the pass fences them)."""
    declared = {slug: (d[PARSER_ID_KEY], d[PARSER_VERSION_KEY])
                for slug, d in (declared_by_repo or {}).items()
                if isinstance(d, Mapping) and isinstance(d.get(PARSER_ID_KEY), str)
                and isinstance(d.get(PARSER_VERSION_KEY), str)}
    authority = {slug: YieldAuthority(frozenset(paths), None)
                 for slug, paths in (yielded_paths_by_repo or {}).items()}
    return _diff(rows, tenant_id, GenerationRule(KIND_PARSER, declared, authority))


def diff_tenant_extraction_identity(
    rows: Sequence[Any], tenant_id: Any, declared_by_repo: Mapping[str, Stamp],
    snapshots: Mapping[str, ExtractionSnapshot | None],
) -> GenerationDiff:
    """The successor's `diffTenantExtractionIdentity`: the yield authority is the repo's
    snapshot while it carries the declared identity, bounded by its `updatedAt`."""
    authority = {slug: a for slug, d in declared_by_repo.items()
                 if (a := extraction_authority(snapshots.get(slug), d[0])) is not None}
    return _diff(rows, tenant_id, GenerationRule(KIND_EXTRACTION, declared_by_repo,
                                                   authority))
