"""A read-only open of the SQLite state (dry runs, `status`) creates no side file, changes no
byte of the file or of its -wal and -shm, and never returns a wrong read when a writer is
active (core.base.state.sqlite.read_only)."""

from __future__ import annotations

import hashlib
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from core.base.rules.errors import StoreUnavailable
from core.base.state.sqlite.connection import SqliteGraph

pytestmark = pytest.mark.sqlite_only("the SQLite file and its WAL side files")

NODES = "SELECT count(*) FROM nodes"


def files(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


async def count_read_only(path: Path) -> int:
    graph = await SqliteGraph.open(path, read_only=True)
    try:
        [(count,)] = await graph.query(NODES)
        return int(count)
    finally:
        await graph.close()


def insert(db: sqlite3.Connection, first: int, count: int) -> None:
    """`count` nodes written by another connection, committed."""
    db.executemany("INSERT INTO nodes VALUES (?, 'L', '{}')",
                   [(f"n{i}",) for i in range(first, first + count)])


def start_writer(state: Path, *, rows: int = 4) -> subprocess.Popen[str]:
    """Another process that commits `rows` nodes into the WAL (no checkpoint) and keeps the
    file open until its stdin gets a line."""
    code = ("import sqlite3, sys\n"
            "db = sqlite3.connect(sys.argv[1], isolation_level=None)\n"
            "db.execute('PRAGMA wal_autocheckpoint=0')\n"
            "db.executemany(\"INSERT INTO nodes VALUES (?, 'L', '{}')\","
            f" [(f'w{{i}}',) for i in range({rows})])\n"
            "print('committed', flush=True)\n"
            "sys.stdin.readline()\n")
    writer = subprocess.Popen([sys.executable, "-c", code, str(state)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    assert writer.stdout is not None and writer.stdout.readline() == "committed\n"
    return writer


@pytest.fixture
async def state(tmp_path: Path) -> Path:
    """A WAL state file with 3 nodes, closed cleanly (no -wal, no -shm)."""
    path = tmp_path / "graph.sqlite"
    graph = await SqliteGraph.open(path)
    try:
        async with graph.write() as tx:
            for i in range(3):
                await tx.execute("INSERT INTO nodes VALUES (?, 'L', '{}')", (f"n{i}",))
    finally:
        await graph.close()
    assert sorted(files(tmp_path)) == ["graph.sqlite"]
    return path


async def test_a_closed_state_is_read_with_no_side_file_and_no_byte_changed(state: Path) -> None:
    before = files(state.parent)
    assert await count_read_only(state) == 3
    assert files(state.parent) == before


async def test_beside_an_active_writer_every_commit_is_read_and_no_byte_changes(
    state: Path,
) -> None:
    """The writer is another process, as a daemon is (in one process SQLite shares one
    mapping of the -shm between connections, the writer's writable one)."""
    writer = start_writer(state)
    try:
        before = files(state.parent)
        assert set(before) == {"graph.sqlite", "graph.sqlite-wal", "graph.sqlite-shm"}
        assert await count_read_only(state) == 7
        assert files(state.parent) == before
    finally:
        writer.communicate("\n", timeout=30)


async def test_what_a_killed_writer_left_in_its_wal_is_read_and_no_byte_changes(
    state: Path,
) -> None:
    writer = start_writer(state, rows=5)
    writer.kill()
    writer.communicate(timeout=30)
    before = files(state.parent)
    assert "graph.sqlite-wal" in before
    assert await count_read_only(state) == 8
    assert files(state.parent) == before


async def test_a_writer_that_checkpoints_under_a_read_fails_the_read_instead_of_misleading_it(
    state: Path,
) -> None:
    graph = await SqliteGraph.open(state, read_only=True)
    try:
        assert (await graph.query(NODES))[0][0] == 3
        writer = sqlite3.connect(state, isolation_level=None)
        insert(writer, 3, 2)
        writer.close()  # the last connection checkpoints into the file and removes the WAL
        with pytest.raises(StoreUnavailable, match="a writer changed the file"):
            await graph.query(NODES)
    finally:
        await graph.close()


async def test_a_wal_without_its_shm_is_refused_and_nothing_is_created(state: Path) -> None:
    wal = state.with_name(state.name + "-wal")
    wal.write_bytes(b"")
    before = files(state.parent)
    with pytest.raises(StoreUnavailable, match=r"without graph\.sqlite-shm"):
        await SqliteGraph.open(state, read_only=True)
    assert files(state.parent) == before


async def test_a_rollback_journal_file_is_read_with_its_locks_and_nothing_created(
    tmp_path: Path,
) -> None:
    path = tmp_path / "other.sqlite"
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("CREATE TABLE nodes (id TEXT PRIMARY KEY, label TEXT, properties TEXT)")
    insert(db, 0, 2)
    db.close()
    before = files(tmp_path)
    assert await count_read_only(path) == 2
    assert files(tmp_path) == before
