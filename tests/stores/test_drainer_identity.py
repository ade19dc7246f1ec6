"""A drainer's identity on a PostgreSQL state (`core.drain.stores.drainer_identity`): created once
beside its queue and kept, refused when unreadable (exit 1, the queue untouched); and a
deadlock or serialization failure is a `WriteConflict` (the drain tries the batch again)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import asyncpg

from core.base.rules.errors import StoreUnavailable, WriteConflict
from core.base.runtime.config_file import load_config
from core.base.state.postgres.connection import store_error
from core.drain.stores.drainer_identity import drainer_id, drainer_id_path
from tests.postgres_server import PostgresServer
from tests.support import run_module

LINE = b'{"source": "CONCEPT:a", "target": "CONCEPT:b", "relationship": "R"}\n'


def _tick(tmp_path: Path, url: str) -> subprocess.CompletedProcess[str]:
    config = tmp_path / "kb.toml"
    config.write_text(f'[knowledgeBase]\ndataDir = "data"\nstateUrl = {json.dumps(url)}\n',
                      encoding="utf-8")
    return run_module("daemons.drain", "--tick", "--json", "--config", str(config),
                      home=tmp_path / "home")


def test_a_drainer_keeps_the_id_it_created_and_refuses_an_unreadable_one(
    tmp_path: Path, postgres_server: PostgresServer,
) -> None:
    url = postgres_server.create_database("drainer_identity")
    first = _tick(tmp_path, url)
    queue = load_config(str(tmp_path / "kb.toml"), environ={}).settings.drain.lazy_edges_queue_path
    assert first.returncode == 0, first.stderr
    path = drainer_id_path(queue)
    made = path.read_text()
    assert len(made.strip()) == 32
    assert _tick(tmp_path, url).returncode == 0 and path.read_text() == made
    assert drainer_id(queue) == made.strip()

    path.write_text("not an id\n")
    queue.write_bytes(LINE)
    refused = _tick(tmp_path, url)
    assert refused.returncode == 1, refused.stderr
    assert str(path) in json.loads(refused.stdout)["error"]
    assert queue.read_bytes() == LINE  # nothing drained, nothing lost


def test_a_deadlock_or_serialization_failure_is_a_write_conflict_other_errors_are_not() -> None:
    for error in (asyncpg.exceptions.DeadlockDetectedError("deadlock detected"),
                  asyncpg.exceptions.SerializationError("could not serialize access")):
        assert isinstance(store_error("db", "write", error), WriteConflict)
    other = store_error("db", "write", asyncpg.exceptions.LockNotAvailableError("timeout"))
    assert isinstance(other, StoreUnavailable) and not isinstance(other, WriteConflict)
