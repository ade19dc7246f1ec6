"""Tombstoning one tenant: archive exactly what a staleness predicate returns, then let the
store delete by that same predicate, so the store decides at delete time.

The rule this module keeps: **every chunk that is deleted is in an archive with the content it
had when it was deleted, and a chunk written or re-stamped after the pass read it is never
deleted.**

How:

- **The predicate** of a band (`core.rules.tombstone_bands`) is `tenantId = T AND
  tenantConfigVersion <= ceiling AND after < ingestedAt <= through`, sent as the `where` of
  one delete request and evaluated by Chroma when that request runs. A chunk re-stamped at the
  current version no longer matches. A chunk rewritten by a re-ingest carries a new
  `ingestedAt` (CONTRACT: epoch ms of its ingestion), later than `through`, which is always an
  `ingestedAt` the pass itself read and never later than the moment the pass started reading;
  so it no longer matches either, whatever stamp the writer gave it.
- **Held chunks.** An actionable chunk with no numeric `ingestedAt`, or one later than the
  pass's read, cannot match `$lte through` (checked on Chroma 1.5.9: a missing key, a string
  or a bool never matches a numeric comparison) and is never deleted: nothing would tell a
  rewrite of it from the archived content. The pass reports how many it held.
- **Bands** bound each delete request and the pass by the cap. The scan keeps the
  `ingestedAt` of the oldest `cap` actionable chunks (`OldestIngested`: memory bounded by the
  cap, not the tenant); `plan_bands` cuts them, sorted, into bands of about `BAND_ROWS`,
  never splitting equal values. The last band may hold more chunks than the cap leaves (equal
  values past the cap): it is archived whole and deleted with `limit`, so the store removes at
  most the cap's remainder, and whichever it picks is archived.
- **Per band**: one ids-only read of everything the band's `where` matches (a snapshot, never
  paged, so no row can slip between pages); those rows fetched whole by id, a page at a time,
  each checked against the rule (this tenant's, an actionable stamp, a numeric `ingestedAt`
  not after the pass's read) and appended to the archive, fsynced; then one
  `delete(where=band)`, whose reply says how many went. A fetched row the rule refuses has
  either changed since the snapshot or shows the store and the rule disagree: one more ids-only
  read tells which, and if the store still matches it nothing of the band goes.

What no client can close, measured on a Chroma 1.5.9 server (`chroma run`): an upsert whose
request overlaps a where-delete request in time can still be lost (3-5 of about 400
overlapping upserts in a direct measurement; our race test, re-ingesting the very chunks
being deleted, loses ~16 ids a pass; none embedded). Smaller bands did not lower that (see
BAND_ROWS). What the predicate cannot see: a writer that rewrites a chunk's document but
keeps both its old stamp and its old `ingestedAt`, between the band's read and its delete;
and a chunk that enters a band in that window with an old stamp and an old `ingestedAt` (a
restore of another archive: it is then in that archive).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import structlog

from core.jobs.fencing import ensure_still_leads
from core.rules.rows import ColumnPage
from core.rules.tombstone_bands import Band, predicate_where, rows_refused
from core.stores.archives import TombstoneArchive
from core.stores.clock import now_ms

if TYPE_CHECKING:
    from core.stores.chroma import VectorStore

log = structlog.get_logger(__name__)

#: Chunks per planned band: the rows of one delete request. Every request (the band's
#: ids-only read and its delete) re-evaluates the `where` over the whole tenant, ~0.2-0.3 s
#: at 100,000 chunks, so fewer, larger bands are faster: tombstoning 10,000 of 100,000 chunks
#: took 1.41-1.51x the delete-by-ids floor with bands of 5,000 against 1.68x with 2,000
#: (`make bench`, same machine). Memory does not grow with the band (rows are fetched
#: ARCHIVE_READ_ROWS at a time). Against a server, smaller bands do not shrink the store's
#: window (module docstring): in the race test (3 writers re-ingesting the stale chunks of a
#: 4,000-chunk pass) bands of 5,000 lost 8-23 ids per pass (mean 16, 6 runs), 2,000 0-16 (3
#: runs), 500 10-22 (mean 16, 9 runs), 250 6-10 and 100 9-13 (3 runs each), while the pass
#: took up to 3.3x as long: each request is shorter, but there are as many more of them.
BAND_ROWS: Final = 5_000
#: Rows fetched whole (by id) per read for the archive. A `get` of 2,500 whole rows of a
#: 100,000-chunk store grows the process by ~70 MB (Chroma's conversion buffers); by ids in
#: pages of 500 the same rows cost ~15 MB and the same 0.3 s (measured); 1,000 halves the
#: calls for a few MB more.
ARCHIVE_READ_ROWS: Final = 1_000
#: Re-reads of a band whose fetched rows the rule refused, before giving up on it (a band
#: still changing after this many is left alone).
BAND_VERIFY_ROUNDS: Final = 3

class BandRefused(Exception):
    """A band the pass will not delete (the store and the rule disagree, or it kept
    changing while it was read); nothing of it was deleted."""


@dataclass(frozen=True, slots=True)
class TombstoneJob:
    """Everything one tenant's tombstoning needs, fixed for the whole tenant."""

    vectors: VectorStore
    collection: str
    tenant_id: str
    #: What every band's predicate shares (the tenant, and an actionable stamp or the
    #: manifest's repo and authority window): `predicate_where` adds the band's own.
    clauses: tuple[Mapping[str, Any], ...]
    #: The rule's verdict on one fetched row's metadata (True: it may go).
    may_delete: Callable[[Mapping[str, Any]], bool]
    #: When the pass started reading this tenant (epoch ms): no band reaches past it.
    read_ms: int
    tombstones_dir: Path
    pass_id: str


