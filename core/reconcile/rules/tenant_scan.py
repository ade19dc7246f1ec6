"""One tenant's scan, tallied (pure): the counts of stale and orphaned chunks, which are
actionable, what a tombstoning pass may delete first, and which manifest paths no chunk
carries. Each row's verdict is `scan_verdicts.judge_row`.

The pass and `reconcile explain` feed the same pages through the same `TenantTally`, so the
plan an operator reads has the numbers the pass acts on. `total_orphan_count` and
`actionable_count` are unions (a row that is both stale and orphaned counts once). The
manifest-mismatch guard is the tally's own (`settle`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from core.reconcile.rules.generations.tally import GenerationTally
from core.reconcile.rules.manifests import INGESTED_KEY, PATH_KEY, REPO_KEY, PathCoverage
from core.reconcile.rules.orphan_bands import OldestOrphans
from core.reconcile.rules.reconcile import TENANT_KEY, manifest_mismatched
from core.reconcile.rules.reconcile_outcome import ScanFigures
from core.reconcile.rules.scan_verdicts import (
    MalformedChunk,
    RowVerdict,
    ScanRules,
    judge_row,
    malformed_fields,
)
from core.reconcile.rules.tombstone_bands import Number, OldestIngested, OldestKeys, legacy_order


@dataclass(frozen=True, slots=True)
class FirstToGo:
    """What a capped pass deletes: ONE selection across every reason, up to the cap in all
    (glossary: first to go; CONTRACT "Tombstones"). `explain` marks exactly `ids`, and the
    pass's bands name exactly these ids, reason by reason; each list is in the one order."""

    #: (id, `ingestedAt` as read).
    legacy: list[tuple[str, Any]]
    stale: list[tuple[Number, str]]
    #: Per repo: (`ingestedAt`, id, `sourcePath`).
    orphans: dict[str, list[tuple[Number, str, str]]]
    #: Per generation job: (`ingestedAt`, id, `sourcePath`).
    generations: dict[Any, list[tuple[Number, str, str]]]
    order: tuple[str, ...]

    @property
    def ids(self) -> frozenset[str]:
        """The chosen ids (`explain`'s marks)."""
        return frozenset(self.order)


