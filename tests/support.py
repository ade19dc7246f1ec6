"""Helpers shared by tests and benchmarks: settings in a temp folder, seeded Chroma rows."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from core.config import Settings, resolve_config
from core.vectors import ChromaRow, VectorStore

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
