"""Nothing is deleted that is not on disk first, however the archives are made durable: one
fsync per file for a few archives, one `syncfs` of their filesystem for many (a pass over
thousands of tenants), one fsync per file again when `syncfs` cannot be used or fails. And a
disk that refuses a write or an fsync deletes nothing.

The faults are injected at the operating-system calls (a full disk and a failing fsync cannot
be had on demand); everything else is real: SQLite, embedded Chroma, the files."""

from __future__ import annotations

import errno
import os
import platform
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from core.base.chroma import VectorStore
from core.base.io import files
from core.base.rules.rows import ColumnPage
from core.base.runtime.context import TickContext
from core.base.state.graph_db import GraphDB
from core.reconcile.stores.archives import files as archives
from core.reconcile.stores.archives.files import (
    SYNCFS_MIN_ARCHIVES,
    TombstoneArchive,
    sync_archives,
)
from tests.jobs.test_reconcile_pass import (
    archived_rows,
    chunk,
    configure,
    ids_in,
    one_pass,
    tombstoning,
)
from tests.support import seed

#: Enough tenants that their archives are made durable by one `syncfs`.
MANY = SYNCFS_MIN_ARCHIVES + 6
#: Chunks per tenant; the first is stale (stamped two versions behind).
PER_TENANT = 4


def fd_path(fd: int) -> str:
    return os.readlink(f"/proc/self/fd/{fd}")


async def seed_tenants(stores: TickContext, vectors: VectorStore, count: int) -> set[str]:
    """`count` tenants at version 3, each with one actionable chunk; returns their ids."""
    rows = []
    for t in range(count):
        tenant = f"t-{t:03d}"
        await configure(stores.graph, tenant, 3)
        rows += [chunk(f"{tenant}-{i}", tenant, 1 if i == 0 else 3) for i in range(PER_TENANT)]
    await seed(vectors, stores.settings.chroma.knowledge_base_collection, rows)
    return {f"t-{t:03d}-0" for t in range(count)}


@pytest.fixture
def events(monkeypatch: pytest.MonkeyPatch, vectors: VectorStore) -> Iterator[list[str]]:
    """What happened, in order: `flush opened` for each filesystem handle opened, `archive
    write` for each write to an archive, `fsync <file name>` for each archive file fsynced,
    `syncfs` for each real syncfs, `delete` for each delete request."""
    seen: list[str] = []
    real_fsync, real_syncfs = os.fsync, files._syncfs()
    assert real_syncfs is not None, "this suite runs on Linux 5.8 or later"

    def fsync(fd: int) -> None:
        path = fd_path(fd)
        if path.endswith(".jsonl"):
            seen.append(f"fsync {Path(path).name}")
        real_fsync(fd)

    def syncfs(fd: int) -> int:
        seen.append("syncfs")
        return real_syncfs(fd)

    real_delete = vectors.delete_unchanged

    async def delete_unchanged(name: str, **kwargs: Any) -> Any:
        seen.append("delete")
        return await real_delete(name, **kwargs)

    real_write, real_open_flush = os.write, files.FilesystemFlush.open

    def write(fd: int, data: Any) -> int:
        if fd_path(fd).endswith(".jsonl"):
            seen.append("archive write")
        return real_write(fd, data)

    def open_flush(folder: Path) -> files.FilesystemFlush:
        seen.append("flush opened")
        return real_open_flush(folder)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "write", write)
    monkeypatch.setattr(files, "_syncfs", lambda: syncfs)
    monkeypatch.setattr(files.FilesystemFlush, "open", open_flush)
    vectors.delete_unchanged = delete_unchanged  # type: ignore[method-assign]
    yield seen


async def test_many_archives_are_made_durable_by_one_syncfs_before_any_delete(
    tmp_path: Path, graph: GraphDB, vectors: VectorStore, events: list[str],
) -> None:
    stores = tombstoning(tmp_path, graph, vectors)
    stale = await seed_tenants(stores, vectors, MANY)
    figures = await one_pass(stores)
    assert figures["failedTenants"] == 0
    assert stale.isdisjoint(await ids_in(vectors, stores.settings.chroma.knowledge_base_collection))
    assert len(figures["archives"]) == MANY
    assert {r.id for path in figures["archives"] for r in archived_rows(path)} == stale
    assert "syncfs" in events and "delete" in events
    # syncfs reports the write errors since its handle was opened: opened before any write.
    assert events.index("flush opened") < events.index("archive write")
    assert events.index("archive write") < events.index("syncfs") < events.index("delete")
    assert "archive write" not in events[events.index("syncfs"):]
    assert not [e for e in events if e.startswith("fsync")], "no file was fsynced on its own"


async def test_a_few_archives_are_fsynced_one_by_one_before_their_delete(
    tmp_path: Path, graph: GraphDB, vectors: VectorStore, events: list[str],
) -> None:
    stores = tombstoning(tmp_path, graph, vectors)
    await seed_tenants(stores, vectors, 3)
    figures = await one_pass(stores)
    assert figures["tombstonedCount"] == 3
    assert "syncfs" not in events
    synced = {e.removeprefix("fsync ") for e in events[:events.index("delete")]
              if e.startswith("fsync")}
    assert synced == {Path(p).name for p in figures["archives"]}


