"""Generation orphans (pure): chunks of a repo's superseded generation, the original's
parser-identity "signal" (#17392) and its successor's extraction identity (neo-agent-brain #262).

A chunk's generation stamp is an input of its id, so a new generation *adds* rows beside the
old ones, which neither the config version nor the manifest sees. A repo declares its current
generation in `tenantRepos`; a chunk whose stamp is a string other than the declared one
(plain string equality: a newer stamp is an orphan too) is a generation orphan, in one of two
tiers:

- **superseded**: its path is still yielded (or the repo has no yield authority: "unknown is
  not empty"). Actionable only once a chunk at the declared generation exists for the same
  (repo, path): nothing is deleted ahead of its replacement.
- **unyielded**: its path is absent from the repo's yield authority and its `ingestedAt` is at
  or before the authority's `updatedAt` (a chunk newer than the authority was written by
  something it has not seen). Actionable: no replacement will ever come.

The parser pair's yield authority is the manifest; the extraction identity's is the manifest's
`extractionSnapshot`, only while it carries the declared identity. A repo without a declared
generation, a chunk without a well-formed stamp or a string `sourcePath`, is never an orphan.

In a pass, a replacement counts only with a numeric `ingestedAt` at or before the pass's read,
so one arriving while the pass pages through the tenant never makes an early delete.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from core.base.rules.numbers import is_real_number
from core.reconcile.rules.generations.extraction_snapshot import (
    SNAPSHOT_KEY,
    ExtractionSnapshot,
    is_extraction_identity,
)
from core.reconcile.rules.manifests import INGESTED_KEY, PATH_KEY, REPO_KEY, RepoManifest
from core.reconcile.rules.reconcile import TENANT_KEY
from core.reconcile.rules.tombstone_bands import deletion_bound

PARSER_ID_KEY: Final = "parserId"
PARSER_VERSION_KEY: Final = "parserVersion"
EXTRACTION_KEY: Final = "extractionIdentity"
TENANT_REPOS_KEY: Final = "tenantRepos"
#: The version a `parserId` without `parserVersion` declares: the producer stamps
#: `file.parserVersion || '1.0.0'`, so without it a whole repo would be reclaimed.
DEFAULT_PARSER_VERSION: Final = "1.0.0"

TIER_SUPERSEDED: Final = "superseded"
TIER_UNYIELDED: Final = "unyielded"
KIND_PARSER: Final = "parser"
KIND_EXTRACTION: Final = "extraction"
REASON_PARSER: Final = "parser-identity-mismatch"
REASON_EXTRACTION: Final = "extraction-currency-mismatch"
REASONS: Final = {KIND_PARSER: REASON_PARSER, KIND_EXTRACTION: REASON_EXTRACTION}

Number = int | float
#: A generation stamp: (parserId, parserVersion) or (extractionIdentity,).
Stamp = tuple[str, ...]


@dataclass(frozen=True, slots=True)
class RepoGeneration:
    """One `tenantRepos` entry: the generation a repo declares now."""

    repo_slug: str
    parser_id: str | None = None
    parser_version: str | None = None
    extraction_identity: str | None = None

    def stored(self) -> dict[str, Any]:
        """The entry as the tenant config stores it (absent values left out)."""
        entry: dict[str, Any] = {REPO_KEY: self.repo_slug}
        for key, value in ((PARSER_ID_KEY, self.parser_id),
                           (PARSER_VERSION_KEY, self.parser_version),
                           (EXTRACTION_KEY, self.extraction_identity)):
            if value is not None:
                entry[key] = value
        return entry


def repo_generation(repo_slug: str, *, parser_id: str | None, parser_version: str | None,
                    extraction_identity: str | None) -> RepoGeneration:
    """A declaration from `set-repo`'s flags, checked (ValueError naming the flag)."""
    if parser_version is not None and parser_id is None:
        raise ValueError("--parser-version: only with --parser-id")
    if parser_id is not None and not parser_id.strip():
        raise ValueError("--parser-id: empty")
    if parser_version is not None and not parser_version.strip():
        raise ValueError("--parser-version: empty")
    if extraction_identity is not None and not is_extraction_identity(extraction_identity):
        raise ValueError("--extraction-identity: expected 64 lowercase hex characters "
                         "(a sha256 digest)")
    if parser_id is not None and parser_version is None:
        parser_version = DEFAULT_PARSER_VERSION
    return RepoGeneration(repo_slug, parser_id, parser_version, extraction_identity)


def replaced_repos(stored: Any, slug: str, entry: RepoGeneration | None) -> list[Any]:
    """The `tenantRepos` list with `slug`'s entry replaced by `entry` (removed when None), the
    others kept as stored."""
    kept = [e for e in (stored if isinstance(stored, list) else [])
            if not (isinstance(e, Mapping) and e.get(REPO_KEY) == slug)]
    return kept if entry is None else [*kept, entry.stored()]


