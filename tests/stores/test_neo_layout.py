"""`neoRoot` through the configuration loader: the original's layout and NEO_* variables give
the graph, queue and Chroma defaults, a key set in the file wins, and the graph file's schema
is checked against `graphSchema` before any store opens."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.base.rules.errors import ConfigError
from core.base.rules.graph_schema import NeoEra
from core.base.runtime.config_file import load_config
from tests.neo_graphs import build_neo_graph

GRAPH = ".neo-ai-data/sqlite/memory-core-graph.sqlite"


def config(tmp_path: Path, body: str = "") -> str:
    path = tmp_path / "kb.toml"
    path.write_text(f'[knowledgeBase]\ndataDir = "data"\nneoRoot = "neo"\n{body}')
    return str(path)


@pytest.mark.parametrize(("era", "queue"), [
    (NeoEra.E1, "ai/data/memory-core/lazy-edges.jsonl"),
    (NeoEra.E2, "ai/data/memory-core/lazy-edges.jsonl"),
    (NeoEra.E3, ".neo-ai-data/memory-core/lazy-edges.jsonl"),
])
def test_neo_root_alone_gives_the_platforms_graph_queue_and_server(
    tmp_path: Path, era: NeoEra, queue: str,
) -> None:
    build_neo_graph(tmp_path / "neo" / GRAPH, era)
    settings = load_config(config(tmp_path), environ={}).settings
    assert settings.state.neo_root == tmp_path / "neo"
    assert settings.state.graph_db_path == tmp_path / "neo" / GRAPH
    assert settings.drain.lazy_edges_queue_path == tmp_path / "neo" / queue
    assert settings.chroma.url == "http://localhost:8000" and settings.chroma.server_mode


def test_a_key_set_in_the_file_wins_over_the_neo_default(tmp_path: Path) -> None:
    build_neo_graph(tmp_path / "elsewhere.sqlite", NeoEra.E2)
    (tmp_path / "neo" / ".neo-ai-data").mkdir(parents=True)
    settings = load_config(config(tmp_path, 'graphDbPath = "elsewhere.sqlite"\n'
                                            'lazyEdgesQueuePath = "q.jsonl"\nchromaUrl = ""\n'),
                           environ={"NEO_CHROMA_PORT": "9000"}).settings
    assert settings.state.graph_db_path == tmp_path / "elsewhere.sqlite"
    assert settings.drain.lazy_edges_queue_path == tmp_path / "q.jsonl"
    assert settings.chroma.url == "" and not settings.chroma.server_mode


def test_the_originals_variables_move_what_they_name(tmp_path: Path) -> None:
    build_neo_graph(tmp_path / "plane" / "g.sqlite", NeoEra.E3)
    (tmp_path / "neo" / ".neo-ai-data").mkdir(parents=True)
    settings = load_config(config(tmp_path), environ={
        "NEO_MEMORY_DB_PATH": str(tmp_path / "plane" / "g.sqlite"),
        "NEO_LAZY_EDGES_QUEUE_PATH": "queues/lazy.jsonl",
        "NEO_CHROMA_HOST": "127.0.0.1", "NEO_CHROMA_PORT": "8001"}).settings
    assert settings.state.graph_db_path == tmp_path / "plane" / "g.sqlite"
    assert settings.drain.lazy_edges_queue_path == tmp_path / "neo" / "queues/lazy.jsonl"
    assert settings.chroma.url == "http://127.0.0.1:8001"


def test_without_neo_root_a_neo_file_at_graph_db_path_is_read_as_the_originals(
    tmp_path: Path,
) -> None:
    build_neo_graph(tmp_path / "g.sqlite", NeoEra.E1)
    path = tmp_path / "kb.toml"
    path.write_text('[knowledgeBase]\ngraphDbPath = "g.sqlite"\n')
    assert load_config(str(path), environ={}).settings.state.graph_db_path == tmp_path / "g.sqlite"
    path.write_text('[knowledgeBase]\ngraphDbPath = "g.sqlite"\ngraphSchema = "kb"\n')
    with pytest.raises(ConfigError, match='graphSchema = "kb" but the file holds neo.mjs '
                                          r"graph \(E1\)"):
        load_config(str(path), environ={})
