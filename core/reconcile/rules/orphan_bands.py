"""How a repo's manifest orphans are deleted (pure): bands of the chosen orphans' ids, each
narrowed to its own chunks' paths, the clauses every band of a repo shares, and the rule a
fetched row must pass before it goes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

from core.reconcile.rules.manifests import (
    INGESTED_KEY,
    PATH_KEY,
    REPO_KEY,
    RepoManifest,
    manifest_orphan,
)
from core.reconcile.rules.reconcile import TENANT_KEY
from core.reconcile.rules.tombstone_bands import Band, Number, OldestKeys, id_bands

#: The most chunks (so `sourcePath` values) one orphan band carries: it keeps a band's `$in`
#: under Chroma's limit (`reconcile_groups.TENANTS_PER_WHERE`) if BAND_ROWS grows.
PATHS_PER_BAND: Final = 5_000


class OldestOrphans(OldestKeys):
    """The (`ingestedAt`, id, `sourcePath`) of one repo's oldest `capacity` deletable orphans."""

    def offer(self, ingested_at: Number, path: str, row_id: str = "") -> None:
        """Keep the chunk if it is among the oldest `capacity` seen."""
        self.offer_key((ingested_at, row_id, path))

    def sorted(self) -> list[tuple[Number, str]]:
        """The kept (`ingestedAt`, `sourcePath`) pairs, oldest first."""
        return [(key[0], key[2]) for key in self.kept()]


def orphan_bands(chunks: Sequence[tuple[Number, str, str]], *, band_rows: int) -> list[Band]:
    """Bands over chosen orphans in deletion order (`id_bands`), each narrowed to its chunks'
    paths, so a chunk moved to another path since the read no longer matches."""
    def paths(part: Sequence[tuple[Number, str]]) -> tuple[dict[str, Any], ...]:
        names = sorted({path_of[row_id] for _, row_id in part})
        return ({PATH_KEY: {"$in": names}},)

    path_of = {row_id: path for _, row_id, path in chunks}
    return id_bands([(value, row_id) for value, row_id, _ in chunks],
                    band_rows=min(band_rows, PATHS_PER_BAND), extra=paths)


def orphan_rule(tenant_id: str, manifest: RepoManifest) -> Callable[[Mapping[str, Any]], bool]:
    """The manifest-orphan rule on one fetched row's metadata: this tenant's, this repo's, and
    an orphan of its manifest."""
    manifests = {manifest.repo_slug: manifest}
    return lambda m: (m.get(TENANT_KEY) == tenant_id and m.get(REPO_KEY) == manifest.repo_slug
                      and manifest_orphan("", m, manifests) is not None)


def orphan_clauses(tenant_id: str, manifest: RepoManifest) -> tuple[dict[str, Any], ...]:
    """What every orphan band of a repo shares: the tenant, the repo, and the manifest's
    authority (a chunk re-ingested after the manifest never matches)."""
    return ({TENANT_KEY: tenant_id}, {REPO_KEY: manifest.repo_slug},
            {INGESTED_KEY: {"$lte": manifest.updated_at}})