#: The keys of a `tenantRepos` entry that declare its generation (the rest, on a neo.mjs graph
#: `cloneUrl`, `credentialRef`, `branchRef`, ..., are the platform's).
GENERATION_KEYS: Final = (PARSER_ID_KEY, PARSER_VERSION_KEY, EXTRACTION_KEY)


def declared_in_place(stored: Any, slug: str, entry: RepoGeneration | None) -> list[Any]:
    """The `tenantRepos` list as `set-repo` leaves it on a neo.mjs graph: `slug`'s entries keep
    the platform's keys, their generation keys replaced by `entry`'s. LookupError when no entry
    names `slug`: the original's `normalizeTenantRepoConfig` throws on an entry without the
    `cloneUrl` and `credentialRef` only the platform can give, stopping its repository sync."""
    repos = stored if isinstance(stored, list) else []
    if not any(isinstance(e, Mapping) and e.get(REPO_KEY) == slug for e in repos):
        raise LookupError(f"repo {slug!r} is not in the tenant's tenantRepos; on a neo.mjs "
                          "graph the platform declares a repo (its cloneUrl and "
                          "credentialRef), set-repo only gives it a generation")
    declared = {} if entry is None else {k: v for k, v in entry.stored().items()
                                         if k in GENERATION_KEYS}
    return [{**{k: v for k, v in e.items() if k not in GENERATION_KEYS}, **declared}
            if isinstance(e, Mapping) and e.get(REPO_KEY) == slug else e for e in repos]


def _entries(tenant_repos: Any) -> Iterable[Mapping[str, Any]]:
    if not isinstance(tenant_repos, list):
        return ()
    return (e for e in tenant_repos
            if isinstance(e, Mapping) and isinstance(e.get(REPO_KEY), str) and e[REPO_KEY])


def declared_repo_slugs(tenant_repos: Any) -> tuple[str, ...]:
    """The `repoSlug` of every `tenantRepos` entry that has one."""
    return tuple(e[REPO_KEY] for e in _entries(tenant_repos))


def declared_parsers(tenant_repos: Any) -> dict[str, Stamp]:
    """`{repoSlug: (parserId, parserVersion)}` of the entries with a string `parserId` (the
    original's `fetchTenantDeclaredParsers`)."""
    declared: dict[str, Stamp] = {}
    for e in _entries(tenant_repos):
        parser_id, version = e.get(PARSER_ID_KEY), e.get(PARSER_VERSION_KEY)
        if isinstance(parser_id, str) and parser_id:
            declared[e[REPO_KEY]] = (parser_id, version if isinstance(version, str) and version
                                     else DEFAULT_PARSER_VERSION)
    return declared


def declared_extractions(tenant_repos: Any) -> dict[str, Stamp]:
    """`{repoSlug: (extractionIdentity,)}` of the entries whose identity is 64 hex (the
    original's `fetchTenantExtractionIdentities`)."""
    return {e[REPO_KEY]: (e[EXTRACTION_KEY],) for e in _entries(tenant_repos)
            if is_extraction_identity(e.get(EXTRACTION_KEY))}


def declares_generations(tenant_repos: Any) -> bool:
    """Whether any repo of the tenant declares a generation."""
    return bool(declared_parsers(tenant_repos) or declared_extractions(tenant_repos))


@dataclass(frozen=True, slots=True)
class YieldAuthority:
    """The paths a repo's current generation yields, and when that was recorded (None: no
    freshness fence, as the original's parser tier)."""

    paths: frozenset[str]
    updated_at: Number | None


def snapshot_patch(repo_slug: str, snapshot: ExtractionSnapshot) -> dict[str, Any]:
    """The merge patch that replaces one repo's snapshot and keeps its `pathsAfterPush`."""
    return {"manifests": {repo_slug: {SNAPSHOT_KEY: snapshot.stored()}}}


def extraction_authority(snapshot: ExtractionSnapshot | None,
                         declared: str) -> YieldAuthority | None:
    """The snapshot as yield authority of the declared identity: only while it carries it."""
    if snapshot is None or snapshot.extraction_identity != declared:
        return None
    return YieldAuthority(frozenset(snapshot.yielded_source_paths), snapshot.updated_at)


def parser_stamp(metadata: Mapping[str, Any]) -> Stamp | None:
    """The chunk's (parserId, parserVersion) when both are strings."""
    pid, version = metadata.get(PARSER_ID_KEY), metadata.get(PARSER_VERSION_KEY)
    return (pid, version) if isinstance(pid, str) and isinstance(version, str) else None


def extraction_stamp(metadata: Mapping[str, Any]) -> Stamp | None:
    """The chunk's extraction identity when it is 64 hex (a malformed one is skipped)."""
    value = metadata.get(EXTRACTION_KEY)
    return (value,) if is_extraction_identity(value) else None


