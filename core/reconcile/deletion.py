"""The one deletion engine (`run_bands`): archive exactly the chosen chunks a band names, make
the archives durable, then delete only those whose content is still what was archived. One
tenant is a plan of one tenant.

Its guarantees: **the chunks a pass deletes are the ones its plan chose (what `explain`
marks); every chunk deleted is in its tenant's archive with the content it had when it was
deleted; a chunk rewritten or re-stamped after the pass read it is never deleted, and the
archive never claims a version that was not deleted.** How:

- **A plan** (`DeletionPlan`) takes its chunks from the one selection
  (`TenantTally.first_to_go`; retention's `select_expired` in a `gc` pass).
- **A band** names its ids (at most BAND_ROWS) and carries the plan's clauses and its own
  (`ingestedAt <=` the newest it read, a manifest band's paths): the store evaluates them at
  delete time, so a re-stamped or re-ingested chunk no longer matches. No request carries a
  `limit`: the store never chooses.
- **Per band**: the named rows fetched whole by id, each checked against its tenant's rule (one
  that fails it changed since the scan and stays) and appended to its tenant's archive with
  its content digest; every archive the band touched made durable (`sync_archives`) and copied
  to the shared state; the fencing check; then `VectorStore.delete_unchanged` deletes only the
  rows still identical to what was archived. The others stay and are **withdrawn** from the
  archive by a durable line (`TombstoneArchive.withdraw`), which restore honours. (Archiving
  only after the compare would leave a chunk deleted before it is on disk; withdrawing after
  the delete keeps "archived first".)
- **Restore holds**: right before the fencing check, the band's archived ids are checked
  against the holds a restore put (`RestoreHolds.withhold`); a held chunk stays and is
  withdrawn. A restore commits its holds before it writes the chunks, so a band that read a
  restored chunk always finds its hold.
- **Atomic against our own writers** on the embedded store: the compound runs as one call on
  the store's one thread (`core.base.door.chroma_door`), so nothing of ours writes between the
  re-read and the delete. On a Chroma server another process may write in that round trip
  (docs/reliability.md); a row the `where` then keeps is found and withdrawn too. A crash
  between the delete and the withdrawn line leaves the archive holding the old version of a
  row that stayed live (restore is preserve-live: it keeps the live one).
- **The cap** is the selection's: a band past a tenant's remainder is refused (a last check).
- **What went**: from the compound's answer; after a failed delete, the archived ids found gone
  (`_count_gone`, 0 when that read fails).

**The failure policy (one, for every plan):** a fetched row its rule refuses changed since the
scan and stays. In a range band (none is planned now) the `where` is read again (up to
BAND_VERIFY_ROUNDS times): rows that entered it are archived too; if the store still matches a
refused row, or the band keeps changing, the band is **refused** (nothing of it deleted, a
refused band per tenant) and the run goes on. Any other error ends the run, raised after
counting what went; the pass fails a one-tenant plan's tenant and runs each tenant of a failed
many-tenant plan alone (so one tenant's broken part cannot fail the others).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

import structlog

from core.base.io.clock import now_ms
from core.base.io.files import FilesystemFlush
from core.base.rules.rows import ColumnPage, content_digests
from core.base.runtime.fencing import ensure_still_leads
from core.reconcile.deletion_inputs import DeletionPlan as DeletionPlan
from core.reconcile.deletion_inputs import DeletionTarget as DeletionTarget
from core.reconcile.deletion_inputs import TenantRule as TenantRule
from core.reconcile.page_loop import until_stopping
from core.reconcile.rules.reconcile_groups import only_rows, split_page
from core.reconcile.rules.reconcile_outcome import TombstoneFigures
from core.reconcile.rules.tombstone_bands import Band, predicate_where, rows_refused
from core.reconcile.stores.archives.files import TombstoneArchive, sync_archives

if TYPE_CHECKING:
    from core.base.runtime.context import TickControl

log = structlog.get_logger(__name__)

#: Chunks per band, the rows of one delete request: each request re-evaluates the `where` over
#: the whole tenant, so fewer, larger bands are faster (docs/performance.md); memory does not
#: grow with the band, and a smaller one would not shrink the store's race window.
BAND_ROWS: Final = 5_000
#: Rows fetched whole per archive read: bounds the store client's conversion buffers.
ARCHIVE_READ_ROWS: Final = 1_000
#: Re-reads of a range band whose fetched rows a rule refused, before refusing it.
BAND_VERIFY_ROUNDS: Final = 3


@dataclass(slots=True)
class TombstoneProgress:
    """What has gone so far for one tenant (kept current, so a failure part-way reports the
    truth); shared by the tenant's plans in a pass, so the cap counts them all."""

    tombstoned: int = 0
    #: Rows the archive holds as deleted (not the withdrawn).
    archived: int = 0
    #: Rows archived but not deleted (rewritten since the read, or gone), withdrawn.
    withdrawn: int = 0
    bands_done: int = 0
    bands_refused: int = 0
    archive: TombstoneArchive | None = None
    #: Of `tombstoned`, the legacy chunks.
    legacy_tombstoned: int = 0

    def figures(self) -> TombstoneFigures:
        """What has gone so far, as the tenant's outcome reports it."""
        return TombstoneFigures(self.tombstoned, self.legacy_tombstoned, self.archived,
                                self.withdrawn, self.bands_refused,
                                str(self.archive.path) if self.archive else None)


