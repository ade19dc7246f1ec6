"""A tenant's generation rules over one pass (pure): `GenerationTally` gathers the generation
orphans page by page (`orphans` classifies each row and says when a replacement counts),
counts them in the union with the other rules, and plans the deletable chunks per job.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from core.base.rules.numbers import is_real_number
from core.reconcile.rules.generations.orphans import (
    KIND_PARSER,
    STAMPERS,
    TIER_UNYIELDED,
    GenerationClassifier,
    GenerationOrphan,
    GenerationRule,
    Number,
    Stamp,
    YieldAuthority,
    stamp_clauses,
    within_window,
)
from core.reconcile.rules.manifests import INGESTED_KEY, PATH_KEY, REPO_KEY
from core.reconcile.rules.reconcile import TENANT_KEY


@dataclass(frozen=True, slots=True)
class GenerationJobKey:
    """The chunks one tombstoning job deletes: one tier of one stamp of one repo (one
    predicate the store can evaluate exactly)."""

    kind: str
    repo_slug: str
    stamp: Stamp
    tier: str


@dataclass(slots=True)
class GenerationTally:
    """A tenant's generation rules over a pass's pages, settled after the last page. The other
    rules' verdict on each row is passed in, so the union counts a row once and a row another
    rule already deletes is planned there, not twice."""

    tenant_id: str
    rules: tuple[GenerationRule, ...]
    read_ms: int
    keep_rows: bool = False
    classifiers: list[GenerationClassifier] = field(init=False)
    #: Per row id another rule judged: (repo, actionable by version, by manifest).
    _others: dict[str, tuple[Any, bool, bool]] = field(default_factory=dict)
    parser_orphan_count: int = 0
    extraction_orphan_count: int = 0
    #: Generation orphans no other rule counted (the union's extra), actionable ones
    #: among them, and of those the ones no band can hold.
    extra_orphans: int = 0
    extra_actionable: int = 0
    extra_held: int = 0
    #: Per job: the deletable chunks' (`ingestedAt`, id, `sourcePath`), and the paths the
    #: job's rule lets go.
    deletable: dict[GenerationJobKey, list[tuple[Number, str, str]]] = field(
        default_factory=dict)
    paths: dict[GenerationJobKey, set[str]] = field(default_factory=dict)
    rows: list[GenerationOrphan] = field(default_factory=list)
    settled: bool = False

    def __post_init__(self) -> None:
        self.classifiers = [GenerationClassifier(s, self.tenant_id, self.read_ms)
                            for s in self.rules]

    def observe(self, row_id: str, metadata: Mapping[str, Any], *, other: Any) -> None:
        """Feed one row; `other` is the other rules' verdict on it (None: neither)."""
        for classifier in self.classifiers:
            classifier.observe(row_id, metadata)
        if other is not None:
            self._others[row_id] = (other.repo_slug, other.stale_actionable,
                                    other.orphan_actionable)

    def settle(self, *, mismatched_repos: Iterable[str]) -> None:
        """Classify (idempotent); `mismatched_repos`: the repos whose manifest orphans the
        manifest-mismatch guard holds (not actionable by the manifest)."""
        if self.settled:
            return
        self.settled = True
        held_repos = set(mismatched_repos)
        seen: set[str] = set()
        for classifier in self.classifiers:
            for orphan in classifier.orphans():
                if orphan.kind == KIND_PARSER:
                    self.parser_orphan_count += 1
                else:
                    self.extraction_orphan_count += 1
                if self.keep_rows:
                    self.rows.append(orphan)
                if orphan.id in seen:
                    continue
                seen.add(orphan.id)
                self._plan(orphan, held_repos)

    def _plan(self, orphan: GenerationOrphan, held_repos: set[str]) -> None:
        other = self._others.get(orphan.id)
        if other is None:
            self.extra_orphans += 1
        repo, by_version, by_manifest = other or (None, False, False)
        if by_version or (by_manifest and repo not in held_repos) or not orphan.actionable:
            return
        self.extra_actionable += 1
        ingested = orphan.ingested_at
        if not (is_real_number(ingested) and ingested <= self.read_ms):
            self.extra_held += 1
            return
        key = GenerationJobKey(orphan.kind, orphan.repo_slug, orphan.stamp, orphan.tier)
        self.deletable.setdefault(key, []).append((ingested, orphan.id, orphan.source_path))
        self.paths.setdefault(key, set()).add(orphan.source_path)

    def set_aside(self, held: frozenset[str]) -> int:
        """Take the chunks a restore holds out of the deletable ones; how many."""
        if not held:
            return 0
        count = 0
        for key, chunks in list(self.deletable.items()):
            kept = [c for c in chunks if c[1] not in held]
            count += len(chunks) - len(kept)
            if kept:
                self.deletable[key] = kept
            else:
                del self.deletable[key]
        return count

    @property
    def orphan_ids(self) -> set[str]:
        """Every generation orphan's id (kept rows only)."""
        return {o.id for o in self.rows}

    def authority(self, key: GenerationJobKey) -> YieldAuthority | None:
        """The yield authority of a job's repo under its rule."""
        rule = next(r for r in self.rules if r.kind == key.kind)
        return rule.authority.get(key.repo_slug)

    def clauses(self, key: GenerationJobKey) -> tuple[dict[str, Any], ...]:
        """What every band of a job shares: the tenant, the repo, exactly the old stamp, and for
        the unyielded tier the authority's window (`ingestedAt <= updatedAt`)."""
        clauses: list[dict[str, Any]] = [{TENANT_KEY: self.tenant_id},
                                         {REPO_KEY: key.repo_slug},
                                         *stamp_clauses(key.kind, key.stamp)]
        authority = self.authority(key)
        if key.tier == TIER_UNYIELDED and authority is not None \
                and authority.updated_at is not None:
            clauses.append({INGESTED_KEY: {"$lte": authority.updated_at}})
        return tuple(clauses)

    def may_delete(self, key: GenerationJobKey) -> Callable[[Mapping[str, Any]], bool]:
        """The job's rule on one fetched row: this tenant's and repo's, still the old stamp, a
        path the pass found deletable for this tier."""
        paths = frozenset(self.paths.get(key, ()))
        stamper = STAMPERS[key.kind]
        authority = self.authority(key)

        def may_delete(m: Mapping[str, Any]) -> bool:
            if not (m.get(TENANT_KEY) == self.tenant_id and m.get(REPO_KEY) == key.repo_slug
                    and stamper(m) == key.stamp and m.get(PATH_KEY) in paths):
                return False
            if key.tier == TIER_UNYIELDED:
                return authority is not None and within_window(authority, m.get(INGESTED_KEY))
            return True

        return may_delete
