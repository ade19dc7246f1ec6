"""Restoring a tombstone archive, preserve-live: only absent ids come back, only into the
knowledge-base collection, only for the archive's own tenant, and never a chunk line a later
withdrawn line withdraws (archived but not deleted).

Lines are checked against the header (`core.reconcile.rules.archives.format.refusal`), then
against the store, a batch at a time. Absent ids are added back with Chroma `add`, which leaves
any id that exists untouched even if it appeared a moment after the check; an id live under the
archive's tenant is kept (`keptLive`); one under another tenant, or a line of another
collection, pass or tenant, is refused with its reason. A restore run twice changes nothing the
second time; a bad line never stops the others.

A batch's absent rows go in one `add` per embedding dimension. When the store refuses it for
its data while it still answers, the call is halved until each refused line stands alone,
refused with the store's own reason. Anything else is an outage: it propagates, and no line of
the failed call is counted restored or refused.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import structlog

from core.base.chroma import (
    CollectionMissing,
    VectorStore,
    VectorStoreError,
    refused_for_its_data,
)
from core.base.rules.camel_json import json_name, omitted_when_none
from core.base.rules.rows import ChromaRow
from core.base.rules.terminal_text import shown_text
from core.reconcile.rules.archives.format import (
    ARCHIVE_FORMAT,
    FIRST_FORMAT,
    FIRST_FORMAT_WARNING,
    TENANT_KEY,
    WITHDRAWN_MARK,
    ArchivedChunk,
    json_object,
    parse_chunk,
    parse_header,
    refusal,
    unseal,
    withdrawn_ids,
)
from core.reconcile.rules.restore_holds import release_command
from core.reconcile.stores.archives.files import ArchiveError, archive_line_batches

log = structlog.get_logger(__name__)


class HoldChunks(Protocol):
    """A restore's holds (`core.reconcile.stores.restore_holds.RestoreHoldWriter`)."""

    async def hold(self, tenant_id: str, ids: Sequence[str]) -> None:
        """Commit the holds of these chunks, before they are written back."""

    async def unhold(self, tenant_id: str, ids: Sequence[str]) -> None:
        """Drop the holds of these chunks again (the store refused them: not restored)."""


@dataclass(frozen=True, slots=True)
class LineProblem:
    """A line that was not applied, and why."""

    line_number: int = field(metadata=json_name("line"))
    reason: str
    chunk_id: str | None = field(default=None, metadata=json_name("id"))


@dataclass(frozen=True, slots=True)
class RestoreResult:
    """What a restore did, line by line counted."""

    path: Path
    collection: str
    tenant_id: str | None
    format: int | None
    restored: int = 0
    kept_live: int = 0
    #: Chunk lines a later withdrawn line withdraws: never put back.
    withdrawn: int = 0
    #: Well-formed lines that do not belong, or that the store refused.
    refused: tuple[LineProblem, ...] = ()
    #: Lines that could not be read (torn, edited, not an archive line).
    unreadable: tuple[LineProblem, ...] = ()
    warnings: tuple[str, ...] = ()
    #: `hold` was given (what the command does).
    held: bool = False

    @property
    def held_count(self) -> int:
        """The chunks this restore put back and holds."""
        return self.restored if self.held else 0

    @property
    def clean(self) -> bool:
        """Every line was either restored or kept live."""
        return not self.refused and not self.unreadable

    def figures(self) -> RestoreFigures:
        """The figures of `restore --json`."""
        return RestoreFigures(
            self.path, self.collection, self.tenant_id, self.format, self.restored,
            self.kept_live, len(self.refused), len(self.unreadable),
            tuple(sorted((*self.unreadable, *self.refused), key=lambda p: p.line_number)),
            self.warnings, self.withdrawn or None, self.held_count or None,
            release_command(self.tenant_id or "") if self.held_count else None)


@dataclass(frozen=True, slots=True)
class RestoreFigures:
    """What `reconcile restore --json` prints (with `ok`)."""

    archive: Path
    collection: str
    tenant_id: str | None
    format: int | None
    restored: int
    kept_live: int
    refused: int
    unreadable: int
    problems: tuple[LineProblem, ...]
    warnings: tuple[str, ...]
    #: These three written only when some; `held`: the chunks put back and held, `release`:
    #: the command that lifts the hold.
    withdrawn: int | None = field(default=None, metadata=omitted_when_none())
    held: int | None = field(default=None, metadata=omitted_when_none())
    release: str | None = field(default=None, metadata=omitted_when_none())