async def test_when_syncfs_fails_every_archive_is_fsynced_on_its_own_before_any_delete(
    tmp_path: Path, graph: GraphDB, vectors: VectorStore, events: list[str],
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    def refusing_syncfs(fd: int) -> int:
        events.append("syncfs refused")
        return -1

    monkeypatch.setattr(files, "_syncfs", lambda: refusing_syncfs)
    stores = tombstoning(tmp_path, graph, vectors)
    stale = await seed_tenants(stores, vectors, MANY)
    figures = await one_pass(stores)
    assert figures["failedTenants"] == 0
    assert stale.isdisjoint(await ids_in(vectors, stores.settings.chroma.knowledge_base_collection))
    first_delete = events.index("delete")
    synced = {e.removeprefix("fsync ") for e in events[:first_delete] if e.startswith("fsync")}
    assert synced == {Path(p).name for p in figures["archives"]}
    assert "files.syncfs_failed" in capsys.readouterr().err


async def test_a_failing_fsync_of_an_archive_deletes_nothing(
    tmp_path: Path, graph: GraphDB, vectors: VectorStore, monkeypatch: pytest.MonkeyPatch,
) -> None:
    real_fsync = os.fsync

    def failing_fsync(fd: int) -> None:
        if fd_path(fd).endswith(".jsonl"):
            raise OSError(errno.EIO, "Input/output error")
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", failing_fsync)
    monkeypatch.setattr(files, "_syncfs", lambda: None)  # as on a kernel before 5.8
    stores = tombstoning(tmp_path, graph, vectors)
    await seed_tenants(stores, vectors, MANY)
    collection = stores.settings.chroma.knowledge_base_collection
    before = await ids_in(vectors, collection)
    figures = await one_pass(stores)
    assert await ids_in(vectors, collection) == before
    assert figures["tombstonedCount"] == 0 and figures["failedTenants"] == MANY


@pytest.mark.parametrize("tenants", [3, MANY], ids=["one by one", "shared bands"])
async def test_a_full_disk_while_archiving_deletes_nothing_not_archived(
    tmp_path: Path, graph: GraphDB, vectors: VectorStore, monkeypatch: pytest.MonkeyPatch,
    tenants: int,
) -> None:
    # The disk fills after a few archive writes: every tenant whose chunk was deleted has it
    # whole in its archive, and every other stale chunk is still in the store.
    real_write = os.write
    writes = [0]

    def filling_write(fd: int, data: Any) -> int:
        if fd_path(fd).endswith(".jsonl"):
            writes[0] += 1
            if writes[0] > 2:
                raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", filling_write)
    stores = tombstoning(tmp_path, graph, vectors)
    stale = await seed_tenants(stores, vectors, tenants)
    collection = stores.settings.chroma.knowledge_base_collection
    figures = await one_pass(stores)
    gone = stale - await ids_in(vectors, collection)
    archived = {r.id for path in figures["archives"] for r in archived_rows(path)}
    assert gone <= archived
    assert figures["failedTenants"] >= tenants - 2 > 0


def one_row(embedding: list[float]) -> ColumnPage:
    return ColumnPage(ids=["c-1"], metadatas=[{"tenantId": "t", "ingestedAt": 1}],
                      documents=["doc"], embeddings=np.array([embedding]))


def test_an_archive_whose_first_rows_cannot_be_archived_leaves_no_file(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="NaN or infinity"):
        TombstoneArchive.new_unsynced(tmp_path, collection="kb", tenant_id="t", pass_id="p",
                                      now_ms=1, first_page=one_row([0.5, float("nan")]))
    assert list(tmp_path.iterdir()) == []


def test_archives_in_a_missing_folder_create_it_and_make_it_durable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    synced_folders: list[Path] = []

    def fsync_dir(path: Path) -> None:
        synced_folders.append(path)
        files.fsync_dir(path)

    monkeypatch.setattr(archives, "fsync_dir", fsync_dir)
    folder = tmp_path / "data" / "tombstones"
    made = [TombstoneArchive.new_unsynced(folder, collection="kb", tenant_id=f"t{i}",
                                          pass_id="p", now_ms=1, first_page=one_row([0.5]))
            for i in range(2)]
    assert [a.created_directory for a in made] == [True, False]
    sync_archives(made)
    assert synced_folders == [folder, folder.parent]
    assert all(a.durable and a.rows_synced == a.rows_written == 1 for a in made)


@pytest.mark.parametrize(("system", "release", "usable"), [
    ("Linux", "6.18.44-fc", True), ("Linux", "5.8.0", True), ("Linux", "5.7.19", False),
    ("Linux", "4.19.0-25-amd64", False), ("Darwin", "23.1.0", False), ("Linux", "weird", False),
])
def test_syncfs_is_used_only_where_it_reports_write_back_errors(
    monkeypatch: pytest.MonkeyPatch, system: str, release: str, usable: bool,
) -> None:
    monkeypatch.setattr(platform, "system", lambda: system)
    monkeypatch.setattr(platform, "release", lambda: release)
    files._syncfs.cache_clear()
    try:
        assert (files._syncfs() is not None) is usable
    finally:
        files._syncfs.cache_clear()


def test_a_filesystem_flush_really_syncs_here_and_creates_its_folder(tmp_path: Path) -> None:
    # The machines this suite runs on have a syncfs that reports errors: the fast path is real.
    flush = files.FilesystemFlush.open(tmp_path / "tombstones")
    try:
        assert (tmp_path / "tombstones").is_dir()
        assert flush.flush() is True
    finally:
        flush.close()
        flush.close()  # closing twice is harmless
