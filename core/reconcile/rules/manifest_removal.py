"""Undoing a stray manifest or yield snapshot (pure): `tenants remove-manifest` and
`remove-yield`.

Both live in the node `kb-manifest:<tenantId>`, `properties.manifests[<repoSlug>]` (a yield
snapshot under the entry's `extractionSnapshot`). A merge cannot remove a key on a neo.mjs
graph (the original's `upsertNode` keeps every key), so a removal computes the node's whole
`manifests` map without the repo's entry (or without the entry's snapshot) and the store
writes that map in place of the stored one. The other repos' entries, usable or not, are kept
as stored: they are another writer's to fix.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from core.reconcile.rules.generations.extraction_snapshot import SNAPSHOT_KEY
from core.reconcile.rules.manifests import MANIFESTS_PROPERTY


def stored_manifests(properties: Any) -> dict[str, Any]:
    """The node's `manifests` map as stored ({} when the node has none, or not an object)."""
    by_repo = properties.get(MANIFESTS_PROPERTY) if isinstance(properties, Mapping) else None
    return dict(by_repo) if isinstance(by_repo, Mapping) else {}


def without_manifest(properties: Any, repo_slug: str) -> dict[str, Any] | None:
    """The `manifests` map without the repo's entry; None when there is none to remove."""
    by_repo = stored_manifests(properties)
    if repo_slug not in by_repo:
        return None
    del by_repo[repo_slug]
    return by_repo


def without_snapshot(properties: Any, repo_slug: str) -> dict[str, Any] | None:
    """The `manifests` map with the repo's entry kept but its `extractionSnapshot` gone (its
    `pathsAfterPush` stays the authority on deletion); None when it has no snapshot."""
    by_repo = stored_manifests(properties)
    entry = by_repo.get(repo_slug)
    if not isinstance(entry, Mapping) or SNAPSHOT_KEY not in entry:
        return None
    by_repo[repo_slug] = {k: v for k, v in entry.items() if k != SNAPSHOT_KEY}
    return by_repo


def removable_repos(properties: Any, *, snapshot_only: bool) -> tuple[str, ...]:
    """The repos with an entry (or, `snapshot_only`, an entry with a snapshot) to remove."""
    return tuple(sorted(repo for repo, entry in stored_manifests(properties).items()
                        if not snapshot_only
                        or (isinstance(entry, Mapping) and SNAPSHOT_KEY in entry)))


@dataclass(frozen=True, slots=True)
class Removal:
    """What a removal did: whether it removed anything, and else which repos of the tenant
    had something to remove (for the "did you mean")."""

    removed: bool
    removable: tuple[str, ...] = ()
