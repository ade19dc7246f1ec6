"""The loops of a pass. Every read of chunk metadata (a group's read, a sweep of the whole
collection) goes page by page through `read_pages`, which hands each page on and tells the
tick it is alive; every loop over units of work (tenants, groups, plans,
bands) goes through `until_stopping`, the one place a pass hears that the daemon is stopping.

Every read here is a read-only offset scan (`VectorStore.scan` / `metadata_pages`), so memory
is one page, whatever the number of tenants or chunks. Offset paging is only sound while
nobody deletes from the set being read: a pass reads before it deletes, and the deletion
engine reads what it deletes with one unpaged ids-only snapshot instead.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, TypeVar

from core.base.rules.rows import ChromaRow, ColumnPage
from core.reconcile.rules.reconcile_groups import TenantGroup, rows_by_tenant, sweep_page

if TYPE_CHECKING:
    from core.base.chroma import VectorStore
    from core.base.runtime.context import TickControl

Page = TypeVar("Page")
Unit = TypeVar("Unit")


def until_stopping(units: Iterable[Unit], control: TickControl) -> Iterator[Unit]:
    """Each unit of work in turn until the daemon is stopping: checked before each unit, never
    inside one, so a unit (a tenant, a group, a band) is done whole or not started. What is
    not started is left for the next pass, which starts over: nothing is lost."""
    for unit in units:
        if control.stopping:
            return
        yield unit


async def read_pages(pages: AsyncIterator[Page], on_page: Callable[[Page], None], *,
                     control: TickControl) -> None:
    """Hand every page to `on_page`, recording progress after each (a long read is alive).
    Never stops part-way: a read is one unit of work, and stopping is checked between units."""
    async for page in pages:
        on_page(page)
        control.progress()


async def scan_group(
    vectors: VectorStore, collection: str, group: TenantGroup,
    on_rows: Callable[[str, list[ChromaRow]], None], *, control: TickControl,
) -> None:
    """Read the group's chunks (`TenantGroup.read_where`: its candidates, or every chunk of a
    `whole` group's tenant), metadatas only, a page at a time, and hand each tenant's rows of a
    page to `on_rows(tenant_id, rows)` (a row of any other tenant is never handed on)."""
    members = set(group.tenant_ids)

    def split(page: list[ChromaRow]) -> None:
        for tenant_id, rows in rows_by_tenant(page).items():
            if tenant_id in members:
                on_rows(tenant_id, rows)

    await read_pages(vectors.scan(collection, where=group.read_where,
                                  include=("metadatas",)), split, control=control)


async def sweep_collection(
    vectors: VectorStore, collection: str, versions: Mapping[str, int],
    on_rows: Callable[[str, list[ChromaRow]], None], *, control: TickControl,
) -> Counter[str]:
    """Read the WHOLE collection once (no `where`), ids and metadatas, a page at a time; hand
    each tenant's candidate rows of a page (`sweep_page`: stamp below its version in
    `versions`) to `on_rows(tenant_id, rows)`, and return how many chunks each tenant has
    (every tenant of `versions`, 0 for one with none)."""
    counts: Counter[str] = Counter(dict.fromkeys(versions, 0))

    def split(page: ColumnPage) -> None:
        seen, candidates = sweep_page(page, versions)
        counts.update(seen)
        for tenant_id, rows in candidates.items():
            on_rows(tenant_id, rows)

    await read_pages(vectors.metadata_pages(collection), split, control=control)
    return counts