@dataclass(slots=True)
class _Restore:
    """A restore in progress: the archive's identity and the running counts."""

    collection: str
    format: int | None = None
    tenant_id: str | None = None
    pass_id: str | None = None
    restored: int = 0
    kept_live: int = 0
    withdrawn: int = 0
    #: (line number, record), read before the chunk lines.
    withdrawals: list[tuple[int, dict[str, Any]]] = field(default_factory=list)
    #: Per withdrawn id, the last line withdrawing it: chunk lines above it are skipped.
    withdrawn_until: dict[str, int] = field(default_factory=dict)
    refused: list[LineProblem] = field(default_factory=list)
    unreadable: list[LineProblem] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    hold: HoldChunks | None = None

    def read_first_line(self, path: Path, raw: bytes) -> bool:
        """Learn the archive's format from its first line; True when it was a header, False
        when it is a format-1 chunk line to restore."""
        try:
            header = parse_header(unseal(raw))
        except ValueError:
            header = None
        if header is not None:
            if header.collection != self.collection:
                raise ArchiveError(
                    f"{path}: an archive of collection {header.collection!r}, not of the "
                    f"knowledge-base collection {self.collection!r}; nothing restored")
            self.format, self.tenant_id, self.pass_id = (ARCHIVE_FORMAT, header.tenant_id,
                                                         header.pass_id)
            self.read_withdrawals()
            return True
        try:
            first = parse_chunk(json_object(raw), expected_format=FIRST_FORMAT)
        except ValueError:
            raise ArchiveError(
                f"{path}:1: no readable archive header (a torn or edited header, or not a "
                "tombstone archive); nothing restored") from None
        self.format, self.tenant_id = FIRST_FORMAT, first.tenant_id
        self.warnings.append(FIRST_FORMAT_WARNING)
        log.warning("tombstones.legacy_archive", path=str(path), message=FIRST_FORMAT_WARNING)
        return False

    def read_withdrawals(self) -> None:
        """Which chunk lines the archive's withdrawn lines withdraw (`withdrawn_until`); a
        malformed withdrawn line is unreadable."""
        assert self.tenant_id is not None
        for number, record in self.withdrawals:
            try:
                ids = withdrawn_ids(record, tenant_id=self.tenant_id, pass_id=self.pass_id)
            except ValueError as exc:
                self.unreadable.append(LineProblem(number, str(exc)))
                continue
            for row_id in ids or ():
                self.withdrawn_until[row_id] = max(number, self.withdrawn_until.get(row_id, 0))

    def parse(self, number: int, raw: bytes) -> ArchivedChunk | None:
        """A line that may be applied, or None (recorded as unreadable, refused or withdrawn)."""
        if self.withdrawals and number in {n for n, _ in self.withdrawals}:
            return None
        try:
            record = unseal(raw) if self.format == ARCHIVE_FORMAT else json_object(raw)
            chunk = parse_chunk(record, expected_format=self.format or ARCHIVE_FORMAT)
        except ValueError as exc:
            self.unreadable.append(LineProblem(number, str(exc)))
            return None
        assert self.tenant_id is not None
        reason = refusal(chunk, collection=self.collection, tenant_id=self.tenant_id,
                         pass_id=self.pass_id)
        if reason is not None:
            self.refused.append(LineProblem(number, reason, chunk.row.id))
            return None
        if number < self.withdrawn_until.get(chunk.row.id, 0):
            self.withdrawn += 1
            return None
        return chunk

    async def apply(self, vectors: VectorStore, batch: list[tuple[int, ArchivedChunk]]) -> None:
        """Classify a batch against the store, then add only the absent ids."""
        if not batch:
            return
        try:
            live = await vectors.get_by_ids(self.collection, [c.row.id for _, c in batch])
        except CollectionMissing:
            live = []
        owner = {row.id: row.metadata.get(TENANT_KEY) for row in live}
        to_add: dict[str, tuple[int, ChromaRow]] = {}
        for number, chunk in batch:
            row_id = chunk.row.id
            if row_id in owner and owner[row_id] != self.tenant_id:
                self.refused.append(LineProblem(
                    number, f"id lives under tenant {owner[row_id]!r} now", row_id))
            elif row_id in owner or row_id in to_add:
                # Live now (or restored by an earlier line of this archive): keep it as it is.
                self.kept_live += 1
            else:
                to_add[row_id] = (number, chunk.row)
        if not to_add:
            return
        if self.hold is not None and self.tenant_id is not None:
            # Held before they exist again: a pass that reads one finds its hold (race-safe).
            await self.hold.hold(self.tenant_id, list(to_add))
        refused_before = len(self.refused)
        # Created here, outside the isolation below, so that a store that cannot hold the
        # collection at all fails the restore instead of refusing every line.
        await vectors.ensure_collection(self.collection)
        by_dimension: dict[int, list[tuple[int, ChromaRow]]] = {}
        for number, row in to_add.values():
            by_dimension.setdefault(len(row.embedding or ()), []).append((number, row))
        # The largest group first: into a collection this restore creates, the first add
        # decides the dimension, and the archive's usual one should win.
        for lines in sorted(by_dimension.values(), key=len, reverse=True):
            await self.add_isolating_refusals(vectors, lines)
        refused = [p.chunk_id for p in self.refused[refused_before:]
                   if p.chunk_id is not None and p.chunk_id in to_add]
        if refused and self.hold is not None and self.tenant_id is not None:
            await self.hold.unhold(self.tenant_id, refused)

    async def add_isolating_refusals(self, vectors: VectorStore,
                                     lines: list[tuple[int, ChromaRow]]) -> None:
        """Add the rows in one call, halving it on the store's refusal (module docstring)."""
        try:
            await vectors.add(self.collection, [row for _, row in lines])
        except VectorStoreError as exc:
            if not refused_for_its_data(exc):
                raise
            if len(lines) > 1:
                middle = len(lines) // 2
                await self.add_isolating_refusals(vectors, lines[:middle])
                await self.add_isolating_refusals(vectors, lines[middle:])
                return
            # A refusal is claimed only while the store answers: a store failing as it went
            # down must not turn a good line into a refused one.
            await self.store_answers(vectors, exc)
            number, row = lines[0]
            self.refused.append(LineProblem(
                number, f"the store refused it: {store_reason(exc)}", row.id))
            log.warning("tombstones.restore_line_refused", line=number, id=shown_text(row.id),
                        reason=store_reason(exc))
            return
        self.restored += len(lines)

    async def store_answers(self, vectors: VectorStore, refusal_error: VectorStoreError) -> None:
        """Return when the collection answers a harmless call; raise its error otherwise."""
        try:
            await vectors.count(self.collection)
        except VectorStoreError as exc:
            raise exc from refusal_error

    def result(self, path: Path) -> RestoreResult:
        def in_file_order(problems: list[LineProblem]) -> tuple[LineProblem, ...]:
            return tuple(sorted(problems, key=lambda p: p.line_number))

        return RestoreResult(path, self.collection, self.tenant_id, self.format, self.restored,
                             self.kept_live, self.withdrawn, in_file_order(self.refused),
                             in_file_order(self.unreadable), tuple(self.warnings),
                             self.hold is not None)