class BandRefused(Exception):
    """A band the pass will not delete (the store and the rule disagree, it kept changing, or
    it would pass a cap); nothing of it was deleted."""


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
    """Archive and delete the plan's bands in turn until every tenant reached the cap, the
    bands run out or the daemon is stopping (checked between bands, never inside one)."""
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
    # A band of named ids is read by id alone (its rule checks each row): a `get` by ids and
    # `where` is orders of magnitude slower (docs/performance.md).
    matched = (list(band.ids) if band.ids
               else await target.vectors.ids_where(target.collection, where=where))
    if not matched:
        return
    # Opened before the band's first archive write: see FilesystemFlush.
    flush = await asyncio.to_thread(FilesystemFlush.open, target.tombstones_dir)
    try:
        archived: dict[str, list[str]] = {}
        digests: dict[str, str] = {}
        refused = await _archive_rows(target, plan, band, matched, archived, digests, progress)
        if refused and band.ids:
            # Named rows that fail their rule changed since the scan: they stay.
            log.info("reconcile.band_rows_changed", reason=plan.reason, changed=len(refused),
                     message="chosen chunks changed since the scan; they are not deleted")
        elif refused:
            await _settle_refused_rows(target, plan, band, where, refused, archived, digests,
                                       progress)
        if not archived:
            return
        _refuse_past_cap(archived, progress, cap)
        touched = [archive for t in archived if (archive := progress[t].archive) is not None]
        # Nothing goes that is not on disk: every archive the band touched, in one call.
        await asyncio.to_thread(sync_archives, touched, flush)
    finally:
        flush.close()
    if target.shared is not None:
        # Nor, with the state shared, what is not in the database: committed (or raised, and
        # nothing of the band deleted) before the fencing check and the delete.
        await target.shared.store(touched)
    # A restored chunk's hold commits before the chunk is written, so a band that archived
    # one finds its hold here: it stays, and is withdrawn like a rewritten one.
    deleting, held = (await target.holds.withhold(archived, plan.rules)
                      if target.holds is not None else (archived, set()))
    withdrawn = held | await _delete_band(target, where, deleting, digests, progress)
    if withdrawn:
        await _withdraw(target, archived, withdrawn, progress, touched)


def _refuse_past_cap(archived: Mapping[str, list[str]],
                     progress: Mapping[str, TombstoneProgress], cap: int) -> None:
    """BandRefused when a tenant's share would pass the cap: a last check, never a choice."""
    over = [t for t, ids in archived.items() if progress[t].tombstoned + len(ids) > cap]
    if over:
        raise BandRefused(f"tenant {over[0]!r}'s share of the band would pass the delete cap")


