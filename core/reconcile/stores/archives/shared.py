"""Archives every host can read: a copy of each tombstone archive in the PostgreSQL state.

With `stateUrl` every host keeps its own `dataDir`, so an archive on host A is out of host B's
reach (and is lost with A's disk). The engine therefore copies each archive into the database
as it grows: once a band's archives are durable on disk and before the fencing check and the
delete, `SharedArchives.store` commits the bytes each gained since its last copy as its next
part, the band's archives in one transaction. When that fails, the band deletes nothing.

**Parts, not the whole file again**: re-sending a growing archive after each band would cost
the square of its size. The head row carries the size and SHA-256 of all its parts, updated
with each part and only from the part count this pass wrote last: a name another pass (or
host) took is refused, never appended to.

**Reading** (`fetch`, for `restore` on any host) is by the archive's file name; the parts must
be complete, in order, and match the head's size and SHA-256, or nothing is restored.

SQLite mode has none of this (`shared_archives()` gives None). The SQL is PostgreSQL's (schema
version 3).
"""

from __future__ import annotations

import asyncio
import hashlib
import socket
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final

import structlog

from core.base.io.clock import now_ms
from core.base.rules.errors import KbError
from core.base.state.state import open_graph
from core.reconcile.stores.archives.files import ArchiveError, SharedCopy, TombstoneArchive

if TYPE_CHECKING:
    from core.base.config.config import Settings
    from core.base.state.graph_db import GraphDB

log = structlog.get_logger(__name__)

#: Its presence says the database holds shared archives at all.
SHARED_ARCHIVE_TABLE: Final = "tombstone_archives"

# A new archive inserts its head; a known one advances it only from the part count this pass
# wrote last (else no row is returned, and the caller refuses the band).
_STORE_HEADS: Final = """
INSERT INTO tombstone_archives(name, tenant_id, collection, pass_id, host, path, created_at,
                               updated_at, parts, size, sha256)
SELECT u.name, u.tenant_id, u.collection, u.pass_id, u.host, u.path, u.stamp, u.stamp,
       u.parts, u.size, u.sha256
FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[],
            $7::bigint[], $8::bigint[], $9::bigint[], $10::text[])
     AS u(name, tenant_id, collection, pass_id, host, path, stamp, parts, size, sha256)
ON CONFLICT (name) DO UPDATE SET updated_at = excluded.updated_at, parts = excluded.parts,
    size = excluded.size, sha256 = excluded.sha256
WHERE tombstone_archives.parts = excluded.parts - 1
  AND tombstone_archives.pass_id = excluded.pass_id
  AND tombstone_archives.host = excluded.host
RETURNING name
"""
_STORE_PARTS: Final = """
INSERT INTO tombstone_archive_parts(name, part, content)
SELECT * FROM unnest($1::text[], $2::bigint[], $3::bytea[])
"""
_HEAD: Final = ("SELECT parts, size, sha256, host, path FROM tombstone_archives "
                "WHERE name = $1")
_HEADS: Final = ("SELECT name, tenant_id, collection, host, path, created_at, size "
                  "FROM tombstone_archives ORDER BY created_at, name")
_REMOVE_PARTS: Final = "DELETE FROM tombstone_archive_parts WHERE name = ANY($1::text[])"
_REMOVE_HEADS: Final = "DELETE FROM tombstone_archives WHERE name = ANY($1::text[])"
# Only the parts the head counts: a pass still adding to the archive cannot tear the read.
_PARTS: Final = ("SELECT part, content FROM tombstone_archive_parts WHERE name = $1 "
                 "AND part < $2 ORDER BY part")


class SharedCopyRefused(KbError):
    """The database holds another archive of this name (or its copy changed under this pass):
    the band is not deleted."""


@dataclass(frozen=True, slots=True)
class _NewPart:
    archive: TombstoneArchive
    content: bytes
    digest: hashlib._Hash