def _withdrawals(path: Path, content: bytes | None) -> list[tuple[int, dict[str, Any]]]:
    """(blocking) The archive's sealed withdrawn lines, (line number, record)."""
    found: list[tuple[int, dict[str, Any]]] = []
    with archive_line_batches(path, content=content) as batches:
        for batch in batches:
            for number, raw in batch:
                if WITHDRAWN_MARK in raw:
                    try:
                        found.append((number, unseal(raw)))
                    except ValueError:
                        continue  # the restore's own read reports it
    return found


def store_reason(error: VectorStoreError) -> str:
    """The store's own words for refusing a row (without our prefix), escaped and cut."""
    cause = error.__cause__
    return shown_text(str(cause) if cause is not None else str(error))


async def restore_archive(
    vectors: VectorStore,
    path: Path,
    *,
    collection: str,
    stopping: Callable[[], bool] = lambda: False,
    content: bytes | None = None,
    hold: HoldChunks | None = None,
) -> RestoreResult:
    """Put back the archived chunks of `path` that are absent now (the module's rules).

    Raises ArchiveError when the file cannot be used at all, StoreUnavailable when the store
    fails. When `stopping()` turns true, returns after the batch in hand (run again, it finishes
    the rest). `content`: a shared archive's bytes, which `path` only names. With `hold`, each
    batch's chunks are held before they are written back (CONTRACT "Tombstones").
    """
    state = _Restore(collection, hold=hold)
    state.withdrawals = await asyncio.to_thread(_withdrawals, path, content)
    with archive_line_batches(path, content=content) as batches:
        first = True
        while not stopping() and (
                raw_batch := await asyncio.to_thread(next, batches, None)) is not None:
            chunks: list[tuple[int, ArchivedChunk]] = []
            for number, raw in raw_batch:
                if first:
                    first = False
                    if state.read_first_line(path, raw):
                        continue
                chunk = state.parse(number, raw)
                if chunk is not None:
                    chunks.append((number, chunk))
            await state.apply(vectors, chunks)
    if first and not stopping():
        raise ArchiveError(f"{path}: empty archive; nothing restored")
    result = state.result(path)
    log.info("tombstones.restored", path=str(path), restored=result.restored,
             keptLive=result.kept_live, refused=len(result.refused),
             unreadable=len(result.unreadable))
    return result


