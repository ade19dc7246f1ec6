"""Does a new manifest name any chunk its repo has? (`tenants set-manifest`'s check before it
records one: `core.reconcile.rules.manifests.ManifestMatch` decides, this reads the chunks.)"""

from __future__ import annotations

from typing import TYPE_CHECKING

from core.base.chroma import CollectionMissing
from core.reconcile.rules.manifests import REPO_KEY, ManifestMatch
from core.reconcile.rules.reconcile import TENANT_KEY

if TYPE_CHECKING:
    from core.base.chroma import VectorStore


async def match_repo_chunks(
    vectors: VectorStore, collection: str, *, tenant_id: str, repo_slug: str,
    paths: frozenset[str],
) -> ManifestMatch:
    """The tenant's chunks of `repo_slug` against `paths`, read page by page (metadatas only)
    and stopped at the first chunk the manifest names (the answer cannot change after it). A
    collection that does not exist yet holds no chunk: nothing to match."""
    match = ManifestMatch(paths)
    where = {"$and": [{TENANT_KEY: tenant_id}, {REPO_KEY: repo_slug}]}
    try:
        # Stopping early leaves the page generator to asyncio's own clean-up of generators
        # (it holds no lock or handle: each page is one `get`).
        async for page in vectors.scan(collection, where=where, include=("metadatas",)):
            for row in page:
                match.observe(row.metadata)
            if match.matched:
                break
    except CollectionMissing:
        pass  # no knowledge-base collection yet: the repo has no chunk, nothing to match
    return match