@dataclass(slots=True)
class TombstoneProgress:
    """What has gone so far (kept up to date, so a failure part-way reports the truth)."""

    tombstoned: int = 0
    archived: int = 0
    bands_done: int = 0
    bands_refused: int = 0
    archive: TombstoneArchive | None = None


class TombstoneFailed(Exception):
    """A delete request failed; the progress already holds what actually went."""


async def tombstone_bands(
    job: TombstoneJob,
    bands: Sequence[Band],
    *,
    cap: int,
    progress: TombstoneProgress,
    stopping: Callable[[], bool],
    beat: Callable[[], None],
) -> None:
    """Archive and delete band after band (planned by `plan_bands` over the sorted
    `ingestedAt` of the oldest deletable chunks) until the cap is reached (`progress` may
    carry deletions of an earlier job of the same tenant), the bands run out or the daemon
    is stopping (checked between bands, never inside one)."""
    for band in bands:
        remaining = cap - progress.tombstoned
        if remaining <= 0 or stopping():
            return
        try:
            await _tombstone_band(job, band, remaining=remaining, progress=progress)
        except BandRefused as exc:
            progress.bands_refused += 1
            log.error("reconcile.band_refused", after=band.after, through=band.through,
                      reason=str(exc), message="nothing of this band was deleted")
        beat()


async def _tombstone_band(
    job: TombstoneJob, band: Band, *, remaining: int, progress: TombstoneProgress
) -> None:
    where = predicate_where(job.clauses, band)
    matched = await job.vectors.ids_where(job.collection, where=where)
    archived: set[str] = set()
    refused = await _archive_by_ids(job, matched, archived, progress)
    if refused:
        await _settle_refused_rows(job, where, refused, archived, progress)
    if not archived:
        return
    assert progress.archive is not None
    await progress.archive.sync()  # nothing goes that is not on disk
    limit = remaining if len(archived) > remaining else None
    # Fencing hook (issue 27): a host that no longer leads deletes nothing.
    await ensure_still_leads(f"delete of a band of {len(archived)} chunks")
    try:
        deleted = await job.vectors.delete_where(job.collection, where=where, limit=limit)
    except Exception as exc:
        gone = await _count_gone(job, archived)
        progress.tombstoned += gone
        raise TombstoneFailed(
            f"delete of a band of {len(archived)} chunks failed ({gone} went): {exc}"
        ) from exc
    progress.tombstoned += deleted
    progress.bands_done += 1
    log.info("reconcile.tombstoned_band", deleted=deleted, archived=len(archived),
             limit=limit, archive=str(progress.archive.path) if progress.archive else None)


