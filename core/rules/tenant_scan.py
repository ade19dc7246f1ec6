"""One tenant's scan, decided row by row (pure): config-stale, manifest orphan, both or neither;
actionable or not; what a tombstoning pass may delete first; which manifest paths no chunk
carries.

The pass (`core.jobs.reconcile`) and `reconcile explain` feed the same pages through the same
`TenantTally`, so the plan an operator reads has the numbers the pass acts on. The tally knows
nothing of where pages come from: a later fleet pass can read many tenants' rows in one query
and hand each tenant's rows to its own tally.

Counting: `stale_count` and `manifest_orphan_count` each count a row once; `total_orphan_count`
is their ordered union (a row that is both counts once), and so is `actionable_count`, which
the guards (cap, stale fraction) judge.

Any row shape is survivable: a chunk of the tenant whose fields have unexpected types (CONTRACT
"Chroma data": a list `repoSlug`, which Chroma 1.x stores; a string or boolean stamp; a number
for `sourcePath`; a boolean `ingestedAt`) never raises. It is counted in `malformed_count`, and
each such field is skipped: read as absent by every rule, which is how Chroma's own `where`
reads it (measured on 1.5.9: a list, string or boolean value never matches a scalar `$eq`,
`$lte` or `$in`), so the rule and the delete predicate keep agreeing on every band. So a
chunk with a malformed `repoSlug` or `sourcePath` is in no repo's manifest judgement, one with
a malformed stamp is never config-stale, one with a malformed `ingestedAt` is never deleted
(held); what its well-typed fields say still counts (skipping the whole row would make the
rule refuse a chunk the store's band still matches, and that band would be held for ever).

The manifest-mismatch guard is the tally's own: once the last page is in, `settle` holds every
repo whose manifest orphans more than the stale fraction of the repo's chunks (their orphans
stop being actionable; a chunk also actionable by version stays so). The per-tenant pass, the
grouped pass and `explain` all settle the same tally the same way.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Final

from core.rules.generation_tally import GenerationTally
from core.rules.generations import GenerationSignal
from core.rules.manifests import (
    INGESTED_KEY,
    PATH_KEY,
    REPO_KEY,
    PathCoverage,
    RepoManifest,
    manifest_orphan,
    manifest_ripe,
)
from core.rules.numbers import is_real_number
from core.rules.reconcile import STAMP_KEY, TENANT_KEY, manifest_mismatched
from core.rules.tombstone_bands import (
    Band,
    Number,
    OldestIngested,
    OldestKeys,
    deletion_bound,
    is_legacy_ingested,
    plan_bands,
)

#: The most `sourcePath` values one band's `$in` carries. Chroma 1.5.9 takes 10,000 values in
#: one `$in` and fails at 50,000 (measured in the reconcile-safety issue); a band of at most
#: BAND_ROWS chunks names at most that many paths, and this bound keeps it so if bands grow.
PATHS_PER_BAND: Final = 5_000

REASON_STALE: Final = "config-stale"
REASON_ORPHAN: Final = "manifest-orphan"


@dataclass(frozen=True, slots=True)
class ScanRules:
    """Everything the row-by-row decision needs, fixed for one tenant's pass."""

    tenant_id: str
    current_version: int
    #: The orphan version gap in force (None: nothing is actionable by version).
    gap: float | None
    #: The tenant's usable manifests, by repo.
    manifests: Mapping[str, RepoManifest]
    #: The manifest grace in force (None: no manifest orphan is actionable).
    grace_ms: float | None
    #: When the pass started reading the tenant (epoch ms).
    read_ms: int
    #: `reconciliationMaxStaleFraction` in force: the manifest-mismatch guard's share (an
    #: invalid setting reads as 0.0: every repo with an orphan is held).
    max_stale_fraction: float
    #: The tenant's generation signals (`core.rules.generations`; none: no repo declares).
    signals: tuple[GenerationSignal, ...] = ()
    ripe_repos: frozenset[str] = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "ripe_repos", frozenset(
            slug for slug, m in self.manifests.items()
            if manifest_ripe(m, now_ms=self.read_ms, grace_ms=self.grace_ms)))

    def stale_actionable(self, stamp: Any) -> bool:
        """The config-stale rule on one stamp: `stamp <= current - gap` (the store's own
        comparison, see `core.rules.reconcile.diff_tenant_chunks`)."""
        return (self.gap is not None and self.current_version > 0 and is_real_number(stamp)
                and stamp < self.current_version and stamp <= self.current_version - self.gap)


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
    #: by id (`core.rules.tombstone_bands.legacy_bands`).
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