def stamp_clauses(kind: str, stamp: Stamp) -> tuple[dict[str, Any], ...]:
    """`where` clauses that match exactly this stamp (the store re-checks it at delete time)."""
    if kind == KIND_PARSER:
        return ({PARSER_ID_KEY: {"$eq": stamp[0]}}, {PARSER_VERSION_KEY: {"$eq": stamp[1]}})
    return ({EXTRACTION_KEY: {"$eq": stamp[0]}},)


STAMPERS: Final[Mapping[str, Callable[[Mapping[str, Any]], Stamp | None]]] = {
    KIND_PARSER: parser_stamp, KIND_EXTRACTION: extraction_stamp}


@dataclass(frozen=True, slots=True)
class GenerationRule:
    """One kind of generation identity for one tenant: the declared stamp per repo and each
    repo's yield authority (absent: none)."""

    kind: str
    declared: Mapping[str, Stamp]
    authority: Mapping[str, YieldAuthority]


@dataclass(frozen=True, slots=True)
class GenerationOrphan:
    """One chunk of a superseded generation."""

    id: str
    kind: str
    repo_slug: str
    source_path: str
    stamp: Stamp
    declared: Stamp
    tier: str
    ingested_at: Any
    actionable: bool

    @property
    def reason(self) -> str:
        """`parser-identity-mismatch` or `extraction-currency-mismatch`."""
        return REASONS[self.kind]

    @property
    def why(self) -> str:
        """One line an operator reads in `explain`."""
        was, now = "/".join(self.stamp), "/".join(self.declared)
        if self.tier == TIER_UNYIELDED:
            return (f"{self.kind} {was} is not the declared {now}, and the yield authority "
                    "no longer yields its path")
        if self.actionable:
            return f"{self.kind} {was} is not the declared {now}, and a replacement exists"
        return (f"{self.kind} {was} is not the declared {now}; waiting for a replacement at "
                "the declared generation")


def within_window(authority: YieldAuthority, ingested: Any) -> bool:
    """Inside the authority's window: no fence, or a numeric `ingestedAt <= updatedAt`."""
    if authority.updated_at is None:
        return True
    return is_real_number(ingested) and ingested <= authority.updated_at


@dataclass(slots=True)
class GenerationClassifier:
    """One rule's classification over a tenant's rows, fed row by row: the original's
    replacement and classification passes in one read. `read_ms` None (the original's engine,
    the tests' oracle): any row at the declared generation counts as a replacement."""

    rule: GenerationRule
    tenant_id: str
    read_ms: int | None = None
    replaced: set[tuple[str, str]] = field(default_factory=set)
    #: (id, repo, path, stamp, tier, ingestedAt), in input order.
    candidates: list[tuple[str, str, str, Stamp, str, Any]] = field(default_factory=list)

    def observe(self, row_id: str, metadata: Mapping[str, Any]) -> None:
        """Judge one row (of any tenant: other tenants' are skipped)."""
        if metadata.get(TENANT_KEY) != self.tenant_id:
            return
        repo, path = metadata.get(REPO_KEY), metadata.get(PATH_KEY)
        if not isinstance(repo, str) or not isinstance(path, str):
            return
        declared = self.rule.declared.get(repo)
        if declared is None:
            return
        stamp = STAMPERS[self.rule.kind](metadata)
        if stamp is None:
            return
        ingested = metadata.get(INGESTED_KEY)
        if stamp == declared:
            if self.read_ms is None or deletion_bound(metadata, read_ms=self.read_ms) is not None:
                self.replaced.add((repo, path))
            return
        authority = self.rule.authority.get(repo)
        tier = (TIER_UNYIELDED if authority is not None and path not in authority.paths
                and within_window(authority, ingested) else TIER_SUPERSEDED)
        self.candidates.append((row_id, repo, path, stamp, tier, ingested))

    def orphans(self) -> list[GenerationOrphan]:
        """The orphans, in input order, each actionable when unyielded or replaced."""
        kind, declared = self.rule.kind, self.rule.declared
        return [GenerationOrphan(i, kind, repo, path, stamp, declared[repo], tier, ingested,
                                 tier == TIER_UNYIELDED or (repo, path) in self.replaced)
                for i, repo, path, stamp, tier, ingested in self.candidates]


def tenant_generation_rules(tenant_repos: Any, manifests: Mapping[str, RepoManifest]
                   ) -> tuple[GenerationRule, ...]:
    """The tenant's generation rules in a pass, those with a declaring repo."""
    rules: list[GenerationRule] = []
    parsers = declared_parsers(tenant_repos)
    if parsers:
        rules.append(GenerationRule(KIND_PARSER, parsers, {
            slug: YieldAuthority(m.path_set, m.updated_at)
            for slug, m in manifests.items() if slug in parsers}))
    extractions = declared_extractions(tenant_repos)
    if extractions:
        rules.append(GenerationRule(KIND_EXTRACTION, extractions, {
            slug: a for slug, d in extractions.items() if slug in manifests
            and (a := extraction_authority(manifests[slug].extraction_snapshot, d[0]))
            is not None}))
    return tuple(rules)
