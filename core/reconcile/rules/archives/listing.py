"""What an archive holds, by its own lines (pure), and which archives the retention job may
prune.

- `read_contents`: one read of an archive's lines gives its identity, its chunk lines, and
  how many a restore could still put back: the distinct ids of the chunk lines that belong to
  the archive and that no later withdrawn line withdraws. The store is not asked: a restore
  would keep a live one live, not overwrite it.
- `ListedArchive`, `ArchiveListing`: what `reconcile archives` shows of each archive.
- `archives_to_prune`: the archives strictly older than the age, except the newest of each
  tenant (per collection), which always stays.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from core.base.rules.camel_json import omitted_when_none
from core.base.rules.timestamps import iso_from_ms
from core.reconcile.rules.archives.format import (
    ARCHIVE_FORMAT,
    FIRST_FORMAT,
    WITHDRAWN_MARK,
    json_object,
    parse_chunk,
    parse_header,
    refusal,
    unseal,
    withdrawn_ids,
)

NO_HEADER: Final = ("no readable archive header (a torn or edited header, or not a "
                    "tombstone archive)")
EMPTY: Final = "empty archive"


@dataclass(frozen=True, slots=True)
class ArchiveContents:
    """An archive as its lines describe it (identity None without a readable first line)."""

    format: int | None
    collection: str | None
    tenant_id: str | None
    pass_id: str | None
    #: None for a format-1 archive (it has none).
    created_at_ms: int | None
    #: Well-formed chunk lines.
    chunks: int = 0
    #: Distinct ids a restore could put back (module docstring).
    restorable: int = 0
    withdrawn: int = 0
    #: Well-formed chunk lines that do not belong to the archive.
    refused: int = 0
    unreadable: int = 0
    problem: str | None = None


@dataclass(slots=True)
class _Reading:
    format: int | None = None
    collection: str | None = None
    tenant_id: str | None = None
    pass_id: str | None = None
    created_at_ms: int | None = None
    chunks: int = 0
    refused: int = 0
    unreadable: int = 0
    first_unreadable: str | None = None

    def bad_line(self, number: int, reason: str) -> None:
        self.unreadable += 1
        if self.first_unreadable is None:
            self.first_unreadable = f"line {number}: {reason}"


def _first_line(reading: _Reading, raw: bytes) -> bool:
    """Learn the archive's identity from its first line; True when it was a header, False for
    a format-1 chunk line, ValueError when neither."""
    try:
        header = parse_header(unseal(raw))
    except ValueError:
        header = None
    if header is not None:
        reading.format, reading.collection, reading.tenant_id = (
            ARCHIVE_FORMAT, header.collection, header.tenant_id)
        reading.pass_id, reading.created_at_ms = header.pass_id, header.created_at_ms
        return True
    first = parse_chunk(json_object(raw), expected_format=FIRST_FORMAT)
    reading.format, reading.collection, reading.tenant_id = (
        FIRST_FORMAT, first.collection, first.tenant_id)
    return False


def read_contents(lines: Iterable[tuple[int, bytes]]) -> ArchiveContents:
    """An archive's contents from its non-blank lines (1-based number, bytes), read once."""
    reading = _Reading()
    belonging: list[tuple[int, str]] = []
    withdrawn_until: dict[str, int] = {}
    first = True
    for number, raw in lines:
        if first:
            first = False
            try:
                if _first_line(reading, raw):
                    continue
            except ValueError:
                return ArchiveContents(None, None, None, None, None, problem=NO_HEADER)
        assert reading.tenant_id is not None and reading.collection is not None
        try:
            if reading.format == ARCHIVE_FORMAT:
                record = unseal(raw)
                if WITHDRAWN_MARK in raw:
                    ids = withdrawn_ids(record, tenant_id=reading.tenant_id,
                                        pass_id=reading.pass_id)
                    for row_id in ids or ():
                        withdrawn_until[row_id] = number
                    if ids is not None:
                        continue
            else:
                record = json_object(raw)
            chunk = parse_chunk(record, expected_format=reading.format or ARCHIVE_FORMAT)
        except ValueError as exc:
            reading.bad_line(number, str(exc))
            continue
        reading.chunks += 1
        if refusal(chunk, collection=reading.collection, tenant_id=reading.tenant_id,
                   pass_id=reading.pass_id) is not None:
            reading.refused += 1
        else:
            belonging.append((number, chunk.row.id))
    if first:
        return ArchiveContents(None, None, None, None, None, problem=EMPTY)
    kept = [(n, i) for n, i in belonging if n >= withdrawn_until.get(i, 0)]
    problem = None
    if reading.unreadable:
        problem = (f"{reading.unreadable:,} unreadable "
                   f"{'line' if reading.unreadable == 1 else 'lines'} "
                   f"(first: {reading.first_unreadable})")
    return ArchiveContents(
        reading.format, reading.collection, reading.tenant_id, reading.pass_id,
        reading.created_at_ms, chunks=reading.chunks, restorable=len({i for _, i in kept}),
        withdrawn=len(belonging) - len(kept), refused=reading.refused,
        unreadable=reading.unreadable, problem=problem)