async def _delete_band(target: DeletionTarget, where: dict[str, Any],
                       archived: Mapping[str, list[str]], digests: Mapping[str, str],
                       progress: Mapping[str, TombstoneProgress]) -> set[str]:
    """The band's one compound delete, what went counted per tenant; returns the archived ids
    that did not go (to withdraw)."""
    ids = [i for tenant_ids in archived.values() for i in tenant_ids]
    if not ids:
        return set()
    # A host that no longer leads (state on PostgreSQL: `core.base.runtime.fencing`) deletes
    # nothing; the check is the last step before the request, after the archives are on disk.
    await ensure_still_leads(f"delete of a band of {len(ids)} chunks of {len(archived)} "
                             "tenant(s)")
    try:
        done = await target.vectors.delete_unchanged(
            target.collection, ids=ids, digests=[digests[i] for i in ids], where=where)
    except Exception as exc:
        gone = await _count_gone(target, archived, progress)
        raise TombstoneFailed(
            f"delete of a band of {len(ids)} chunks failed ({gone} went): {exc}") from exc
    kept = {*done.changed, *done.missing}
    if done.deleted != len(ids) - len(kept):
        # The store's `where` kept some identical rows (changed in the round trip to a
        # server): which ones is read, and they are withdrawn too.
        live = await target.vectors.get_by_ids(
            target.collection, [i for i in ids if i not in kept], include=())
        kept |= {row.id for row in live}
    for tenant_id, tenant_ids in archived.items():
        progress[tenant_id].tombstoned += sum(1 for i in tenant_ids if i not in kept)
        progress[tenant_id].bands_done += 1
    log.info("reconcile.tombstoned_band", deleted=done.deleted, archived=len(ids),
             tenants=len(archived))
    if kept:
        log.warning("reconcile.rewritten_kept", kept=len(kept), changed=len(done.changed),
                    missing=len(done.missing), first=sorted(kept)[0],
                    message="archived chunks rewritten (or gone) since they were read were "
                    "not deleted; their archive lines are withdrawn, restore skips them")
    return kept


async def _withdraw(target: DeletionTarget, archived: Mapping[str, list[str]],
                    withdrawn: set[str], progress: Mapping[str, TombstoneProgress],
                    touched: list[TombstoneArchive]) -> None:
    """Withdraw from each tenant's archive the ids archived but not deleted, durably."""
    at = now_ms()
    for tenant_id, tenant_ids in archived.items():
        mine = [i for i in tenant_ids if i in withdrawn]
        done = progress[tenant_id]
        if mine and done.archive is not None:
            await asyncio.to_thread(done.archive.withdraw, mine, withdrawn_at_ms=at)
            done.archived -= len(mine)
            done.withdrawn += len(mine)
    if target.shared is not None:
        await target.shared.store(touched)


async def _archive_rows(target: DeletionTarget, plan: DeletionPlan, band: Band,
                        ids: Sequence[str], archived: dict[str, list[str]],
                        digests: dict[str, str],
                        progress: Mapping[str, TombstoneProgress]) -> list[str]:
    """Fetch these rows whole and archive those their tenant's rule allows (`archived` and
    `digests` gain them); returns the ids the rules refused."""
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
                               by_id=band.legacy)
            refused.extend(bad)
            kept = only_rows(rows, set(rows.ids) - set(bad))
            if len(kept):
                allowed[tenant_id] = kept
        if allowed:
            await asyncio.to_thread(_write_pages, target, allowed, progress, now_ms())
            for tenant_id, rows in allowed.items():
                archived.setdefault(tenant_id, []).extend(rows.ids)
                digests.update(content_digests(rows))
    return refused


async def _settle_refused_rows(
    target: DeletionTarget, plan: DeletionPlan, band: Band, where: dict[str, Any],
    refused: list[str], archived: dict[str, list[str]], digests: dict[str, str],
    progress: Mapping[str, TombstoneProgress],
) -> None:
    """Re-read a range band whose fetched rows failed their rule: BandRefused if the store
    still matches one; rows that entered the band are archived too, so the delete cannot take
    a row the archives lack."""
    for _round in range(BAND_VERIFY_ROUNDS):
        now = await target.vectors.ids_where(target.collection, where=where)
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
        refused = await _archive_rows(target, plan, band, entered, archived, digests,
                                      progress)
    raise BandRefused(f"the band kept changing while it was read ({BAND_VERIFY_ROUNDS} rounds)")


def _write_pages(target: DeletionTarget, pages: Mapping[str, ColumnPage],
                 progress: Mapping[str, TombstoneProgress], archived_at_ms: int) -> None:
    """(blocking) Append each tenant's rows to its archive, created with its first rows;
    durable only after `sync_archives`. One tenant after another: threads would only take turns
    at encoding (the GIL)."""
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
    """Count per tenant the archived ids now gone; 0 when that cannot be read (the telemetry
    must not claim deletions that may not have happened)."""
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
