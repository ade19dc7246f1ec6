"""Tombstoning many tenants with shared bands: the same rule as `core.jobs.tombstoning`, with
one band's requests serving every tenant of a group.

A group is tenants of one stamp ceiling (one current version, one gap) whose deletable chunks
all fit under the delete cap, so no band needs a `limit` (the store's choice of rows under a
`limit` could not be held to a per-tenant cap). A band is `tenantId $in [...] AND
tenantConfigVersion <= ceiling AND after < ingestedAt <= through`: for each of its tenants
exactly the predicate of that tenant's own band, evaluated by the store at delete time. Per
band: one ids-only read of what it matches; those rows fetched whole a page at a time, split by
tenant, checked against the rule and appended to each tenant's own archive; every archive
touched made durable, by one `syncfs` through a handle opened before the band's first write
when there are many (per tenant, archive work is what a shared band costs most:
`core.stores.files.FilesystemFlush`), else by an fsync each; then one `delete(where=band)`.

Anything unusual ends the group's shared bands and raises `GroupBandsAbandoned`, before the
band's delete, so that the caller tombstones the group's tenants one by one with the careful
path (`core.jobs.tombstoning`): a fetched row the rule refuses (it changed since it matched, or
the store and the rule disagree). A delete that removes fewer rows than were archived (rows
re-stamped or re-written in between) is attributed per tenant by reading which archived ids
are gone. Memory: one page of whole rows plus the ids of one band.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

import structlog

from core.jobs.fencing import ensure_still_leads
from core.jobs.tombstoning import (
    ARCHIVE_READ_ROWS,
    TombstoneFailed,
    TombstoneJob,
    TombstoneProgress,
)
from core.rules.reconcile_groups import group_band_where, split_page
from core.rules.rows import ColumnPage
from core.rules.tombstone_bands import Band, Number, rows_refused
from core.stores.archives import TombstoneArchive, sync_archives
from core.stores.clock import now_ms
from core.stores.files import FilesystemFlush

if TYPE_CHECKING:
    from core.stores.chroma import VectorStore

log = structlog.get_logger(__name__)


class GroupBandsAbandoned(Exception):
    """The group's shared bands stopped before a delete; its tenants go one by one."""


async def tombstone_group(
    jobs: Mapping[str, TombstoneJob],
    bands: Sequence[Band],
    *,
    ceiling: Number,
    cap: int,
    progress: Mapping[str, TombstoneProgress],
    stopping: Callable[[], bool],
    beat: Callable[[], None],
) -> None:
    """Archive and delete the group's deletable chunks band by band (`bands`: planned by
    `plan_bands` over the sorted `ingestedAt` of all of them, every tenant's under `cap`,
    which no tenant's deletes may pass), until the bands run out or the daemon is stopping
    (checked between bands). `jobs` and `progress` are per tenant; every job is a
    config-stale job (`stale_clauses`) of one collection and the stamp `ceiling`."""
    for band in bands:
        if stopping():
            return
        await _group_band(jobs, band, progress, ceiling=ceiling, cap=cap)
        beat()


