"""One row of a tenant's scan, decided (pure): config-stale, manifest orphan, both or neither;
actionable or not; held or legacy; and which of its fields are malformed.

`judge_row` is the one verdict the pass and `reconcile explain` both count (`TenantTally`).

Any row shape is survivable (CONTRACT "Chroma data"): `malformed_fields` names the fields of
unexpected types, and each is read as absent by every rule, which is how Chroma's own `where`
reads it (a list, string or boolean never matches a scalar `$eq`, `$lte` or `$in`), so the rule
and the delete predicate keep agreeing on every band. A malformed `ingestedAt` is held; the
well-typed fields still count (skipping the whole row would make the rule refuse a chunk the
store's band still matches, and that band would be held for ever).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from core.base.rules.numbers import is_real_number
from core.reconcile.rules.generations.orphans import GenerationRule
from core.reconcile.rules.manifests import (
    INGESTED_KEY,
    PATH_KEY,
    REPO_KEY,
    RepoManifest,
    manifest_orphan,
    manifest_ripe,
)
from core.reconcile.rules.reconcile import STAMP_KEY, TENANT_KEY
from core.reconcile.rules.tombstone_bands import Number, deletion_bound, is_legacy_ingested

REASON_STALE: Final = "config-stale"
REASON_ORPHAN: Final = "manifest-orphan"


@dataclass(frozen=True, slots=True)
class ScanRules:
    """Everything the row-by-row decision needs, fixed for one tenant's pass."""

    tenant_id: str
    current_version: int
    #: `reconciliationOrphanVersionGap` in force, the tenant's own or the global one (None:
    #: nothing is actionable by version).
    orphan_version_gap: float | None
    #: The tenant's usable manifests, by repo.
    manifests: Mapping[str, RepoManifest]
    #: `reconciliationManifestGraceMs` in force, the tenant's own or the global one (None: no
    #: manifest orphan is actionable).
    manifest_grace_ms: float | None
    #: When the pass started reading the tenant (epoch ms).
    read_ms: int
    #: `reconciliationMaxStaleFraction` in force: the manifest-mismatch guard's share (an
    #: invalid setting reads as 0.0: every repo with an orphan is held).
    max_stale_fraction: float
    #: The tenant's generation rules (`core.reconcile.rules.generations`; none: no repo declares).
    generation_rules: tuple[GenerationRule, ...] = ()
    ripe_repos: frozenset[str] = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "ripe_repos", frozenset(
            slug for slug, m in self.manifests.items()
            if manifest_ripe(m, now_ms=self.read_ms, grace_ms=self.manifest_grace_ms)))

    def stale_actionable(self, stamp: Any) -> bool:
        """The config-stale rule on one stamp: `stamp <= current - gap`, the store's own
        comparison, not `gap >= threshold`: in floating point the two differ (2 - 7e-216 >= 2,
        yet 7e-216 <= 0 is false), and a chunk this rule calls actionable must be one the
        delete's `where` selects."""
        gap = self.orphan_version_gap
        return (gap is not None and self.current_version > 0 and is_real_number(stamp)
                and stamp < self.current_version and stamp <= self.current_version - gap)


@dataclass(frozen=True, slots=True)
class RowVerdict:
    """Why one chunk is stale or orphaned, and whether the pass may act on it."""

    id: str
    repo_slug: str | None
    source_path: str | None
    stamp: Any
    ingested_at: Any
    stale: bool
    version_gap: Number | None
    stale_actionable: bool
    orphan: bool
    orphan_actionable: bool
    #: Actionable, but never deleted: an `ingestedAt` after the pass's read, or of a type
    #: no path can take (a legacy one is `legacy` instead, when actionable by version).
    held: bool
    #: Actionable by version with a legacy `ingestedAt` (absent or an ISO string): deleted
    #: by id (`core.reconcile.rules.tombstone_bands.legacy_bands`).
    legacy: bool = False

    @property
    def actionable(self) -> bool:
        """Actionable by either rule (counted once)."""
        return self.stale_actionable or self.orphan_actionable

    @property
    def reasons(self) -> tuple[str, ...]:
        """`config-stale`, `manifest-orphan` or both."""
        return tuple(r for r, on in ((REASON_STALE, self.stale), (REASON_ORPHAN, self.orphan))
                     if on)


#: The fields the scan reads, each with what it may be besides absent (None, which Chroma
#: cannot store: a null is an absent key), in the order `malformed_fields` names them.
SCANNED_FIELDS: Final = (REPO_KEY, STAMP_KEY, PATH_KEY, INGESTED_KEY)


def malformed_fields(metadata: Mapping[str, Any]) -> tuple[str, ...]:
    """The scanned fields whose value has an unexpected type: `repoSlug` and `sourcePath`
    strings, `tenantConfigVersion` a real number (not a bool), `ingestedAt` a real number or
    an ISO-8601 string (CONTRACT "Chroma data"); empty for a well-formed chunk (the common
    case costs four lookups)."""
    repo, stamp = metadata.get(REPO_KEY), metadata.get(STAMP_KEY)
    path, ingested = metadata.get(PATH_KEY), metadata.get(INGESTED_KEY)
    if ((repo is None or type(repo) is str) and (path is None or type(path) is str)
            and (stamp is None or is_real_number(stamp))
            and (ingested is None or type(ingested) is str or is_real_number(ingested))):
        return ()
    return tuple(name for name, ok in (
        (REPO_KEY, repo is None or type(repo) is str),
        (STAMP_KEY, stamp is None or is_real_number(stamp)),
        (PATH_KEY, path is None or type(path) is str),
        (INGESTED_KEY, ingested is None or type(ingested) is str
         or is_real_number(ingested))) if not ok)


@dataclass(frozen=True, slots=True)
class MalformedChunk:
    """A chunk of the tenant with fields of unexpected types (skipped, counted)."""

    id: str
    #: The malformed fields, in SCANNED_FIELDS order.
    fields: tuple[str, ...]
    #: Their values as read, for `explain`.
    values: tuple[Any, ...]


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def judge_row(row_id: str, metadata: Mapping[str, Any], rules: ScanRules) -> RowVerdict | None:
    """The verdict on one row of the tenant, or None when it is neither stale nor orphaned
    (or not the tenant's: a row of another tenant is never judged)."""
    if metadata.get(TENANT_KEY) != rules.tenant_id:
        return None
    stamp = metadata.get(STAMP_KEY)
    stale_stamp = stamp if (rules.current_version > 0 and is_real_number(stamp)
                            and stamp < rules.current_version) else None
    stale = stale_stamp is not None
    orphan = manifest_orphan(row_id, metadata, rules.manifests) is not None
    if not (stale or orphan):
        return None
    stale_actionable = stale and rules.stale_actionable(stamp)
    orphan_actionable = orphan and metadata.get(REPO_KEY) in rules.ripe_repos
    unbounded = ((stale_actionable or orphan_actionable)
                 and deletion_bound(metadata, read_ms=rules.read_ms) is None)
    legacy = unbounded and stale_actionable and is_legacy_ingested(metadata.get(INGESTED_KEY))
    return RowVerdict(
        id=row_id, repo_slug=_text(metadata.get(REPO_KEY)),
        source_path=_text(metadata.get(PATH_KEY)), stamp=stamp,
        ingested_at=metadata.get(INGESTED_KEY), stale=stale,
        version_gap=rules.current_version - stale_stamp if stale_stamp is not None else None,
        stale_actionable=stale_actionable, orphan=orphan, orphan_actionable=orphan_actionable,
        held=unbounded and not legacy, legacy=legacy)
