"""The one deletion engine: archive exactly what a band's predicate matches, make the archives
durable, then let the store delete by that same predicate, so the store decides at delete time.
Every chunk deletion goes through `run_bands`; one tenant is a plan of one tenant.

The rule this module keeps: **every chunk that is deleted is in its tenant's archive with the
content it had when it was deleted, and a chunk written or re-stamped after the pass read it is
never deleted.**

How:

- **A plan** (`DeletionPlan`) is one reason to delete (config-stale, a repo's manifest
  orphans, ...) for one or more tenants: the `where` clauses every band shares (which tenants,
  which stamps or paths), the rule each fetched row must pass for its tenant, and the bands.
- **The predicate** of a band is the plan's clauses plus the band's own (`predicate_where`:
  `after < ingestedAt <= through`, and e.g. `sourcePath $in [...]`), sent as the `where` of one
  delete request and evaluated by Chroma when that request runs. A chunk re-stamped at the
  current version no longer matches. A chunk rewritten by a re-ingest carries a new
  `ingestedAt` (CONTRACT: epoch ms of its ingestion), later than `through`, which is always an
  `ingestedAt` the pass itself read and never later than the moment the pass started reading;
  so it no longer matches either, whatever stamp the writer gave it.
- **Held chunks.** An actionable chunk with no numeric `ingestedAt`, or one later than the
  pass's read, cannot match `$lte through` (a missing key, a string or a bool never matches a
  numeric comparison in Chroma). A legacy one (absent or an ISO string, actionable by
  version) goes in a **legacy band** instead (`legacy_bands`): the band names its ids, the
  delete request carries them with the staleness `where`, so a chunk re-stamped since the
  read no longer matches, and a string band adds `ingestedAt $in` the strings read, so one
  rewritten with a numeric `ingestedAt` no longer matches either; its rule refuses a fetched
  row that gained a number. The others are never deleted; the pass reports how many it
  held.
- **Per band**: one ids-only read of everything the band's `where` matches (a snapshot, never
  paged, so no row can slip between pages); those rows fetched whole by id, a page at a time,
  split by tenant, each checked against its tenant's rule (an actionable stamp or orphan, a
  numeric `ingestedAt` not after the pass's read) and appended to its tenant's own archive;
  every archive the band touched made durable (`sync_archives`: one `syncfs` through a handle
  opened before the band's first write when many, else an fsync each); then one
  `delete(where=band)`, whose reply says how many went.
- **The cap.** A plan of one tenant may end with a band holding more chunks than the cap leaves
  (equal `ingestedAt` values past the cap): it is archived whole and deleted with `limit`, so
  the store removes at most the cap's remainder, and whichever it picks is archived. A plan of
  many tenants never uses a `limit` (the store's choice under one could not be held to each
  tenant's cap): its tenants are each under the cap when planned, and a band in which a
  tenant's share would pass it (chunks entered since the scan) is refused.
- **What went** is attributed per tenant: from the delete's reply when the band held one
  tenant or the reply equals what was archived, else by reading which archived ids are gone
  (`_count_gone`), and never more than can be known (0 when that read fails).

**The failure policy (one, for every plan):** a fetched row its rule refuses has either changed
since the snapshot or shows that the store and the rule disagree. The band's `where` is read
again (up to BAND_VERIFY_ROUNDS times): rows that left the predicate cannot be deleted by it,
rows that entered it are archived too; if the store still matches a refused row, or the band
keeps changing, the band is **refused**: nothing of it is deleted, each of its tenants counts a
refused band, and the runner goes on with the next band. Any other error (a read, an archive
write or fsync, the delete request) ends the run and is raised, after counting what went; the
pass fails the tenant of a one-tenant plan, and runs each tenant of a failed many-tenant plan
as a plan of its own (so one tenant's broken part cannot fail the others); the next pass
starts over. Why this
one: it decides by the store at delete time like everything else here, a concurrent re-stamp
(the common case) costs one more ids-only read rather than the whole plan, and a real
disagreement costs one band, never a deletion outside the rule. (Before, shared bands
abandoned the whole group to the one-tenant path on any refusal: a second policy for the same
guarantee.)

How to add a deletion reason: write its pure parts in `core.rules` (the shared clauses, the
per-row rule, how its bands are cut, as `orphan_clauses` / `orphan_rule` / `orphan_bands` do),
build a `DeletionPlan` from them where the pass decides that reason applies, and hand it to
`run_bands`. Nothing else deletes: tests/test_structure.py checks that this is the only module
of `core.jobs` that calls the vector store's delete.

What no client can close: an upsert whose request overlaps a where-delete request in time can
still be lost inside a Chroma server (docs/performance.md, "Notes moved from the code", has the
race-test figures). What the predicate cannot see: a writer that rewrites a chunk's document but
keeps both its old stamp and its old `ingestedAt`, between the band's read and its delete; and a
chunk that enters a band in that window with an old stamp and an old `ingestedAt` (a restore of
another archive: it is then in that archive).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import structlog

from core.jobs.fencing import ensure_still_leads
from core.jobs.reconcile.page_loop import until_stopping
from core.rules.reconcile_groups import split_page
from core.rules.rows import ColumnPage
from core.rules.tombstone_bands import Band, predicate_where, rows_refused
from core.stores.archives import TombstoneArchive, sync_archives
from core.stores.clock import now_ms
from core.stores.files import FilesystemFlush

if TYPE_CHECKING:
    from core.jobs.context import TickControl
    from core.stores.chroma import VectorStore
    from core.stores.shared_archives import SharedArchives

log = structlog.get_logger(__name__)

#: Chunks per planned band: the rows of one delete request. Every request re-evaluates the
#: `where` over the whole tenant, so fewer, larger bands are faster; memory does not grow with
#: the band (rows are fetched ARCHIVE_READ_ROWS at a time). Smaller bands do not shrink the
#: store's race window (module docstring). Figures: docs/performance.md.
BAND_ROWS: Final = 5_000
#: Rows fetched whole (by id) per read for the archive: bounds the process's growth by the
#: store client's conversion buffers (docs/performance.md).
ARCHIVE_READ_ROWS: Final = 1_000
#: Re-reads of a band whose fetched rows a rule refused, before refusing it (a band still
#: changing after this many is left alone).
BAND_VERIFY_ROUNDS: Final = 3


@dataclass(frozen=True, slots=True)
class TenantRule:
    """What a fetched row of one tenant must pass to be deleted."""

    #: The rule's verdict on one fetched row's metadata (True: it may go).
    may_delete: Callable[[Mapping[str, Any]], bool]
    #: When the pass started reading this tenant (epoch ms): no band reaches past it.
    read_ms: int


@dataclass(frozen=True, slots=True)
class DeletionPlan:
    """One reason to delete, for one tenant or several: see the module docstring."""

    #: What the plan deletes, for its log lines (`stale`, `manifest-orphan`, ...).
    reason: str
    #: What every band's predicate shares (which tenants, and the reason's own clauses):
    #: `predicate_where` adds the band's own.
    clauses: tuple[Mapping[str, Any], ...]
    #: Per tenant of the plan: the rule a fetched row must pass. A matched row of any other
    #: tenant is refused.
    rules: Mapping[str, TenantRule]
    #: Planned by `plan_bands` (or a reason's own cutter) over sorted `ingestedAt` values.
    bands: Sequence[Band]


@dataclass(frozen=True, slots=True)
class DeletionTarget:
    """Where a pass deletes from and archives to; fixed for the whole pass."""

    vectors: VectorStore
    collection: str
    tombstones_dir: Path
    pass_id: str
    #: With the state shared (`stateUrl`): where each band's archives are copied before its
    #: delete, so that any host can restore them (`core.stores.shared_archives`); None on
    #: SQLite, where the files are all there is.
    shared: SharedArchives | None = None


@dataclass(slots=True)
class TombstoneProgress:
    """What has gone so far for one tenant (kept up to date, so a failure part-way reports the
    truth); shared by every plan of the tenant in a pass, so the cap counts them all."""

    tombstoned: int = 0
    archived: int = 0
    bands_done: int = 0
    bands_refused: int = 0
    archive: TombstoneArchive | None = None


class BandRefused(Exception):
    """A band the pass will not delete (the store and the rule disagree, it kept changing
    while it was read, or it would pass a tenant's cap); nothing of it was deleted."""


class TombstoneFailed(Exception):
    """A delete request failed; the progress already holds what actually went."""


async def run_bands(
    target: DeletionTarget,
    plan: DeletionPlan,
    *,
    cap: int,
    progress: Mapping[str, TombstoneProgress],
    control: TickControl,
) -> None:
    """Archive and delete the plan's bands one after another until every tenant of the plan
    reached the cap (`progress` may carry deletions of an earlier plan of the same tenants),
    the bands run out or the daemon is stopping (checked between bands, never inside one).
    A refused band is logged and counted, and the run goes on; any other error is raised."""
    for band in until_stopping(plan.bands, control):
        if all(progress[t].tombstoned >= cap for t in plan.rules):
            return
        try:
            await _run_band(target, plan, band, cap=cap, progress=progress)
        except BandRefused as exc:
            for tenant_id in plan.rules:
                progress[tenant_id].bands_refused += 1
            log.error("reconcile.band_refused", reason=plan.reason, after=band.after,
                      through=band.through, tenants=len(plan.rules), error=str(exc),
                      message="nothing of this band was deleted")
        control.progress()


async def _run_band(target: DeletionTarget, plan: DeletionPlan, band: Band, *, cap: int,
                    progress: Mapping[str, TombstoneProgress]) -> None:
    where = predicate_where(plan.clauses, band)
    ids = band.ids or None
    matched = await target.vectors.ids_where(target.collection, where=where, ids=ids)
    if not matched:
        return
    # Opened before the band's first archive write: see FilesystemFlush.
    flush = await asyncio.to_thread(FilesystemFlush.open, target.tombstones_dir)
    try:
        archived: dict[str, list[str]] = {}
        refused = await _archive_rows(target, plan, band, matched, archived, progress)
        if refused:
            await _settle_refused_rows(target, plan, band, where, refused, archived, progress)
        if not archived:
            return
        limit = _band_limit(plan, archived, progress, cap)
        touched = [archive for t in archived if (archive := progress[t].archive) is not None]
        # Nothing goes that is not on disk: every archive the band touched, in one call.
        await asyncio.to_thread(sync_archives, touched, flush)
    finally:
        flush.close()
    if target.shared is not None:
        # Nor, with the state shared, what is not in the database: committed (or raised, and
        # nothing of the band deleted) before the fencing check and the delete.
        await target.shared.store(touched)
    await _delete_band(target, where, archived, progress, limit=limit, ids=ids)


def _band_limit(plan: DeletionPlan, archived: Mapping[str, list[str]],
                progress: Mapping[str, TombstoneProgress], cap: int) -> int | None:
    """The band's delete `limit`: the cap's remainder when a one-tenant plan archived more
    than it, else none; BandRefused when a tenant of a many-tenant plan would pass the cap."""
    over = [t for t, ids in archived.items() if progress[t].tombstoned + len(ids) > cap]
    if not over:
        return None
    if len(plan.rules) == 1:
        return cap - progress[over[0]].tombstoned
    raise BandRefused(f"tenant {over[0]!r}'s share of the band would pass the delete cap "
                      "(chunks entered since the scan)")


async def _delete_band(target: DeletionTarget, where: dict[str, Any],
                       archived: Mapping[str, list[str]],
                       progress: Mapping[str, TombstoneProgress], *, limit: int | None,
                       ids: Sequence[str] | None = None) -> None:
    """The band's one delete request, and what went attributed to each tenant."""
    total = sum(len(ids) for ids in archived.values())
    # A host that no longer leads (state on PostgreSQL: `core.jobs.fencing`) deletes nothing;
    # the check is the last step before the request, after the archives are on disk.
    await ensure_still_leads(f"delete of a band of {total} chunks of {len(archived)} tenant(s)")
    try:
        deleted = await target.vectors.delete_where(target.collection, where=where, limit=limit,
                                                    ids=ids)
    except Exception as exc:
        gone = await _count_gone(target, archived, progress)
        raise TombstoneFailed(
            f"delete of a band of {total} chunks failed ({gone} went): {exc}") from exc
    if len(archived) == 1:
        [tenant_id] = archived
        progress[tenant_id].tombstoned += deleted
    elif deleted == total:
        for tenant_id, ids in archived.items():
            progress[tenant_id].tombstoned += len(ids)
    else:
        await _count_gone(target, archived, progress)
    for tenant_id in archived:
        progress[tenant_id].bands_done += 1
    log.info("reconcile.tombstoned_band", deleted=deleted, archived=total, limit=limit,
             tenants=len(archived))


async def _archive_rows(target: DeletionTarget, plan: DeletionPlan, band: Band,
                        ids: Sequence[str],
                        archived: dict[str, list[str]],
                        progress: Mapping[str, TombstoneProgress]) -> list[str]:
    """Fetch these rows whole, ARCHIVE_READ_ROWS at a time, and append every one its tenant's
    rule allows to that tenant's archive (`archived` gains their ids); returns the ids the
    rules refused (changed since they matched, or the store and the rule disagree: the caller
    finds out which)."""
    refused: list[str] = []
    for start in range(0, len(ids), ARCHIVE_READ_ROWS):
        page = await target.vectors.get_page(target.collection,
                                             ids=ids[start:start + ARCHIVE_READ_ROWS])
        allowed: dict[str, ColumnPage] = {}
        for tenant_id, rows in split_page(page).items():
            rule = plan.rules.get(tenant_id) if tenant_id is not None else None
            if tenant_id is None or rule is None:
                refused.extend(rows.ids)
                continue
            bad = rows_refused(rows, may_delete=rule.may_delete, read_ms=rule.read_ms,
                               by_id=bool(band.ids))
            refused.extend(bad)
            kept = _only(rows, set(rows.ids) - set(bad))
            if len(kept):
                allowed[tenant_id] = kept
        if allowed:
            await asyncio.to_thread(_write_pages, target, allowed, progress, now_ms())
            for tenant_id, rows in allowed.items():
                archived.setdefault(tenant_id, []).extend(rows.ids)
    return refused


async def _settle_refused_rows(
    target: DeletionTarget, plan: DeletionPlan, band: Band, where: dict[str, Any],
    refused: list[str],
    archived: dict[str, list[str]], progress: Mapping[str, TombstoneProgress],
) -> None:
    """Some rows the band's `where` matched failed their rule when fetched. If the store still
    matches any of them, the store and the rule disagree (or the row keeps changing), and the
    band must not go (BandRefused). Rows that entered the band meanwhile are archived too, so
    that the delete cannot take a row the archives lack."""
    for _round in range(BAND_VERIFY_ROUNDS):
        now = await target.vectors.ids_where(target.collection, where=where,
                                             ids=band.ids or None)
        still = set(now) & set(refused)
        if still:
            raise BandRefused(f"the store matches {len(still)} chunks the rule would keep "
                              f"(first {sorted(still)[0]!r}) for the band's predicate")
        log.info("reconcile.band_rows_changed", reason=plan.reason, changed=len(refused),
                 message="rows the band matched changed before they were fetched; the "
                 "predicate no longer matches them, so its delete cannot take them")
        done = {i for ids in archived.values() for i in ids}
        entered = [i for i in now if i not in done]
        if not entered:
            return
        refused = await _archive_rows(target, plan, band, entered, archived, progress)
    raise BandRefused(f"the band kept changing while it was read ({BAND_VERIFY_ROUNDS} rounds)")


def _only(page: ColumnPage, keep: set[str]) -> ColumnPage:
    """The rows of `page` whose ids are in `keep`."""
    if len(keep) == len(page):
        return page
    index = [i for i, row_id in enumerate(page.ids) if row_id in keep]
    embeddings = page.embeddings[index] if page.embeddings is not None and index else None
    return ColumnPage([page.ids[i] for i in index], [page.metadatas[i] for i in index],
                      [page.documents[i] for i in index], embeddings)


def _write_pages(target: DeletionTarget, pages: Mapping[str, ColumnPage],
                 progress: Mapping[str, TombstoneProgress], archived_at_ms: int) -> None:
    """(blocking, one thread call per fetched page) Append each tenant's rows to its own
    archive, creating it with its first rows; durable only after `sync_archives`. One tenant
    after another: encoding the rows is Python work that threads would only take turns at."""
    for tenant_id, rows in pages.items():
        done = progress[tenant_id]
        if done.archive is None:
            done.archive = TombstoneArchive.new_unsynced(
                target.tombstones_dir, collection=target.collection, tenant_id=tenant_id,
                pass_id=target.pass_id, now_ms=archived_at_ms, first_page=rows)
            log.info("tombstones.archive_created", path=str(done.archive.path))
        else:
            done.archive.write_page(rows, archived_at_ms=archived_at_ms)
        done.archived += len(rows)


async def _count_gone(target: DeletionTarget, archived: Mapping[str, list[str]],
                      progress: Mapping[str, TombstoneProgress]) -> int:
    """Count, per tenant, the archived ids that no longer exist, and return the total (none
    when that cannot be read: the telemetry must not claim deletions that may not have
    happened)."""
    try:
        live = {row.id for row in await target.vectors.get_by_ids(
            target.collection, [i for ids in archived.values() for i in ids], include=())}
    except Exception:
        log.warning("reconcile.delete_outcome_unknown", tenants=len(archived), exc_info=True)
        return 0
    total = 0
    for tenant_id, ids in archived.items():
        gone = sum(1 for i in ids if i not in live)
        progress[tenant_id].tombstoned += gone
        total += gone
    return total