LOCAL = "local"
SHARED = "shared"


@dataclass(frozen=True, slots=True)
class ListedArchive:
    """One archive (a local file or a shared copy) and what its lines say."""

    name: str
    #: `local` (a file in this host's folder) or `shared` (a copy in the database).
    where: str
    #: For a shared copy, its path on the host that wrote it.
    path: str
    tenant_id: str | None
    collection: str | None
    created_at: int | None
    created_at_iso: str | None
    format: int | None
    chunks: int
    restorable: int
    withdrawn: int
    refused: int
    unreadable: int
    bytes: int
    host: str | None = field(default=None, metadata=omitted_when_none())
    problem: str | None = field(default=None, metadata=omitted_when_none())

    @classmethod
    def of(cls, name: str, where: str, path: str, contents: ArchiveContents, *, size: int,
           host: str | None = None, tenant_id: str | None = None) -> ListedArchive:
        """The listing's row of an archive (`tenant_id`: the shared head's, when the copy
        cannot be read)."""
        created = contents.created_at_ms
        return cls(name, where, path, contents.tenant_id or tenant_id, contents.collection,
                   created, iso_from_ms(created) if created is not None else None,
                   contents.format, contents.chunks, contents.restorable, contents.withdrawn,
                   contents.refused, contents.unreadable, size, host, contents.problem)


@dataclass(frozen=True, slots=True)
class ArchiveListing:
    """What `reconcile archives` prints (with `ok`)."""

    folder: Path
    #: None for every tenant.
    tenant_id: str | None
    #: Shared copies were looked for (the state is on PostgreSQL).
    shared: bool
    archives: tuple[ListedArchive, ...]


@dataclass(frozen=True, slots=True)
class DatedArchive:
    """An archive as pruning sees it: its name, whose it is and when it was created."""

    name: str
    collection: str
    tenant_id: str
    created_at_ms: int


def archives_to_prune(archives: Sequence[DatedArchive], *, now_ms: int,
                      max_age_ms: int) -> list[DatedArchive]:
    """The archives strictly older than `max_age_ms` at `now_ms`, oldest first, never a
    tenant's newest in a collection (ties: the greater name stays); none when `max_age_ms` <= 0."""
    if max_age_ms <= 0:
        return []
    newest: dict[tuple[str, str], DatedArchive] = {}
    for archive in archives:
        key = (archive.collection, archive.tenant_id)
        held = newest.get(key)
        if held is None or (archive.created_at_ms, archive.name) > (held.created_at_ms,
                                                                    held.name):
            newest[key] = archive
    kept = set(newest.values())
    old = [a for a in archives if a not in kept and now_ms - a.created_at_ms > max_age_ms]
    return sorted(old, key=lambda a: (a.created_at_ms, a.name))
