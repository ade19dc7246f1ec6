"""Tenant manifests (pure): a repo's claimed state, and the chunks and paths that disagree with it.

A manifest is what a tenant's repo holds after its last push (CONTRACT "Graph store", the
original's V1.x shape): node `kb-manifest:<tenantId>`, `properties.manifests` =
`{<repoSlug>: {repoSlug, pathsAfterPush, updatedAt, revision?}}`. It is kept apart from the
`kb-config:` node because that node's `version` is the staleness evidence: routine pushes must
not raise it.

- a **manifest orphan** (`manifest_orphan`, the original's `diffTenantManifest`): a chunk of a
  repo with a usable manifest whose `sourcePath` is a non-empty string not in `pathsAfterPush`,
  with a finite `ingestedAt` at or before the manifest's `updatedAt` (a chunk ingested later is
  outside its authority);
- a **missing path** (`PathCoverage`): a manifest path no chunk of that repo carries, a
  re-ingestion candidate, reported only.

A usable manifest has a non-empty `repoSlug`, a list `pathsAfterPush` and a finite numeric
`updatedAt`; any other is never judged against (no baseline, no deletion).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from core.base.rules.numbers import is_real_number
from core.base.rules.tenants import normalize_tenant_id, team_visible
from core.base.rules.terminal_text import inert
from core.reconcile.rules.generations.extraction_snapshot import ExtractionSnapshot, snapshot_from

MANIFEST_LABEL: Final = "KnowledgeBaseTenantManifest"
MANIFEST_PREFIX: Final = "kb-manifest:"
MANIFESTS_PROPERTY: Final = "manifests"
REPO_KEY: Final = "repoSlug"
PATH_KEY: Final = "sourcePath"
INGESTED_KEY: Final = "ingestedAt"


def manifest_node_id(tenant_id: str) -> str:
    """`kb-manifest:<tenantId>` for a (normalized here) tenant id."""
    return MANIFEST_PREFIX + normalize_tenant_id(tenant_id)


@dataclass(frozen=True, slots=True)
class RepoManifest:
    """One repo's claimed state."""

    repo_slug: str
    #: Sorted, de-duplicated, non-empty.
    paths_after_push: tuple[str, ...]
    #: Epoch ms: chunks ingested later are not judged by it.
    updated_at: int | float
    #: The commit id the paths were read at, when they came from git.
    revision: str | None = None
    #: The successor's extraction snapshot kept beside the manifest (`tenants set-yield`).
    extraction_snapshot: ExtractionSnapshot | None = field(default=None, compare=False)
    path_set: frozenset[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "path_set", frozenset(self.paths_after_push))

    def stored(self) -> dict[str, Any]:
        """The manifest as the node stores it."""
        entry: dict[str, Any] = {REPO_KEY: self.repo_slug,
                                 "pathsAfterPush": list(self.paths_after_push),
                                 "updatedAt": self.updated_at}
        if self.revision is not None:
            entry["revision"] = self.revision
        return entry


class ManifestPathError(ValueError):
    """A manifest path that breaks the path rules (`normalize_manifest_paths`)."""


#: A `find .` listing's prefix: stripped (with one note), since the paths are relative anyway.
FIND_PREFIX: Final = "./"
BYTE_ORDER_MARK: Final = "\ufeff"


def visible(text: str) -> str:
    """`text` as one inert line, so a path shown cannot drive the operator's terminal."""
    return inert(text, keep_newlines=False)


def path_problem(path: str) -> str | None:
    """What makes `path` (its `./` already stripped) unfit for a manifest, or None.

    A manifest path must be what a chunk's `sourcePath` holds, relative POSIX: any other spelling
    names no chunk's file, so every chunk of that file would become an orphan; a BOM or a
    control character is an accident, never a path a repo means."""
    if BYTE_ORDER_MARK in path:
        return "holds a byte-order mark (U+FEFF): save the list as UTF-8 without BOM"
    if any(ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F for c in path):
        return "holds a control character"
    if path.startswith("/"):
        return "is absolute (starts with /): give paths relative to the repository's top"
    segments = path.split("/")
    if "" in segments:
        return "has an empty segment (// or a trailing /)"
    if ".." in segments:
        return "has a .. segment"
    if "." in segments:
        return "has a . segment"
    return None


