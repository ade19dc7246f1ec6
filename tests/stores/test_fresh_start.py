"""A fresh start with two openers of a new state file at once (both daemons of `make
run-daemons` on a fresh clone): each open waits for the other within `busy_timeout` and
succeeds, never "database is locked" (which once killed the drain daemon at its very first
start). Real SQLite files."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from pathlib import Path

import pytest

from core.base.state.sqlite import SqliteGraph


def _write_for_a_while(path: Path, begin: str, ready: threading.Event) -> None:
    """Another opener mid-way through its schema: the file's write lock held for 0.4 s."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute(begin)
        conn.execute("CREATE TABLE IF NOT EXISTS other_opener(x)")
        ready.set()
        threading.Event().wait(0.4)
        conn.execute("COMMIT")
    finally:
        conn.close()


@pytest.mark.parametrize("begin", ["BEGIN IMMEDIATE", "BEGIN DEFERRED"])
async def test_an_open_waits_for_another_opener_writing_the_new_file(
        tmp_path: Path, begin: str) -> None:
    path = tmp_path / "graph.sqlite"
    sqlite3.connect(path).close()  # a new, empty file in rollback-journal mode
    ready = threading.Event()
    other = threading.Thread(target=_write_for_a_while, args=(path, begin, ready))
    other.start()
    try:
        assert ready.wait(5)
        graph = await SqliteGraph.open(path)
        await graph.close()
    finally:
        other.join()
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master")}
    finally:
        conn.close()
    assert {"other_opener", "nodes", "edges"} <= tables


async def test_openers_of_a_new_file_at_once_all_succeed(tmp_path: Path) -> None:
    async def open_and_close(path: Path) -> None:
        graph = await SqliteGraph.open(path)
        await graph.close()

    for round_ in range(20):
        path = tmp_path / f"fresh-{round_}" / "graph.sqlite"
        await asyncio.gather(*(open_and_close(path) for _ in range(3)))