class OldestOrphans(OldestKeys):
    """The (`ingestedAt`, id, `sourcePath`) of the oldest `capacity` deletable manifest
    orphans of one repo (`OldestKeys`: ties go to the smaller id)."""

    def offer(self, ingested_at: Number, path: str, row_id: str = "") -> None:
        """Keep the chunk if it is among the oldest `capacity` seen."""
        self.offer_key((ingested_at, row_id, path))

    def sorted(self) -> list[tuple[Number, str]]:
        """The kept (`ingestedAt`, `sourcePath`) pairs, oldest first."""
        return [(key[0], key[2]) for key in self.kept()]


@dataclass(frozen=True, slots=True)
class FirstToGo:
    """What a capped pass deletes, reason by reason: the config-stale chunks first, then every
    other reason's (manifest orphans of every repo, generation orphans) by the oldest
    `ingestedAt`, then the smaller id, up to the cap in all (CONTRACT "Tombstones")."""

    #: The legacy config-stale chunks' (id, `ingestedAt` as read), by id: deleted first (they
    #: predate every numeric stamp).
    legacy: list[tuple[str, Any]]
    #: The config-stale chunks' sorted `ingestedAt`.
    stale: list[Number]
    #: Per repo: its manifest orphans' sorted (`ingestedAt`, `sourcePath`).
    orphans: dict[str, list[tuple[Number, str]]]
    #: Per generation job: its chunks' sorted (`ingestedAt`, `sourcePath`).
    generations: dict[Any, list[tuple[Number, str]]]
    #: Every chosen chunk's id (what `explain` marks).
    ids: frozenset[str]


def orphan_bands(pairs: Sequence[tuple[Number, str]], *, band_rows: int) -> list[Band]:
    """Bands over sorted (`ingestedAt`, `sourcePath`) pairs, each narrowed to the paths of its
    own chunks (`sourcePath $in`): every deletable orphan in a band's range is in the pairs
    (the oldest are kept), so its path is in the band's list."""
    rows = min(band_rows, PATHS_PER_BAND)
    bands: list[Band] = []
    start = 0
    for band in plan_bands([v for v, _ in pairs], band_rows=rows):
        paths = sorted({p for _, p in pairs[start:start + band.planned]})
        if len(paths) > PATHS_PER_BAND:  # a run of equal ingestedAt over many paths
            raise ValueError(f"a band names {len(paths)} paths, over {PATHS_PER_BAND}")
        bands.append(Band(band.after, band.through, band.planned,
                          ({PATH_KEY: {"$in": paths}},)))
        start += band.planned
    return bands


def orphan_rule(tenant_id: str, manifest: RepoManifest) -> Callable[[Mapping[str, Any]], bool]:
    """The manifest-orphan rule on one fetched row's metadata: this tenant's, this repo's, and
    an orphan of its manifest."""
    manifests = {manifest.repo_slug: manifest}
    return lambda m: (m.get(TENANT_KEY) == tenant_id and m.get(REPO_KEY) == manifest.repo_slug
                      and manifest_orphan("", m, manifests) is not None)


def orphan_clauses(tenant_id: str, manifest: RepoManifest) -> tuple[dict[str, Any], ...]:
    """What every orphan band of a repo shares: the tenant, the repo, and the manifest's
    authority (`ingestedAt <= updatedAt`: a chunk re-ingested after the manifest never
    matches)."""
    return ({TENANT_KEY: tenant_id}, {REPO_KEY: manifest.repo_slug},
            {INGESTED_KEY: {"$lte": manifest.updated_at}})


