"""How a repo's manifest orphans are deleted (pure): bands of the chosen orphans' ids, each
narrowed to its own chunks' paths, the clauses every band of a repo shares, and the rule a
fetched row must pass before it goes.

The tally (`core.reconcile.rules.tenant_scan`) keeps each repo's oldest orphans in `OldestOrphans`;
the
pass (`core.reconcile.deletion_plans`) turns them into bands here.
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

#: The most chunks (so ids, and `sourcePath` values) one orphan band carries. Chroma 1.5.9
#: takes 10,000 values in one `$in` and fails at 50,000 (measured in the reconcile-safety
#: issue); this bound keeps a band under it if BAND_ROWS grows.
PATHS_PER_BAND: Final = 5_000


class OldestOrphans(OldestKeys):
    """The (`ingestedAt`, id, `sourcePath`) of the oldest `capacity` deletable manifest
    orphans of one repo (`OldestKeys`: ties go to the smaller id)."""

    def offer(self, ingested_at: Number, path: str, row_id: str = "") -> None:
        """Keep the chunk if it is among the oldest `capacity` seen."""
        self.offer_key((ingested_at, row_id, path))

    def sorted(self) -> list[tuple[Number, str]]:
        """The kept (`ingestedAt`, `sourcePath`) pairs, oldest first."""
        return [(key[0], key[2]) for key in self.kept()]


def orphan_bands(chunks: Sequence[tuple[Number, str, str]], *, band_rows: int) -> list[Band]:
    """Bands over chosen orphans, (`ingestedAt`, id, `sourcePath`) in deletion order: each
    names its ids (`id_bands`) and is narrowed to its own chunks' paths (`sourcePath $in`),
    so a chunk moved to another path since the read no longer matches."""
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
    authority (`ingestedAt <= updatedAt`: a chunk re-ingested after the manifest never
    matches)."""
    return ({TENANT_KEY: tenant_id}, {REPO_KEY: manifest.repo_slug},
            {INGESTED_KEY: {"$lte": manifest.updated_at}})
