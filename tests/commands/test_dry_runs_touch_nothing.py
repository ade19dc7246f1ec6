"""Dry runs touch nothing: the file set and the bytes of the data folder are the same before and
after every dry run (`--tick --dry-run` of both daemons, `explain`, `gc --dry-run`,
`backfill --dry-run`, `status`), on a store that exists and on one that does not.

The one exception, named in docs/reliability.md ("Dry runs"), is what the chromadb client
writes by itself when it opens an embedded store that exists: one row into its own
`acquire_write` table of `chroma.sqlite3` on every open (nothing else in the file changes),
and the index files `data_level0.bin` and `length.bin` of a collection whose vector index was
never persisted (its segment folder has no `index_metadata.pickle`), rewritten at the same
size each time the client loads it."""

from __future__ import annotations

import hashlib
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn

import pytest

from daemons import backfill, drain, reconcile, status
from tests.support import REPO, child_env

#: Chroma's own bookkeeping table, which its client writes a row into on every open.
ACQUIRE_WRITE = "acquire_write"
#: The index files Chroma rewrites when it loads an index it never persisted.
UNPERSISTED_INDEX_FILES = frozenset({"data_level0.bin", "length.bin"})
#: What a persisted Chroma vector index has in its folder.
PERSISTED_INDEX_MARK = "index_metadata.pickle"
Main = Callable[[list[str]], NoReturn]
#: Each dry run (its entry point, as typed), and whether it opens the embedded Chroma store.
DRY_RUNS: list[tuple[Main, list[str], bool]] = [
    (drain.main, ["--tick", "--dry-run"], True),
    (reconcile.main, ["--tick", "--dry-run"], True),
    (reconcile.main, ["explain", "hooli"], True),
    (reconcile.main, ["gc", "--dry-run"], True),
    (backfill.main, ["--dry-run"], True),
    (status.main, [], False),
    (status.main, ["--health"], False),
]


def config(tmp_path: Path) -> Path:
    path = tmp_path / "kb.toml"
    path.write_text('[knowledgeBase]\ndataDir = "data"\nreconciliationAutoTombstone = true\n'
                    "reconciliationMaxStaleFraction = 1.0\ngcAutoDelete = true\n"
                    "gcRetention = {maxCount = 1}\n")
    return path


def chroma_tables(path: Path) -> tuple[str, int]:
    """A digest of every table of Chroma's SQLite file but `acquire_write`, and how many rows
    `acquire_write` holds."""
    db = sqlite3.connect(f"file:{path}?immutable=1", uri=True)
    try:
        digest = hashlib.sha256()
        tables = [r[0] for r in db.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")]
        for table in tables:
            if table != ACQUIRE_WRITE:
                rows = sorted(map(repr, db.execute(f'SELECT * FROM "{table}"')))
                digest.update(repr((table, rows)).encode())
        [(acquired,)] = db.execute(f"SELECT count(*) FROM {ACQUIRE_WRITE}")
        return digest.hexdigest(), int(acquired)
    finally:
        db.close()


def snapshot(root: Path) -> dict[str, str]:
    """Every path under `root` with its kind and mode, and for a file its bytes' hash; Chroma's
    own writes (see the module docstring) by what they may not change: its SQLite file by its
    tables, `acquire_write` apart, and an unpersisted index's files by their size."""
    found = {}
    for path in sorted(root.rglob("*")):
        name = str(path.relative_to(root))
        mode = f"{path.lstat().st_mode:o}"
        if path.is_dir():
            found[name] = f"folder {mode}"
        elif path.name == "chroma.sqlite3":
            found[name] = f"chroma {mode} {chroma_tables(path)[0]}"
        elif path.name in UNPERSISTED_INDEX_FILES and not (
                path.parent / PERSISTED_INDEX_MARK).exists():
            found[name] = f"unpersisted index {mode} {path.stat().st_size}"
        else:
            found[name] = f"file {mode} {hashlib.sha256(path.read_bytes()).hexdigest()}"
    return found


def run(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", *args], cwd=REPO,
                          env=child_env(tmp_path / "home"), capture_output=True, text=True,
                          timeout=300, check=False)


def exit_code(main: Main, argv: list[str]) -> int | str | None:
    with pytest.raises(SystemExit) as stopped:
        main(argv)
    return stopped.value.code


def test_every_dry_run_leaves_an_existing_data_folder_as_it_was(tmp_path: Path) -> None:
    """On the demo's data folder (store, graph, queue, dead letters, tenants), each dry run
    leaves every file's bytes and the file set as they were (the graph's -wal and -shm are
    not created); a run that opens the store adds exactly one `acquire_write` row to Chroma's
    file, and nothing else. (The commands run in-process, one after the other: each closes
    its client, and the next opens the store afresh, as a process of its own would.)"""
    kb = config(tmp_path)
    seeded = run(tmp_path, "daemons.demo", "--config", str(kb))
    assert seeded.returncode == 0, seeded.stderr[-3000:]
    data = tmp_path / "data"
    store_file = data / "chroma" / "chroma.sqlite3"
    assert not (data / "graph.sqlite-wal").exists() and not (data / "graph.sqlite-shm").exists()
    assert (data / "memory-core" / "lazy-edges.jsonl.dead.jsonl").exists()
    changed = {}
    for main, argv, opens_chroma in DRY_RUNS:
        name = f"{main.__module__} {' '.join(argv)}"
        before, acquired = snapshot(data), chroma_tables(store_file)[1]
        assert exit_code(main, [*argv, "--config", str(kb)]) == 0, name
        after = snapshot(data)
        changed[name] = sorted(
            path for path in before.keys() | after.keys() if before.get(path) != after.get(path))
        assert chroma_tables(store_file)[1] == acquired + opens_chroma, name
    assert changed == {name: [] for name in changed} and len(changed) == len(DRY_RUNS)


@pytest.mark.parametrize(("main", "argv", "code"), [
    (drain.main, ["--tick", "--dry-run"], 0), (reconcile.main, ["--tick", "--dry-run"], 0),
    # No such tenant in an empty state: refused (exit 2), still creating nothing.
    (reconcile.main, ["explain", "hooli"], 2), (reconcile.main, ["gc", "--dry-run"], 0),
    (backfill.main, ["--dry-run"], 0), (status.main, [], 0), (status.main, ["--health"], 0),
])
def test_a_dry_run_on_a_data_folder_that_does_not_exist_creates_nothing(
    tmp_path: Path, main: Main, argv: list[str], code: int,
) -> None:
    kb = config(tmp_path)
    before = sorted(tmp_path.rglob("*"))
    assert exit_code(main, [*argv, "--config", str(kb)]) == code
    assert sorted(tmp_path.rglob("*")) == before
