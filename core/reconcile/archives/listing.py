"""`reconcile archives`: every archive there is to restore from, with what it holds.

The local files under `<dataDir>/tombstones/` and, with `stateUrl`, the shared copies, each
read once and described by its own lines (`core.reconcile.rules.archives.listing`). Chroma is
never opened, and the state is opened read-only.

An archive that cannot be used is listed with its problem, never left out: with a TENANT, one
whose tenant cannot be read is listed too, since it may be that tenant's.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import TYPE_CHECKING

from core.base.state.state import open_graph
from core.reconcile.rules.archives.listing import (
    LOCAL,
    SHARED,
    ArchiveContents,
    ArchiveListing,
    ListedArchive,
)
from core.reconcile.stores.archives.files import ArchiveError
from core.reconcile.stores.archives.folder import archive_contents, archive_paths
from core.reconcile.stores.archives.shared import fetch, shared_heads

if TYPE_CHECKING:
    from core.base.config.config import Settings

def _local(folder: Path, tenant_id: str | None) -> list[ListedArchive]:
    """(blocking) The folder's archives, read one at a time."""
    listed = []
    for path in archive_paths(folder):
        contents = archive_contents(path)
        if tenant_id is not None and contents.tenant_id not in (tenant_id, None):
            continue
        try:
            size = path.stat().st_size
        except FileNotFoundError:
            continue  # pruned since the folder was read
        listed.append(ListedArchive.of(path.name, LOCAL, str(path), contents, size=size))
    return listed


async def _shared(settings: Settings, tenant_id: str | None) -> list[ListedArchive]:
    """The database's shared copies, each fetched (and checked) and read one at a time."""
    graph = await open_graph(settings.state, read_only=True)
    try:
        listed = []
        for head in await shared_heads(graph):
            if tenant_id is not None and head.tenant_id != tenant_id:
                continue
            try:
                content = await fetch(graph, head.name)
                contents = (await asyncio.to_thread(archive_contents, Path(head.path),
                                                    content=content)
                            if content is not None else
                            ArchiveContents(None, None, None, None, None,
                                            problem="removed while being listed"))
            except ArchiveError as exc:
                contents = ArchiveContents(None, head.collection, None, None, None,
                                           problem=str(exc))
            listed.append(ListedArchive.of(head.name, SHARED, head.path, contents,
                                           size=head.size, host=head.host,
                                           tenant_id=head.tenant_id))
        return listed
    finally:
        await graph.close()


async def list_archives(settings: Settings, tenant_id: str | None = None) -> ArchiveListing:
    """Every archive of `tenant_id` (every tenant's when None): the local files, then, with
    `stateUrl`, the shared copies; sorted by creation time (unknown first), name, where."""
    folder = settings.tombstones_dir
    listed = await asyncio.to_thread(_local, folder, tenant_id)
    if settings.state.url:
        listed += await _shared(settings, tenant_id)
    listed.sort(key=lambda a: (a.created_at is not None, a.created_at or 0, a.name,
                               a.where != LOCAL))
    return ArchiveListing(folder, tenant_id, bool(settings.state.url), tuple(listed))