async def _group_band(jobs: Mapping[str, TombstoneJob], band: Band,
                      progress: Mapping[str, TombstoneProgress], *, ceiling: Number,
                      cap: int) -> None:
    first = next(iter(jobs.values()))
    vectors = first.vectors
    where = group_band_where(list(jobs), ceiling, band)
    matched = await vectors.ids_where(first.collection, where=where)
    if not matched:
        return
    # Opened before the band's first archive write: see FilesystemFlush.
    flush = await asyncio.to_thread(FilesystemFlush.open, first.tombstones_dir)
    try:
        archived = await _archive_band(jobs, matched, progress)
        if not archived:
            return
        if any(progress[t].tombstoned + len(ids) > cap for t, ids in archived.items()):
            raise GroupBandsAbandoned("a tenant's share of a shared band would pass the "
                                      "delete cap (chunks entered since the scan); nothing "
                                      "was deleted")
        # Nothing goes that is not on disk: every archive the band touched, in one call.
        await asyncio.to_thread(sync_archives, [
            archive for t in archived if (archive := progress[t].archive) is not None], flush)
    finally:
        flush.close()
    # Fencing hook (issue 27): a host that no longer leads deletes nothing.
    await ensure_still_leads(f"delete of a shared band of {len(archived)} tenants")
    try:
        deleted = await vectors.delete_where(first.collection, where=where)
    except Exception as exc:
        await _attribute_gone(vectors, first.collection, archived, progress)
        raise TombstoneFailed(f"delete of a shared band of {len(archived)} tenants failed: "
                              f"{exc}") from exc
    if deleted == sum(len(ids) for ids in archived.values()):
        for tenant_id, ids in archived.items():
            progress[tenant_id].tombstoned += len(ids)
            progress[tenant_id].bands_done += 1
    else:
        await _attribute_gone(vectors, first.collection, archived, progress)
    log.info("reconcile.tombstoned_shared_band", deleted=deleted, tenants=len(archived),
             archived=sum(len(ids) for ids in archived.values()))


async def _archive_band(jobs: Mapping[str, TombstoneJob], matched: list[str],
                        progress: Mapping[str, TombstoneProgress]) -> dict[str, list[str]]:
    """Fetch the band's matched rows whole, a page at a time, check each against its tenant's
    rule (any refusal abandons the shared bands) and append them to their tenants' archives;
    the archived ids per tenant."""
    first = next(iter(jobs.values()))
    archived: dict[str, list[str]] = {}
    for start in range(0, len(matched), ARCHIVE_READ_ROWS):
        page = await first.vectors.get_page(first.collection,
                                            ids=matched[start:start + ARCHIVE_READ_ROWS])
        split: dict[str, ColumnPage] = {}
        for tenant_id, rows in split_page(page).items():
            job = jobs.get(tenant_id) if tenant_id is not None else None
            if job is None or tenant_id is None or rows_refused(
                    rows, may_delete=job.may_delete, read_ms=job.read_ms):
                raise GroupBandsAbandoned(
                    f"a shared band's rows changed or disagree with the rule (tenant "
                    f"{tenant_id!r}); nothing of the band was deleted")
            split[tenant_id] = rows
        await asyncio.to_thread(_write_pages, jobs, split, progress, now_ms())
        for tenant_id, rows in split.items():
            archived.setdefault(tenant_id, []).extend(rows.ids)
    return archived


def _write_pages(jobs: Mapping[str, TombstoneJob], split: Mapping[str, ColumnPage],
                 progress: Mapping[str, TombstoneProgress], archived_at_ms: int) -> None:
    """(blocking, one thread call per page) Append each tenant's rows to its own archive,
    creating it with its first rows; durable only after `sync_archives`. One tenant after
    another: encoding the rows is Python work that threads would only take turns at, and a
    create-and-write is one open and one write (10,000 tenants' archives, one row each:
    ~0.2 s of system calls)."""
    for tenant_id, rows in split.items():
        job, done = jobs[tenant_id], progress[tenant_id]
        if done.archive is None:
            done.archive = TombstoneArchive.new_unsynced(
                job.tombstones_dir, collection=job.collection, tenant_id=tenant_id,
                pass_id=job.pass_id, now_ms=archived_at_ms, first_page=rows)
        else:
            done.archive.write_page(rows, archived_at_ms=archived_at_ms)
        done.archived += len(rows)


async def _attribute_gone(vectors: VectorStore, collection: str,
                          archived: Mapping[str, list[str]],
                          progress: Mapping[str, TombstoneProgress]) -> None:
    """Count, per tenant, the archived ids that no longer exist (none when that cannot be
    read: the telemetry must not claim deletions that may not have happened)."""
    try:
        live = {row.id for row in await vectors.get_by_ids(
            collection, [i for ids in archived.values() for i in ids], include=())}
    except Exception:
        log.warning("reconcile.delete_outcome_unknown", tenants=len(archived), exc_info=True)
        return
    for tenant_id, ids in archived.items():
        progress[tenant_id].tombstoned += sum(1 for i in ids if i not in live)
