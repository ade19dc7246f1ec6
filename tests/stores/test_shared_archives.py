"""Shared archives (`core.reconcile.stores.archives.shared`) on the session's real PostgreSQL: an
archive copied part by part reads back as exactly its file, a copy continues across the pass's
plans,
a name another pass holds is refused, and a damaged copy is refused rather than restored."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from core.base.config.config import Settings
from core.base.rules.rows import ColumnPage
from core.base.state.graph_db import GraphDB
from core.reconcile.stores.archives.files import ArchiveError, TombstoneArchive, sync_archives
from core.reconcile.stores.archives.shared import (
    SharedArchives,
    SharedCopyRefused,
    fetch,
    shared_archives,
)
from tests.support import embedding_for, make_settings

pytestmark = pytest.mark.parametrize("backend", ["postgres"], indirect=True)


def page(*ids: str) -> ColumnPage:
    return ColumnPage(list(ids), [{"tenantId": "acme", "ingestedAt": 1} for _ in ids],
                      [f"doc {i}" for i in ids],
                      np.array([embedding_for(i) for i in ids], dtype=np.float32))


def new_archive(folder: Path, *ids: str) -> TombstoneArchive:
    archive = TombstoneArchive.new_unsynced(folder, collection="kb", tenant_id="acme",
                                            pass_id="p1", now_ms=1_000, first_page=page(*ids))
    sync_archives([archive])
    return archive


async def parts_of(graph: GraphDB, name: str) -> list[int]:
    rows = await graph.query("SELECT part FROM tombstone_archive_parts WHERE name = $1 "
                             "ORDER BY part", [name])
    return [int(r[0]) for r in rows]


async def test_an_archive_growing_over_bands_reads_back_as_exactly_its_file(
    settings: Settings, graph: GraphDB, tmp_path: Path
) -> None:
    archive = new_archive(tmp_path / "tombstones", "a", "b")
    await SharedArchives(graph, host="a").store([archive])
    archive.write_page(page("c"), archived_at_ms=2_000)
    sync_archives([archive])
    # A later plan of the same pass has a target (and copier) of its own: it continues.
    await SharedArchives(graph, host="a").store([archive])
    await SharedArchives(graph, host="a").store([archive])  # nothing new: nothing stored

    assert await parts_of(graph, archive.path.name) == [0, 1]
    assert await fetch(graph, archive.path.name) == archive.path.read_bytes()
    assert await fetch(graph, "other.jsonl") is None


async def test_a_name_another_pass_holds_is_refused_and_its_copy_kept(
    settings: Settings, graph: GraphDB, tmp_path: Path
) -> None:
    theirs = new_archive(tmp_path / "a", "a")
    await SharedArchives(graph, host="a").store([theirs])
    ours = new_archive(tmp_path / "b", "x", "y")
    ours.path.rename(ours.path.with_name(theirs.path.name))
    ours.path = ours.path.with_name(theirs.path.name)

    with pytest.raises(SharedCopyRefused, match="already holds another archive"):
        await SharedArchives(graph, host="b").store([ours])
    assert await fetch(graph, theirs.path.name) == theirs.path.read_bytes()


async def test_a_copy_missing_a_part_or_changed_is_refused(
    settings: Settings, graph: GraphDB, tmp_path: Path
) -> None:
    archive = new_archive(tmp_path, "a")
    await SharedArchives(graph, host="a").store([archive])
    archive.write_page(page("b"), archived_at_ms=2_000)
    sync_archives([archive])
    await SharedArchives(graph, host="a").store([archive])
    name = archive.path.name

    async with graph.write() as tx:
        await tx.execute("UPDATE tombstone_archive_parts SET content = content || '\\x0a'::bytea "
                         "WHERE name = $1 AND part = 1", [name])
    with pytest.raises(ArchiveError, match="fails its checksum"):
        await fetch(graph, name)
    async with graph.write() as tx:
        await tx.execute("DELETE FROM tombstone_archive_parts WHERE name = $1 AND part = 0",
                         [name])
    with pytest.raises(ArchiveError, match=r"missing parts \(1 of 2\)"):
        await fetch(graph, name)


def test_a_sqlite_state_has_no_shared_copies(tmp_path: Path, graph: GraphDB) -> None:
    assert shared_archives(make_settings(tmp_path), graph) is None