@dataclass(slots=True)
class TenantTally:
    """The figures of one tenant's scan, page after page, and what a capped pass deletes
    first. Memory: the cap's worth of `ingestedAt` per kind, the manifests' paths, and the
    verdicts only when `keep_rows` (explain)."""

    rules: ScanRules
    #: Deletions a pass may make (0 when it deletes nothing: nothing kept for bands).
    cap: int
    keep_rows: bool = False
    scanned: int = 0
    stale_count: int = 0
    stale_actionable_count: int = 0
    manifest_orphan_count: int = 0
    orphan_actionable_count: int = 0
    total_orphan_count: int = 0
    actionable_count: int = 0
    held_count: int = 0
    #: Actionable chunks with a legacy `ingestedAt`, deleted by id (`RowVerdict.legacy`).
    legacy_count: int = 0
    #: The tenant's chunks with fields of unexpected types (see the module docstring).
    malformed_count: int = 0
    oldest_stale: OldestIngested = field(init=False)
    #: The legacy chunks a capped pass takes, (id, `ingestedAt`), the smallest ids.
    legacy_stale: OldestKeys = field(init=False)
    oldest_orphans: dict[str, OldestOrphans] = field(init=False)
    coverage: PathCoverage = field(init=False)
    rows: list[RowVerdict] = field(default_factory=list)
    #: The malformed chunks themselves, only when `keep_rows` (explain).
    malformed: list[MalformedChunk] = field(default_factory=list)
    #: Per repo with a manifest: its chunks, its manifest orphans, its orphans actionable by
    #: manifest, and of those the ones only the manifest made actionable (and held among them).
    repo_chunks: Counter[str] = field(default_factory=Counter)
    repo_orphans: Counter[str] = field(default_factory=Counter)
    _orphan_actionable: Counter[str] = field(default_factory=Counter)
    _only_orphan_actionable: Counter[str] = field(default_factory=Counter)
    _only_orphan_held: Counter[str] = field(default_factory=Counter)
    #: Repos the manifest-mismatch guard holds (set by `settle`), and the orphans it holds.
    mismatched_repos: tuple[str, ...] = ()
    mismatch_held_count: int = 0
    settled: bool = False
    #: The generation signals' own tally (None when no repo declares a generation).
    generations: GenerationTally | None = field(init=False)

    def __post_init__(self) -> None:
        self.generations = (GenerationTally(self.rules.tenant_id, self.rules.signals,
                                            self.rules.read_ms, keep_rows=self.keep_rows)
                            if self.rules.signals else None)
        self.oldest_stale = OldestIngested(self.cap)
        self.legacy_stale = OldestKeys(self.cap)
        self.oldest_orphans = {slug: OldestOrphans(self.cap) for slug in self.rules.ripe_repos}
        self.coverage = PathCoverage(self.rules.manifests)

    def add_page(self, page: Sequence[Any]) -> None:
        """Judge a page of rows (objects with `id` and `metadata`)."""
        self.scanned += len(page)
        tenant_id = self.rules.tenant_id
        for row in page:
            metadata = row.metadata
            bad = malformed_fields(metadata)
            if bad and metadata.get(TENANT_KEY) == tenant_id:
                self.malformed_count += 1
                if self.keep_rows:
                    self.malformed.append(MalformedChunk(
                        row.id, bad, tuple(metadata.get(name) for name in bad)))
            if self.rules.manifests:
                self.coverage.observe(metadata)
                self._count_repo_chunk(metadata)
            verdict = judge_row(row.id, metadata, self.rules)
            if verdict is not None:
                self._count(verdict, metadata)
            if self.generations is not None:
                self.generations.observe(row.id, metadata, other=verdict)

    def _count_repo_chunk(self, metadata: Mapping[str, Any]) -> None:
        slug = metadata.get(REPO_KEY)
        if (isinstance(slug, str) and slug in self.rules.manifests
                and metadata.get(TENANT_KEY) == self.rules.tenant_id):
            self.repo_chunks[slug] += 1

    def _count(self, verdict: RowVerdict, metadata: Mapping[str, Any]) -> None:
        self.stale_count += verdict.stale
        self.stale_actionable_count += verdict.stale_actionable
        self.manifest_orphan_count += verdict.orphan
        self.orphan_actionable_count += verdict.orphan_actionable
        self.total_orphan_count += 1
        self.actionable_count += verdict.actionable
        self.held_count += verdict.held
        if verdict.orphan and verdict.repo_slug is not None:
            slug = verdict.repo_slug
            self.repo_orphans[slug] += 1
            self._orphan_actionable[slug] += verdict.orphan_actionable
            if verdict.orphan_actionable and not verdict.stale_actionable:
                self._only_orphan_actionable[slug] += 1
                self._only_orphan_held[slug] += verdict.held
        if self.keep_rows:
            self.rows.append(verdict)
        if verdict.legacy:
            self.legacy_count += 1
            self.legacy_stale.offer_key((verdict.id, metadata.get(INGESTED_KEY)))
            return
        if verdict.held or not verdict.actionable:
            return
        # A row actionable both ways is planned once, with the config-stale bands.
        if verdict.stale_actionable:
            self.oldest_stale.offer(metadata[INGESTED_KEY], verdict.id)
        else:
            self.oldest_orphans[metadata[REPO_KEY]].offer(metadata[INGESTED_KEY],
                                                           metadata[PATH_KEY], verdict.id)

    def settle(self) -> None:
        """Apply the manifest-mismatch guard once the last page is in (idempotent): each repo
        whose manifest orphans more than `max_stale_fraction` of the repo's chunks
        (`manifest_mismatched`) is held: its orphans leave the actionable counts and the
        bands, and the kept verdicts say so; a chunk also actionable by version stays
        actionable (the config version is a separate authority)."""
        if self.settled:
            return
        self.settled = True
        self._settle_manifests()
        if self.generations is not None:  # the generation signals join the union
            gen = self.generations
            gen.settle(mismatched_repos=self.mismatched_repos)
            self.total_orphan_count += gen.extra_orphans
            self.actionable_count += gen.extra_actionable
            self.held_count += gen.extra_held

    def _settle_manifests(self) -> None:
        held = tuple(sorted(
            slug for slug, orphans in self.repo_orphans.items()
            if manifest_mismatched(orphans=orphans, chunks=self.repo_chunks[slug],
                                   max_fraction=self.rules.max_stale_fraction)))
        if not held:
            return
        self.mismatched_repos = held
        self.mismatch_held_count = sum(self.repo_orphans[slug] for slug in held)
        for slug in held:
            self.orphan_actionable_count -= self._orphan_actionable[slug]
            self.actionable_count -= self._only_orphan_actionable[slug]
            self.held_count -= self._only_orphan_held[slug]
            self.oldest_orphans.pop(slug, None)
        self.rows = [replace(v, orphan_actionable=False, held=v.held and v.stale_actionable)
                     if v.orphan and v.repo_slug in held else v for v in self.rows]

    def first_to_go(self) -> FirstToGo:
        """What a pass capped at `cap` deletes once settled (`FirstToGo`): the oldest
        config-stale chunks first, then the oldest of every other reason together, ties by
        id; each reason's keep holds its own oldest `cap`, so the merge is exact."""
        self.settle()
        legacy = [(str(i), v) for i, v in self.legacy_stale.kept()]
        stale = self.oldest_stale.kept()[:max(0, self.cap - len(legacy))]
        others: list[tuple[Number, str, str, Any]] = [
            (value, row_id, path, ("orphan", slug))
            for slug, oldest in self.oldest_orphans.items()
            for value, row_id, path in oldest.kept()]
        if self.generations is not None:
            others += [(value, row_id, path, ("generation", job))
                       for job, chunks in self.generations.deletable.items()
                       for value, row_id, path in chunks]
        others.sort(key=lambda chunk: (chunk[0], chunk[1]))
        taken = others[:max(0, self.cap - len(legacy) - len(stale))]
        orphans: dict[str, list[tuple[Number, str]]] = {}
        generations: dict[Any, list[tuple[Number, str]]] = {}
        for value, _row_id, path, (kind, key) in taken:
            (orphans if kind == "orphan" else generations).setdefault(key, []).append(
                (value, path))
        return FirstToGo(legacy, [key[0] for key in stale], orphans, generations,
                         frozenset([i for i, _ in legacy] + [str(key[1]) for key in stale]
                                   + [chunk[1] for chunk in taken]))

    def missing_paths(self) -> dict[str, tuple[str, ...]]:
        """Per repo, the manifest paths no scanned chunk carries."""
        return self.coverage.missing() if self.rules.manifests else {}
