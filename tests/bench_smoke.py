"""One `python -m benchmarks --smoke --only ...` run for the benchmark smoke tests: its stdout
lines, its report (the last line) and the benchmark temp folders it left behind."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from benchmarks import postgres_bench
from benchmarks.harness import WORKDIR_PREFIX, repo_root
from tests.postgres_server import PostgresServer

#: Generous: the whole smoke run takes ~85 s here on a quiet machine, most of it interpreter,
#: Chroma and `chroma run` start-ups; at a load average of 8 it has taken over 300 s.
SMOKE_TIMEOUT_S = 600

#: stdout lines, the report, the benchmark temp folders left behind.
SmokeRun = tuple[list[str], dict[str, Any], set[Path]]


def run_smoke(tmp_path_factory: pytest.TempPathFactory, postgres_server: PostgresServer,
              sections: Sequence[str]) -> SmokeRun:
    """Run `sections` at smoke sizes in a child with a temp root of its own (TMPDIR), so a
    benchmark another process runs at the same time cannot be taken for this run's leftovers.
    Its PostgreSQL rows run on the session's server (`$KB_BENCH_PG_URL`, an operator's server
    as the benchmark sees it), which saves a second cluster's start-up."""
    temp_root = tmp_path_factory.mktemp("bench-tmp")
    env = {**os.environ, "TMPDIR": str(temp_root),
           postgres_bench.URL_VARIABLE: postgres_server.url()}
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--smoke", "--only", ",".join(sections)],
        cwd=repo_root(), env=env, capture_output=True, text=True, timeout=SMOKE_TIMEOUT_S,
        check=False)
    assert done.returncode == 0, done.stderr[-4000:]
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    return lines, json.loads(lines[-1]), set(temp_root.glob(f"{WORKDIR_PREFIX}*"))
