"""The spool of telemetry rows SQLite refused: `<dataDir>/telemetry-spool.jsonl`.

A file, not a table: the rows are here exactly because the SQLite file could not be written.
"""

from __future__ import annotations

import asyncio
import fcntl
import os
from collections.abc import Sequence
from pathlib import Path
from typing import IO

import orjson
import structlog

from core.base.io.files import create_private_file, make_private_dirs
from core.base.rules.telemetry import MetricRow
from core.base.state.graph_db import GraphDB
from core.base.state.telemetry import insert_metric_rows

log = structlog.get_logger(__name__)

#: How much of an unreadable spool line is quoted in the error log.
SPOOL_LINE_SHOWN = 2_000


class MetricSpool:
    """Telemetry rows that SQLite refused, kept until a later pass writes them.

    Appends are whole lines, fsynced, under an exclusive `flock` of `<spool>.lock`, so two
    processes sharing a data folder cannot lose each other's rows. Flushing inserts every row
    (ids make a repeat harmless) and only then removes the file: a crash loses nothing.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.lock_path = path.with_name(path.name + ".lock")

    def _lock(self) -> IO[str]:
        """Open the lock file and take the exclusive lock (blocking: call in a thread)."""
        make_private_dirs(self.path.parent)
        handle = os.fdopen(create_private_file(self.lock_path, os.O_WRONLY | os.O_APPEND), "a")
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        return handle

    @staticmethod
    def _unlock(handle: IO[str]) -> None:
        fcntl.flock(handle.fileno(), fcntl.LOCK_UN)
        handle.close()

    async def append(self, rows: Sequence[MetricRow]) -> None:
        """Keep rows for a later pass, durably; raises OSError when even that fails."""
        if not rows:
            return
        data = b"".join(orjson.dumps(r.as_json()) + b"\n" for r in rows)
        lock = await asyncio.to_thread(self._lock)
        try:
            await asyncio.to_thread(self._append_durably, data)
        finally:
            await asyncio.to_thread(self._unlock, lock)

    def _append_durably(self, data: bytes) -> None:
        with os.fdopen(create_private_file(self.path, os.O_WRONLY | os.O_APPEND), "ab") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())

    def pending(self) -> int:
        """Rows waiting (lines in the file); 0 when there is no spool. Never creates it."""
        try:
            with self.path.open("rb") as handle:
                return sum(1 for line in handle if line.strip())
        except FileNotFoundError:
            return 0

    async def flush(self, graph: GraphDB) -> int:
        """Write every spooled row, then remove the spool; how many were written. Raises (the
        spool kept) when SQLite still refuses; a line cut short by a crash is logged, dropped."""
        if not self.path.exists():
            return 0
        lock = await asyncio.to_thread(self._lock)
        try:
            rows = await asyncio.to_thread(self._read_rows)
            await insert_metric_rows(graph, rows)
            await asyncio.to_thread(self.path.unlink, missing_ok=True)
        finally:
            await asyncio.to_thread(self._unlock, lock)
        if rows:
            log.info("telemetry.spool_flushed", rows=len(rows), path=str(self.path))
        return len(rows)

    def _read_rows(self) -> list[MetricRow]:
        try:
            raw_lines = self.path.read_bytes().splitlines()
        except FileNotFoundError:
            return []
        rows: list[MetricRow] = []
        for number, raw in enumerate(raw_lines, start=1):
            if not raw.strip():
                continue
            try:
                rows.append(MetricRow.from_json(orjson.loads(raw)))
            except (ValueError, TypeError) as exc:
                log.error("telemetry.spool_line_unreadable", path=str(self.path), line=number,
                          error=str(exc), text=raw[:SPOOL_LINE_SHOWN].decode("utf-8", "replace"))
        return rows