class SharedArchives:
    """One pass's copies of its archives in the shared state (see the module docstring)."""

    def __init__(self, graph: GraphDB, *, host: str | None = None) -> None:
        self._graph = graph
        self._host = host or socket.gethostname()

    async def store(self, archives: Sequence[TombstoneArchive]) -> None:
        """Commit what each archive gained since its last copy as its next part, in one
        transaction. Raises (StoreUnavailable, SharedCopyRefused) when the database refuses:
        the caller must then delete nothing."""
        parts = [part for part in await asyncio.to_thread(self._read_new_bytes, archives)
                 if part.content]
        if not parts:
            return
        stamp = now_ms()
        heads = [(part, part.archive.shared_copy or SharedCopy()) for part in parts]
        async with self._graph.write() as tx:
            stored = await tx.query(_STORE_HEADS, [
                [p.archive.path.name for p, _ in heads],
                [p.archive.header.tenant_id for p, _ in heads],
                [p.archive.header.collection for p, _ in heads],
                [p.archive.header.pass_id for p, _ in heads],
                [self._host] * len(heads),
                [str(p.archive.path) for p, _ in heads],
                [stamp] * len(heads),
                [c.parts + 1 for _, c in heads],
                [c.size + len(p.content) for p, c in heads],
                [p.digest.hexdigest() for p, _ in heads],
            ])
            taken = {p.archive.path.name for p, _ in heads} - {str(r[0]) for r in stored}
            if taken:
                raise SharedCopyRefused(
                    f"the shared state already holds another archive named "
                    f"{sorted(taken)[0]!r} (or its copy changed): this band is not deleted")
            await tx.execute(_STORE_PARTS, [
                [p.archive.path.name for p, _ in heads],
                [c.parts for _, c in heads],
                [p.content for p, _ in heads],
            ])
        for part, copied in heads:
            part.archive.shared_copy = SharedCopy(
                copied.parts + 1, copied.size + len(part.content), part.digest)
        log.info("tombstones.archives_shared", archives=len(parts),
                 bytes=sum(len(p.content) for p in parts))

    def _read_new_bytes(self, archives: Sequence[TombstoneArchive]) -> list[_NewPart]:
        """(blocking) Each archive's bytes past what is already copied, and the digest of the
        whole file through them."""
        parts = []
        for archive in archives:
            copied = archive.shared_copy or SharedCopy()
            with archive.path.open("rb") as handle:
                handle.seek(copied.size)
                content = handle.read()
            digest = copied.digest.copy()
            digest.update(content)
            parts.append(_NewPart(archive, content, digest))
        return parts


def shared_archives(settings: Settings, graph: GraphDB) -> SharedArchives | None:
    """The pass's shared copies when the state is shared (`stateUrl`), else None."""
    return SharedArchives(graph) if settings.state.url else None


@dataclass(frozen=True, slots=True)
class SharedHead:
    """A shared archive as its head row names it."""

    name: str
    tenant_id: str
    collection: str
    #: The host that wrote it, and its path there.
    host: str
    path: str
    created_at_ms: int
    size: int


async def shared_heads(graph: GraphDB) -> list[SharedHead]:
    """Every shared archive's head, oldest first ([] for a database without them)."""
    if SHARED_ARCHIVE_TABLE not in await graph.table_names():
        return []
    return [SharedHead(str(r[0]), str(r[1]), str(r[2]), str(r[3]), str(r[4]), int(r[5]),
                       int(r[6])) for r in await graph.query(_HEADS)]


async def remove_shared(graph: GraphDB, names: Sequence[str]) -> None:
    """Remove these shared archives, parts then heads, in one transaction."""
    async with graph.write() as tx:
        await tx.execute(_REMOVE_PARTS, [list(names)])
        await tx.execute(_REMOVE_HEADS, [list(names)])


async def fetch(graph: GraphDB, name: str) -> bytes | None:
    """The bytes of the shared archive named `name` (a file name), or None. Raises ArchiveError
    when its copy is incomplete or fails its checksum."""
    if SHARED_ARCHIVE_TABLE not in await graph.table_names():
        return None  # a database from before schema version 3: it holds no archive
    heads = await graph.query(_HEAD, [name])
    if not heads:
        return None
    count, size, expected, host, path = heads[0]
    rows = await graph.query(_PARTS, [name, count])
    where = f"the shared copy of {name!r} in {graph.location} (written by {host} as {path})"
    if [int(r[0]) for r in rows] != list(range(int(count))):
        raise ArchiveError(f"{where} is missing parts ({len(rows)} of {count}); "
                           "nothing restored")
    content = b"".join(bytes(r[1]) for r in rows)
    actual = hashlib.sha256(content).hexdigest()
    if len(content) != int(size) or actual != expected:
        raise ArchiveError(f"{where} fails its checksum ({len(content)} bytes, sha256 "
                           f"{actual}; recorded {size} bytes, {expected}); nothing restored")
    return content


async def shared_archive_content(settings: Settings, path: Path) -> bytes:
    """The shared copy named by `path`'s file name, for a `restore` of a path with no file
    here; ArchiveError when the state holds none."""
    graph = await open_graph(settings.state, read_only=True)
    try:
        content = await fetch(graph, path.name)
    finally:
        await graph.close()
    if content is None:
        raise ArchiveError(f"{path}: archive not found: no such file on this host, and no "
                           f"archive named {path.name!r} in the shared state {graph.location}")
    return content