@dataclass(frozen=True, slots=True)
class NormalizedPaths:
    """A manifest's paths after `normalize_manifest_paths`, and what was changed on the way."""

    #: Sorted, de-duplicated, non-empty.
    paths: tuple[str, ...]
    #: Lines whose `./` prefix (a `find .` listing's) was stripped.
    stripped_prefixes: int = 0


def normalize_manifest_paths(
    lines: Iterable[str], *, source: str, numbered: bool = True
) -> NormalizedPaths:
    """The one check every manifest path goes through (paths files, stdin and git alike).

    One path a line (CRLF works, empty lines skipped, a `./` stripped and counted); a
    `path_problem`, or no path at all, raises ManifestPathError, so a bad list records nothing."""
    kept: set[str] = set()
    stripped = 0
    for number, line in enumerate(lines, start=1):
        shown = path = line.removesuffix("\r")
        if not path:
            continue
        if path.startswith(FIND_PREFIX):
            path = path[len(FIND_PREFIX):]
            stripped += 1
        problem = path_problem(path)
        if problem is not None:
            where = f"{source}:{number}" if numbered else source
            raise ManifestPathError(f"{where}: path '{visible(shown)}' {problem}")
        kept.add(path)
    if not kept:
        raise ManifestPathError(f"{source}: the path list is empty")
    return NormalizedPaths(tuple(sorted(kept)), stripped)


#: Chunk and manifest paths a refusal shows side by side.
SAMPLE_PATHS: Final = 3


@dataclass(slots=True)
class ManifestMatch:
    """Whether a new manifest names any chunk its repo has (`observe` each of its rows).

    A manifest that matches none of a repo's chunks names another tree (the wrong folder, a
    prefix): recorded, it would make every one of them an orphan."""

    paths: frozenset[str]
    chunks: int = 0
    matched: int = 0
    #: The first few distinct chunk paths seen.
    sample: set[str] = field(default_factory=set)

    def observe(self, metadata: Mapping[str, Any]) -> None:
        """Count one of the repo's chunks, and whether the manifest names its path."""
        self.chunks += 1
        path = metadata.get(PATH_KEY)
        if not isinstance(path, str):
            return
        if path in self.paths:
            self.matched += 1
        elif len(self.sample) < SAMPLE_PATHS:
            self.sample.add(path)

    def refusal(self, repo_slug: str) -> str | None:
        """The one-line reason to refuse the manifest, or None when it may be recorded."""
        if self.matched or not self.chunks:
            return None
        chunk_paths = ", ".join(visible(p) for p in sorted(self.sample)) or "(none a string)"
        listed = ", ".join(visible(p) for p in sorted(self.paths)[:SAMPLE_PATHS])
        return (f"the manifest matches none of the {self.chunks:,} chunks of repo "
                f"{visible(repo_slug)} (chunk paths: {chunk_paths}; manifest paths: {listed}); "
                "check the folder or list, or pass --force to record it anyway")


def claimed_paths(paths: Iterable[str]) -> tuple[str, ...]:
    """A manifest's paths: sorted, de-duplicated, blanks dropped. Raises ValueError when none
    is left (an empty claim would orphan every chunk of the repo)."""
    kept = sorted({p for p in paths if p})
    if not kept:
        raise ValueError("the path list is empty")
    return tuple(kept)


def usable_manifest(repo_slug: Any, entry: Any) -> RepoManifest | None:
    """The manifest a stored entry holds, or None when it is not usable (see the module)."""
    if not isinstance(repo_slug, str) or not repo_slug or not isinstance(entry, Mapping):
        return None
    paths, updated_at = entry.get("pathsAfterPush"), entry.get("updatedAt")
    if not isinstance(paths, list) or not is_real_number(updated_at):
        return None
    revision = entry.get("revision")
    return RepoManifest(repo_slug, tuple(sorted({p for p in paths if isinstance(p, str) and p})),
                        updated_at, revision if isinstance(revision, str) else None,
                        snapshot_from(entry))


def manifests_from(manifests_by_repo: Any) -> dict[str, RepoManifest]:
    """The usable manifests of a stored `{repoSlug: entry}` map."""
    if not isinstance(manifests_by_repo, Mapping):
        return {}
    usable = (usable_manifest(slug, entry) for slug, entry in manifests_by_repo.items())
    return {m.repo_slug: m for m in usable if m is not None}


