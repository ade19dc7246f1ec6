"""A read-only, consistent snapshot of a SQLite state file, read a page at a time (`kb-migrate`).

The file is opened `mode=ro` (not one byte of it can change, and a missing file is an error,
never created) and every read happens inside one read transaction, so the pages of every table
come from the same moment even if a writer commits meanwhile (WAL: the snapshot keeps reading
the state as of its first read). Rows are read with a cursor, `page` rows at a time: memory is
bounded by a page, whatever the table's size.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import aiosqlite

from core.base.rules.errors import StoreUnavailable


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


class SqliteSnapshot:
    """One read transaction over a SQLite state file, opened read-only."""

    def __init__(self, conn: aiosqlite.Connection, path: Path) -> None:
        self._conn = conn
        self.path = path

    @classmethod
    async def open(cls, path: Path) -> SqliteSnapshot:
        """Open `path` read-only and begin the snapshot. Raises FileNotFoundError when there
        is no such file (nothing is created), StoreUnavailable when it cannot be read."""
        if not path.is_file():
            raise FileNotFoundError(path)
        try:
            conn = await aiosqlite.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True,
                                           isolation_level=None)
        except (sqlite3.Error, OSError) as exc:
            raise StoreUnavailable(f"SQLite {path}: open failed: {exc}") from exc
        try:
            await conn.execute("BEGIN")
            # A deferred transaction takes its snapshot at its first read: take it now.
            await conn.execute_fetchall("SELECT count(*) FROM sqlite_master")
        except sqlite3.Error as exc:
            await conn.close()
            raise StoreUnavailable(f"SQLite {path}: read failed: {exc}") from exc
        return cls(conn, path)

    async def close(self) -> None:
        """End the read transaction and close (idempotent)."""
        # Ending a read transaction loses nothing; a connection already closed has none.
        with contextlib.suppress(sqlite3.Error, ValueError):
            await self._conn.execute("ROLLBACK")
        await self._conn.close()

    async def _fetch(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        try:
            return list(await self._conn.execute_fetchall(sql, params))
        except sqlite3.Error as exc:
            raise StoreUnavailable(f"SQLite {self.path}: read failed: {exc}") from exc

    async def table_names(self) -> set[str]:
        """The file's tables, SQLite's own (`sqlite_*`) aside."""
        rows = await self._fetch("SELECT name FROM sqlite_master WHERE type = 'table' "
                                 "AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\'")
        return {str(r[0]) for r in rows}

    async def columns(self, table: str) -> tuple[str, ...]:
        """The table's columns, in their order."""
        rows = await self._fetch("SELECT name FROM pragma_table_info(?) ORDER BY cid", (table,))
        return tuple(str(r[0]) for r in rows)

    async def row_count(self, table: str) -> int:
        """How many rows the table has."""
        return int((await self._fetch(f"SELECT count(*) FROM {_quoted(table)}"))[0][0])

    async def pages(self, table: str, columns: Sequence[str], *,
                    page: int) -> AsyncIterator[list[tuple[Any, ...]]]:
        """The table's rows, `page` at a time, in the order they were inserted (rowid), so
        that an identity the target numbers them by (`kb_ingestion_metrics.seq`) follows the
        same order; a WITHOUT ROWID table in its primary key's order."""
        listed = ", ".join(map(_quoted, columns))
        without_rowid = await self._fetch(
            "SELECT wr FROM pragma_table_list WHERE schema = 'main' AND name = ?", (table,))
        order = "" if without_rowid and without_rowid[0][0] else " ORDER BY rowid"
        try:
            cursor = await self._conn.execute(f"SELECT {listed} FROM {_quoted(table)}{order}")
            try:
                while rows := await cursor.fetchmany(page):
                    yield [tuple(r) for r in rows]
            finally:
                await cursor.close()
        except sqlite3.Error as exc:
            raise StoreUnavailable(f"SQLite {self.path}: read of {table} failed: {exc}") from exc
