"""The stores on their bare clients, for the contenders that must not use this project's
adapters (the per-edge baseline and the floors), and the small file helpers the seeders share.

The bare connections are opened exactly as the project opens its own (WAL, `synchronous=FULL`,
foreign keys, the same busy timeout; Chroma with telemetry off and no embedding function), so a
floor is cheaper only because it does less, never because it is less durable.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from benchmarks.harness import DATA_SUBDIR

#: Tables `count_rows` may be asked about (the name goes into SQL text).
COUNTABLE_TABLES = frozenset({"nodes", "edges"})


def settings_for(root: Path, **overrides: Any) -> Any:
    """The project's settings for a contender root (`<root>/data/...`), with `[knowledgeBase]`
    overrides by TOML key name. Typed Any so that importing this module costs no project
    import in the parent."""
    from tests.support import make_settings

    settings = make_settings(root, **overrides)
    assert settings.data_dir == root / DATA_SUBDIR
    return settings


def open_sqlite(path: Path) -> sqlite3.Connection:
    """The graph file with the project's durability settings, in autocommit mode (callers
    issue their own BEGIN IMMEDIATE / COMMIT)."""
    from core.base.state.sqlite import BUSY_TIMEOUT_MS

    conn = sqlite3.connect(str(path), isolation_level=None, timeout=BUSY_TIMEOUT_MS / 1000)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    conn.execute("PRAGMA foreign_keys=ON")
    return conn


def open_chroma(settings: Any) -> Any:
    """An embedded chromadb client on the settings' store (telemetry off)."""
    import chromadb
    from chromadb.config import Settings as ChromaSettings

    return chromadb.PersistentClient(
        path=str(settings.chroma.path),
        settings=ChromaSettings(anonymized_telemetry=False, allow_reset=False),
    )


def scan_picking(collection: Any, where: dict[str, Any] | None,
                 pick: Callable[[dict[str, Any]], bool] | None = None) -> tuple[int, list[str]]:
    """The floors' read: ONE bare paged scan of `where`'s rows (None: the whole collection),
    metadatas only, at the pass's page size. Returns how many rows it read and the ids of
    those `pick(metadata)` picks (none when `pick` is None)."""
    from core.base.chroma import SCAN_PAGE_ROWS

    picked: list[str] = []
    scanned = offset = 0
    while True:
        page = collection.get(where=where, include=["metadatas"], limit=SCAN_PAGE_ROWS,
                              offset=offset)
        scanned += len(page["ids"])
        if pick is not None:
            picked += [i for i, m in zip(page["ids"], page["metadatas"], strict=True)
                       if pick(m)]
        if len(page["ids"]) < SCAN_PAGE_ROWS:
            return scanned, picked
        offset += len(page["ids"])


def delete_ids(collection: Any, ids: Sequence[str], *, batch: int) -> int:
    """The floors' deletes: by ids, `batch` at a time (the client's maximum); returns how
    many ids were sent."""
    for start in range(0, len(ids), batch):
        collection.delete(ids=list(ids[start:start + batch]))
    return len(ids)


def count_rows(path: Path, table: str) -> int:
    """Rows in one graph table, read after the contender closed its connection."""
    if table not in COUNTABLE_TABLES:
        raise ValueError(f"unknown table {table!r}")
    conn = sqlite3.connect(str(path))
    try:
        return int(conn.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0])
    finally:
        conn.close()


def write_queue_file(path: Path, lines: Sequence[bytes]) -> None:
    """A queue file as producers leave it: one line each, newline-terminated."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"".join(line + b"\n" for line in lines))