async def _archive_by_ids(
    job: TombstoneJob, ids: Sequence[str], archived: set[str], progress: TombstoneProgress
) -> list[str]:
    """Fetch these rows whole, ARCHIVE_READ_ROWS at a time, and archive every one the rule
    allows; returns the ids the rule refused (changed since they matched, or the store and
    the rule disagree: the caller finds out which)."""
    refused: list[str] = []
    for start in range(0, len(ids), ARCHIVE_READ_ROWS):
        page = await job.vectors.get_page(job.collection,
                                          ids=ids[start:start + ARCHIVE_READ_ROWS])
        bad = rows_refused(page, may_delete=job.may_delete, read_ms=job.read_ms)
        keep = set(page.ids) - set(bad)
        await _archive(job, _only(page, keep), progress)
        archived.update(keep)
        refused.extend(bad)
    return refused


async def _settle_refused_rows(
    job: TombstoneJob, where: dict[str, Any], refused: list[str], archived: set[str],
    progress: TombstoneProgress,
) -> None:
    """Some rows the band's `where` matched failed the rule when fetched. If the store still
    matches any of them, the store and the rule disagree (or the row keeps changing), and
    the band must not go (BandRefused). Rows that entered the band meanwhile are archived
    too, so that the delete cannot take a row the archive lacks."""
    for _round in range(BAND_VERIFY_ROUNDS):
        now = await job.vectors.ids_where(job.collection, where=where)
        still = set(now) & set(refused)
        if still:
            raise BandRefused(f"the store matches {len(still)} chunks the rule would keep "
                              f"(first {sorted(still)[0]!r}) for the band's predicate")
        entered = [i for i in now if i not in archived]
        if not entered:
            return
        refused = await _archive_by_ids(job, entered, archived, progress)
    raise BandRefused(f"the band kept changing while it was read ({BAND_VERIFY_ROUNDS} rounds)")


def _only(page: ColumnPage, keep: set[str]) -> ColumnPage:
    """The rows of `page` whose ids are in `keep`."""
    if len(keep) == len(page):
        return page
    index = [i for i, row_id in enumerate(page.ids) if row_id in keep]
    embeddings = page.embeddings[index] if page.embeddings is not None and index else None
    return ColumnPage([page.ids[i] for i in index], [page.metadatas[i] for i in index],
                      [page.documents[i] for i in index], embeddings)


async def _archive(job: TombstoneJob, page: ColumnPage, progress: TombstoneProgress) -> None:
    """Append a page to the tenant's archive (created with its first row); the band's
    `sync` makes it durable before the band's delete."""
    if not len(page):
        return
    if progress.archive is None:
        progress.archive = await TombstoneArchive.create(
            job.tombstones_dir, collection=job.collection, tenant_id=job.tenant_id,
            pass_id=job.pass_id, now_ms=now_ms(),
        )
    await progress.archive.append(page, archived_at_ms=now_ms())
    progress.archived += len(page)


async def _count_gone(job: TombstoneJob, ids: set[str]) -> int:
    """How many archived ids no longer exist, after a failing delete (0 when that cannot be
    read: the telemetry must not claim deletions that may not have happened)."""
    try:
        still_there = await job.vectors.get_by_ids(job.collection, sorted(ids), include=())
    except Exception:
        log.warning("reconcile.delete_outcome_unknown", count=len(ids), exc_info=True)
        return 0
    return len(ids) - len(still_there)
