"""The grouped reads of a reconciliation pass: one Chroma query serves a whole group of tenants
(`core.rules.reconcile_groups`), and each page is split back by tenant for the per-tenant
decisions (`core.jobs.reconcile`).

Both reads are read-only offset scans (`VectorStore.scan`), so memory is one page, whatever the
number of tenants or chunks.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from core.rules.reconcile_groups import (
    TenantGroup,
    group_candidate_where,
    rows_by_tenant,
    sweep_page,
)
from core.rules.rows import ChromaRow

if TYPE_CHECKING:
    from core.stores.chroma import VectorStore


async def scan_group(
    vectors: VectorStore, collection: str, group: TenantGroup,
    on_rows: Callable[[str, list[ChromaRow]], None], beat: Callable[[], None],
) -> None:
    """Read the group's candidate chunks (stamp below the group's version), metadatas only,
    a page at a time, and hand each tenant's rows of a page to `on_rows(tenant_id, rows)`."""
    await _by_tenant(vectors, collection, group_candidate_where(group), set(group.tenant_ids),
                     on_rows, beat)


async def sweep_collection(
    vectors: VectorStore, collection: str, versions: Mapping[str, int],
    on_rows: Callable[[str, list[ChromaRow]], None], beat: Callable[[], None],
) -> Counter[str]:
    """Read the WHOLE collection once (no `where`), ids and metadatas, a page at a time; hand
    each tenant's candidate rows of a page (`sweep_page`: stamp below its version in
    `versions`) to `on_rows(tenant_id, rows)`, and return how many chunks each tenant has
    (every tenant of `versions`, 0 for one with none)."""
    counts: Counter[str] = Counter(dict.fromkeys(versions, 0))
    async for page in vectors.metadata_pages(collection):
        seen, candidates = sweep_page(page, versions)
        counts.update(seen)
        for tenant_id, rows in candidates.items():
            on_rows(tenant_id, rows)
        beat()
    return counts


async def _by_tenant(
    vectors: VectorStore, collection: str, where: dict[str, Any], tenant_ids: set[str],
    on_rows: Callable[[str, list[ChromaRow]], None], beat: Callable[[], None],
) -> None:
    """Page through `where`'s rows and hand each page's rows of these tenants on, by tenant
    (a row of any other tenant is never handed on)."""
    async for page in vectors.scan(collection, where=where, include=("metadatas",)):
        for tenant_id, rows in rows_by_tenant(page).items():
            if tenant_id in tenant_ids:
                on_rows(tenant_id, rows)
        beat()