def manifests_from_properties(properties: Any) -> dict[str, RepoManifest]:
    """The usable manifests of a `kb-manifest:` node's properties."""
    stored = properties.get(MANIFESTS_PROPERTY) if isinstance(properties, Mapping) else None
    return manifests_from(stored)


def manifest_patch(tenant_id: str, manifest: RepoManifest) -> dict[str, Any]:
    """The JSON merge patch that replaces one repo's manifest and keeps the others as stored
    (even unusable ones: another writer's to fix); `revision` is nulled unless set."""
    entry: dict[str, Any] = {"revision": None, **manifest.stored()}
    return {"tenantId": normalize_tenant_id(tenant_id),
            MANIFESTS_PROPERTY: {manifest.repo_slug: entry}}


def original_manifest_patch(tenant_id: str, manifest: RepoManifest,
                            stored_properties: Any) -> dict[str, Any]:
    """What `set-manifest` merges into the node on a neo.mjs graph, as the original's
    `setTenantManifest` writes it (the other keys kept by the merge). The merge deletes no key,
    so a stale `revision` is nulled, only when the stored entry has one."""
    entry = manifest.stored()
    if manifest.revision is None and _stored_entry(stored_properties,
                                                   manifest.repo_slug).get("revision"):
        entry["revision"] = None
    return team_visible({"tenantId": normalize_tenant_id(tenant_id),
                         MANIFESTS_PROPERTY: {manifest.repo_slug: entry},
                         "updatedAt": manifest.updated_at})


def _stored_entry(properties: Any, repo_slug: str) -> Mapping[str, Any]:
    by_repo = properties.get(MANIFESTS_PROPERTY) if isinstance(properties, Mapping) else None
    entry = by_repo.get(repo_slug) if isinstance(by_repo, Mapping) else None
    return entry if isinstance(entry, Mapping) else {}


@dataclass(frozen=True, slots=True)
class ManifestOrphan:
    """A chunk whose path its repo's manifest no longer claims."""

    id: str
    repo_slug: str
    source_path: str
    ingested_at: int | float
    manifest_updated_at: int | float


def manifest_orphan(
    row_id: str, metadata: Mapping[str, Any], manifests: Mapping[str, RepoManifest]
) -> ManifestOrphan | None:
    """The row as a manifest orphan, or None."""
    # A repo slug of another type (a list: Chroma 1.x stores those) names no repo, as the
    # store's own `repoSlug` comparison reads it; it must not raise (unhashable).
    repo = metadata.get(REPO_KEY)
    manifest = manifests.get(repo) if isinstance(repo, str) else None
    if manifest is None:
        return None
    path, ingested = metadata.get(PATH_KEY), metadata.get(INGESTED_KEY)
    if (not isinstance(path, str) or not path or not is_real_number(ingested)
            or ingested > manifest.updated_at or path in manifest.path_set):
        return None
    return ManifestOrphan(row_id, manifest.repo_slug, path, ingested, manifest.updated_at)


def manifest_ripe(manifest: RepoManifest, *, now_ms: int, grace_ms: float | None) -> bool:
    """Whether the manifest is at least `grace_ms` old (never when None: fails closed)."""
    return grace_ms is not None and now_ms - manifest.updated_at >= grace_ms


class PathCoverage:
    """Which manifest paths some chunk of their repo carries, over a scan: the rest are
    missing paths."""

    def __init__(self, manifests: Mapping[str, RepoManifest]) -> None:
        self._manifests = manifests
        self._seen: dict[str, set[str]] = {slug: set() for slug in manifests}

    def observe(self, metadata: Mapping[str, Any]) -> None:
        """Note the row's path as carried, when it is one of its repo's manifest paths."""
        repo = metadata.get(REPO_KEY)
        if not isinstance(repo, str):  # no repo (a list would not even be hashable)
            return
        seen = self._seen.get(repo)
        if seen is None:
            return
        path = metadata.get(PATH_KEY)
        if isinstance(path, str) and path in self._manifests[repo].path_set:
            seen.add(path)

    def missing(self) -> dict[str, tuple[str, ...]]:
        """Per repo missing any, its manifest paths no chunk carried (sorted)."""
        out = {}
        for slug, manifest in sorted(self._manifests.items()):
            missing = tuple(p for p in manifest.paths_after_push if p not in self._seen[slug])
            if missing:
                out[slug] = missing
        return out
