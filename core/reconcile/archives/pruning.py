"""Pruning old archives (`archiveMaxAgeMs`), a step of the retention pass: the local files and
the shared copies older than the age by their header's `createdAt`, never a tenant's newest
(`rules.archives.listing.archives_to_prune`). 0, the default, keeps every archive.

Only an archive known to be whole is removed: each candidate is read through before it goes
(a shared copy fetched and checked against its head's SHA-256). One that cannot be read, has
no header (so no time or tenant), or has an unreadable line is kept and logged
(`gc.archive_kept`), never removed silently. A dry run names what it would prune and removes
nothing. Shared copies are removed only while this host still leads (the fencing check).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import structlog

from core.base.rules.camel_json import omitted_when_none
from core.base.rules.timestamps import iso_from_ms
from core.base.runtime.fencing import ensure_still_leads
from core.reconcile.rules.archives.listing import DatedArchive, archives_to_prune
from core.reconcile.stores.archives.files import ArchiveError
from core.reconcile.stores.archives.folder import (
    archive_contents,
    archive_paths,
    read_header,
    remove_archive,
)
from core.reconcile.stores.archives.shared import fetch, remove_shared, shared_heads

if TYPE_CHECKING:
    from core.base.config.config import Settings
    from core.base.state.graph_db import GraphDB

log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class PrunedArchives:
    """What pruning did in one place: local files (by path) or shared copies (by name)."""

    #: Older than the age and not a tenant's newest: what a dry run would prune.
    expired: tuple[str, ...] = ()
    pruned: tuple[str, ...] = ()
    #: Expired but kept: unreadable, with a problem, or not removable (each logged).
    kept: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class ArchivePruning:
    """What a retention pass did to the archives (`archives` in its figures)."""

    max_age_ms: int
    local: PrunedArchives
    #: The shared copies (omitted without `stateUrl`).
    shared: PrunedArchives | None = field(default=None, metadata=omitted_when_none())


def _kept(where: str, problem: str) -> None:
    log.warning("gc.archive_kept", archive=where, problem=problem,
                message="an archive older than archiveMaxAgeMs that cannot be read whole is "
                "kept: look at it (kb-reconcile archives) and remove it by hand if it is "
                "of no use")


def _dated_files(folder: Path) -> dict[str, tuple[Path, DatedArchive]]:
    """(blocking) Every archive file whose header can be read, by name. One without a header
    has no time or tenant, so it is never a candidate (`archives` lists it with its
    problem)."""
    dated = {}
    for path in archive_paths(folder):
        header, _problem = read_header(path)
        if header is not None:
            dated[path.name] = (path, DatedArchive(path.name, header.collection,
                                                   header.tenant_id, header.created_at_ms))
    return dated


def _prune_files(folder: Path, *, now: int, max_age_ms: int, dry_run: bool) -> PrunedArchives:
    """(blocking) The local half: read each candidate through, then remove it."""
    dated = _dated_files(folder)
    expired = archives_to_prune([d for _, d in dated.values()], now_ms=now,
                                max_age_ms=max_age_ms)
    pruned, kept = [], []
    for archive in expired:
        path = dated[archive.name][0]
        problem = archive_contents(path).problem
        if problem is not None:
            _kept(str(path), problem)
            kept.append(str(path))
            continue
        if not dry_run:
            try:
                remove_archive(path)
            except OSError as exc:
                _kept(str(path), f"cannot remove: {exc.strerror or exc}")
                kept.append(str(path))
                continue
            log.info("gc.archive_pruned", archive=str(path), tenant=archive.tenant_id,
                     createdAt=iso_from_ms(archive.created_at_ms))
        pruned.append(str(path))
    return PrunedArchives(tuple(str(dated[a.name][0]) for a in expired),
                          tuple(pruned) if not dry_run else (), tuple(kept))


async def _prune_shared(graph: GraphDB, *, now: int, max_age_ms: int,
                        dry_run: bool) -> PrunedArchives:
    """The shared half: fetch and read each candidate through, then remove the whole ones
    in one transaction, once the fence allows it."""
    heads = await shared_heads(graph)
    expired = archives_to_prune(
        [DatedArchive(h.name, h.collection, h.tenant_id, h.created_at_ms) for h in heads],
        now_ms=now, max_age_ms=max_age_ms)
    whole: list[DatedArchive] = []
    kept: list[str] = []
    for archive in expired:
        problem: str | None
        try:
            content = await fetch(graph, archive.name)
        except ArchiveError as exc:
            content, problem = b"", str(exc)
        else:
            if content is None:
                continue  # removed meanwhile
            problem = (await asyncio.to_thread(archive_contents, Path(archive.name),
                                               content=content)).problem
        if problem is not None:
            _kept(f"shared:{archive.name}", problem)
            kept.append(archive.name)
        else:
            whole.append(archive)
    if whole and not dry_run:
        await ensure_still_leads(f"prune of {len(whole)} shared archive(s)")
        await remove_shared(graph, [a.name for a in whole])
        for archive in whole:
            log.info("gc.archive_pruned", archive=f"shared:{archive.name}",
                     tenant=archive.tenant_id, createdAt=iso_from_ms(archive.created_at_ms))
    return PrunedArchives(tuple(a.name for a in expired),
                          tuple(a.name for a in whole) if not dry_run else (), tuple(kept))


async def prune_archives(settings: Settings, graph: GraphDB, *, now: int,
                         dry_run: bool) -> ArchivePruning | None:
    """Prune the local archives, then (with `stateUrl`) the shared copies; None when
    `archiveMaxAgeMs` is 0 (keep every archive). Raises when a store refuses or this host
    no longer leads (nothing more is removed)."""
    age = settings.gc.archive_max_age_ms
    if age <= 0:
        return None
    local = await asyncio.to_thread(_prune_files, settings.tombstones_dir, now=now,
                                    max_age_ms=age, dry_run=dry_run)
    shared = (await _prune_shared(graph, now=now, max_age_ms=age, dry_run=dry_run)
              if settings.state.url else None)
    done = (local, *((shared,) if shared is not None else ()))
    log.info("gc.archives", maxAgeMs=age, expired=sum(len(p.expired) for p in done),
             pruned=sum(len(p.pruned) for p in done), kept=sum(len(p.kept) for p in done),
             dryRun=dry_run)
    return ArchivePruning(age, local, shared)
