"""The project's own writers create owner-only folders and files whatever the umask, even in a
process that never went through a command (which sets the umask: tests/commands/
test_owner_only_data.py); what exists keeps its mode."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from core.base.io.files import create_private_file, make_private_dirs
from core.base.io.locks import ProcessLock
from core.base.rules.telemetry import MetricRow
from core.base.state.sqlite.connection import SqliteGraph
from core.base.state.telemetry_spool import MetricSpool
from core.drain.stores.queue_files import append_locked
from core.reconcile.stores.archives.files import TombstoneArchive

pytestmark = pytest.mark.usefixtures("umask_022")


def mode(path: Path) -> int:
    return path.stat().st_mode & 0o777


def test_missing_folders_are_made_owner_only_at_every_level_and_existing_ones_kept(
    tmp_path: Path,
) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o755)
    make_private_dirs(shared / "a" / "b")
    assert (mode(shared), mode(shared / "a"), mode(shared / "a" / "b")) == (0o755, 0o700, 0o700)
    (shared / "file").write_text("x")
    with pytest.raises(FileExistsError):
        make_private_dirs(shared / "file")


def test_a_created_file_is_owner_only_and_an_existing_one_keeps_its_mode(tmp_path: Path) -> None:
    os.close(create_private_file(tmp_path / "new"))
    theirs = tmp_path / "theirs"
    theirs.write_text("x")
    theirs.chmod(0o644)
    os.close(create_private_file(theirs))
    assert (mode(tmp_path / "new"), mode(theirs)) == (0o600, 0o644)


async def test_the_state_file_and_its_wal_and_shm_are_owner_only(tmp_path: Path) -> None:
    path = tmp_path / "data" / "graph.sqlite"
    graph = await SqliteGraph.open(path)
    try:
        async with graph.write() as tx:
            await tx.execute("INSERT INTO nodes VALUES ('a', 'L', '{}')")
        side_files = [path.with_name(path.name + s) for s in ("-wal", "-shm")]
        assert all(p.exists() for p in side_files)
        assert [mode(p) for p in (path.parent, path, *side_files)] == [0o700] + [0o600] * 3
    finally:
        await graph.close()


async def test_archives_spool_lock_and_queue_are_owner_only(tmp_path: Path) -> None:
    data = tmp_path / "data"
    archive = await TombstoneArchive.create(data / "tombstones", collection="kb", tenant_id="t",
                                            pass_id="p", now_ms=1)
    spool = MetricSpool(data / "spool" / "telemetry-spool.jsonl")
    await spool.append([MetricRow("r", 1, "t", "", None, "reconcile", 0, 0, 0, None, None,
                                  None)])
    lock = ProcessLock(data / "store" / ".kb-daemons.lock", purpose="test").acquire()
    lock.release()
    queue = data / "memory-core" / "lazy-edges.jsonl"
    append_locked(queue, [b'{"source": "a", "target": "b", "relationship": "R"}'])
    created = [data / "tombstones", archive.path, spool.path, spool.lock_path,
               data / "store", lock.path, queue.parent, queue]
    assert {str(p.relative_to(data)): mode(p) for p in created} == {
        str(p.relative_to(data)): 0o700 if p.is_dir() else 0o600 for p in created}
