"""Helpers shared by tests and benchmarks: settings in a temp folder, seeded Chroma rows."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from core.rules.config import Settings, resolve_config
from core.stores.chroma import ChromaRow, VectorStore

DIM = 4


def embedding_for(row_id: str) -> list[float]:
    """A deterministic synthetic embedding (no model is ever loaded)."""
    seed = sum(row_id.encode()) % 97
    return [float((seed + i) % 7) / 7 for i in range(DIM)]


def make_settings(tmp_path: Path, **overrides: Any) -> Settings:
    """Settings rooted in `tmp_path`, with `[knowledgeBase]` overrides by TOML key name."""
    table = {"dataDir": str(tmp_path / "data"), **overrides}
    loaded = resolve_config({"knowledgeBase": table}, base_dir=tmp_path)
    assert not loaded.warnings, loaded.warnings
    return loaded.settings


async def seed(
    vectors: VectorStore, collection: str, rows: Sequence[tuple[str, Mapping[str, Any]]],
    *, documents: bool = True,
) -> None:
    """Write rows (id, metadata) with synthetic embeddings into a collection, creating it."""
    await vectors.upsert(
        collection,
        [ChromaRow(i, dict(m), f"doc {i}" if documents else None, embedding_for(i))
         for i, m in rows],
        create=True,
    )


REPO = Path(__file__).resolve().parent.parent


def child_env(home: Path) -> dict[str, str]:
    """The environment of a command a test runs: its own $HOME (nothing may land in the real
    one), telemetry off, and no config or notify socket inherited from the test's shell."""
    env = {**os.environ, "HOME": str(home), "ANONYMIZED_TELEMETRY": "False"}
    env.pop("KB_CONFIG", None)
    env.pop("NOTIFY_SOCKET", None)
    return env


def run_module(*args: str, home: Path, stdin: str | None = None,
               timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """`python -m <args>` from the repository, as an operator runs it; never raises on a
    non-zero exit (tests assert the code)."""
    return subprocess.run([sys.executable, "-m", *args], cwd=REPO, env=child_env(home),
                          input=stdin, capture_output=True, text=True, timeout=timeout,
                          check=False)