@dataclass(slots=True)
class TenantTally:
    """The figures of one tenant's scan, page after page, and what a capped pass deletes
    first; the verdicts only when `keep_rows` (explain)."""

    rules: ScanRules
    #: Deletions a pass may make (0 when it deletes nothing: nothing kept for bands).
    cap: int
    keep_rows: bool = False
    #: The chunks a restore holds: counted as they are, never chosen to go.
    restore_held: frozenset[str] = frozenset()
    scanned: int = 0
    stale_count: int = 0
    stale_actionable_count: int = 0
    manifest_orphan_count: int = 0
    orphan_actionable_count: int = 0
    total_orphan_count: int = 0
    actionable_count: int = 0
    held_count: int = 0
    restore_held_count: int = 0
    legacy_count: int = 0
    #: Chunks judged on their well-typed fields only (`scan_verdicts`).
    malformed_count: int = 0
    #: Named by the telemetry row when the config names no repo.
    smallest_repo: str | None = None
    oldest_stale: OldestIngested = field(init=False)
    #: (`legacy_order`, id, `ingestedAt`).
    legacy_stale: OldestKeys = field(init=False)
    oldest_orphans: dict[str, OldestOrphans] = field(init=False)
    coverage: PathCoverage = field(init=False)
    rows: list[RowVerdict] = field(default_factory=list)
    malformed: list[MalformedChunk] = field(default_factory=list)
    #: Per repo with a manifest: its chunks, its manifest orphans, its orphans actionable by
    #: manifest, and of those the ones only the manifest made actionable (and held among them).
    repo_chunks: Counter[str] = field(default_factory=Counter)
    repo_orphans: Counter[str] = field(default_factory=Counter)
    _orphan_actionable: Counter[str] = field(default_factory=Counter)
    _only_orphan_actionable: Counter[str] = field(default_factory=Counter)
    _only_orphan_held: Counter[str] = field(default_factory=Counter)
    _only_orphan_restore_held: Counter[str] = field(default_factory=Counter)
    #: Repos the manifest-mismatch guard holds (set by `settle`), and the orphans it holds.
    mismatched_repos: tuple[str, ...] = ()
    mismatch_held_count: int = 0
    settled: bool = False
    generations: GenerationTally | None = field(init=False)

    def __post_init__(self) -> None:
        self.generations = (GenerationTally(self.rules.tenant_id, self.rules.generation_rules,
                                            self.rules.read_ms, keep_rows=self.keep_rows)
                            if self.rules.generation_rules else None)
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
            slug = metadata.get(REPO_KEY)
            if type(slug) is str and slug and (self.smallest_repo is None
                                               or slug < self.smallest_repo):
                self.smallest_repo = slug
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
                self._only_orphan_restore_held[slug] += (verdict.id in self.restore_held
                                                         and not verdict.held)
        if self.keep_rows:
            self.rows.append(verdict)
        if verdict.id in self.restore_held and (verdict.legacy or (verdict.actionable
                                                                   and not verdict.held)):
            self.restore_held_count += 1
            return
        if verdict.legacy:
            self.legacy_count += 1
            value = metadata.get(INGESTED_KEY)
            self.legacy_stale.offer_key((legacy_order(value), verdict.id, value))
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
        """Apply the manifest-mismatch guard once the last page is in (idempotent): the guard
        holds each `manifest_mismatched` repo's orphans (out of the actionable counts and the
        bands); a chunk also actionable by version stays so (a separate authority)."""
        if self.settled:
            return
        self.settled = True
        self._settle_manifests()
        if self.generations is not None:  # the generation rules join the union
            gen = self.generations
            gen.settle(mismatched_repos=self.mismatched_repos)
            self.total_orphan_count += gen.extra_orphans
            self.actionable_count += gen.extra_actionable
            self.held_count += gen.extra_held
            self.restore_held_count += gen.set_aside(self.restore_held)

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
            self.restore_held_count -= self._only_orphan_restore_held[slug]
            self.oldest_orphans.pop(slug, None)
        self.rows = [replace(v, orphan_actionable=False, held=v.held and v.stale_actionable)
                     if v.orphan and v.repo_slug in held else v for v in self.rows]

    def first_to_go(self) -> FirstToGo:
        """What a pass capped at `cap` deletes, once settled. Each reason keeps its own first
        `cap` in the one order, so the merge is exact."""
        self.settle()
        candidates: list[tuple[Number, str, Any]] = [
            (order, str(row_id), ("legacy", value))
            for order, row_id, value in self.legacy_stale.kept()]
        candidates += [(value, str(row_id), ("stale", None))
                       for value, row_id in self.oldest_stale.kept()]
        candidates += [(value, row_id, ("orphan", slug, path))
                       for slug, oldest in self.oldest_orphans.items()
                       for value, row_id, path in oldest.kept()]
        if self.generations is not None:
            candidates += [(value, row_id, ("generation", job, path))
                           for job, chunks in self.generations.deletable.items()
                           for value, row_id, path in chunks]
        candidates.sort(key=lambda chunk: (chunk[0], chunk[1]))
        chosen = FirstToGo([], [], {}, {}, tuple(c[1] for c in candidates[:max(0, self.cap)]))
        for value, row_id, why in candidates[:max(0, self.cap)]:
            if why[0] == "legacy":
                chosen.legacy.append((row_id, why[1]))
            elif why[0] == "stale":
                chosen.stale.append((value, row_id))
            else:
                into = chosen.orphans if why[0] == "orphan" else chosen.generations
                into.setdefault(why[1], []).append((value, row_id, why[2]))
        return chosen

    def figures(self) -> ScanFigures:
        """What the scan found, settled (`settle`)."""
        self.settle()
        gens = self.generations
        return ScanFigures(
            scanned=self.scanned, stale_count=self.stale_count,
            manifest_orphan_count=self.manifest_orphan_count,
            parser_orphan_count=gens.parser_orphan_count if gens else 0,
            extraction_orphan_count=gens.extraction_orphan_count if gens else 0,
            total_orphan_count=self.total_orphan_count,
            missing_paths={slug: len(p) for slug, p in self.missing_paths().items()},
            actionable_count=self.actionable_count, held_count=self.held_count,
            restore_held_count=self.restore_held_count, malformed_count=self.malformed_count,
            mismatched_repos=self.mismatched_repos,
            mismatch_held_count=self.mismatch_held_count, smallest_repo=self.smallest_repo)

    def missing_paths(self) -> dict[str, tuple[str, ...]]:
        """Per repo, the manifest paths no scanned chunk carries."""
        return self.coverage.missing() if self.rules.manifests else {}
