"""The defaults a neo.mjs checkout gives the graph, the queue and the Chroma server, from the
original's layout and its NEO_* variables."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.base.config.neo_layout import NeoLayoutError, neo_defaults, queue_path
from core.base.rules.graph_schema import NeoEra

ROOT = Path("/srv/neo")


def test_without_variables_the_checkout_gives_the_originals_paths_and_server() -> None:
    defaults = neo_defaults(ROOT, {})
    assert defaults.data_root == ROOT / ".neo-ai-data"
    assert defaults.graph_db_path == ROOT / ".neo-ai-data/sqlite/memory-core-graph.sqlite"
    assert defaults.chroma_url == "http://localhost:8000"
    assert defaults.queue_override is None


def test_the_queue_is_where_the_era_that_wrote_the_graph_keeps_it() -> None:
    defaults = neo_defaults(ROOT, {})
    for era in (NeoEra.V0, NeoEra.E1, NeoEra.E2):
        assert queue_path(ROOT, defaults, era) == ROOT / "ai/data/memory-core/lazy-edges.jsonl"
    assert queue_path(ROOT, defaults, NeoEra.E3) == (
        ROOT / ".neo-ai-data/memory-core/lazy-edges.jsonl")


def test_each_variable_moves_what_it_names_and_a_relative_one_is_from_the_checkout() -> None:
    defaults = neo_defaults(ROOT, {"NEO_MEMORY_DB_PATH": "/data/graph.sqlite",
                                   "NEO_LAZY_EDGES_QUEUE_PATH": "queue/lazy.jsonl",
                                   "NEO_CHROMA_HOST": "10.0.0.5", "NEO_CHROMA_PORT": "8001"})
    assert defaults.graph_db_path == Path("/data/graph.sqlite")
    assert queue_path(ROOT, defaults, NeoEra.E3) == ROOT / "queue/lazy.jsonl"
    assert queue_path(ROOT, defaults, NeoEra.E1) == ROOT / "queue/lazy.jsonl"
    assert defaults.chroma_url == "http://10.0.0.5:8001"


def test_the_data_root_variable_moves_the_graph_unless_the_graph_variable_is_set() -> None:
    moved = neo_defaults(ROOT, {"NEO_AI_DATA_ROOT": "/var/neo"})
    assert moved.graph_db_path == Path("/var/neo/sqlite/memory-core-graph.sqlite")
    assert moved.data_root == Path("/var/neo")
    pinned = neo_defaults(ROOT, {"NEO_AI_DATA_ROOT": "/var/neo", "NEO_MEMORY_DB_PATH": "g.db"})
    assert pinned.graph_db_path == ROOT / "g.db"


def test_an_ipv6_chroma_host_is_bracketed() -> None:
    assert neo_defaults(ROOT, {"NEO_CHROMA_HOST": "::1"}).chroma_url == "http://[::1]:8000"


@pytest.mark.parametrize(("environ", "words"), [
    ({"NEO_MEMORY_DB_PATH": ":memory:"}, "in-memory graph no other process can see"),
    ({"NEO_MEMORY_DB_PATH": " /g.db"}, "whitespace around it"),
    ({"NEO_CHROMA_PORT": "80000"}, "$NEO_CHROMA_PORT='80000'"),
    ({"NEO_CHROMA_HOST": "a b"}, "do not make a Chroma URL"),
])
def test_a_variable_that_names_nothing_usable_is_refused_naming_it(
    environ: dict[str, str], words: str,
) -> None:
    with pytest.raises(NeoLayoutError) as raised:
        neo_defaults(ROOT, environ)
    assert words in str(raised.value) and "\n" not in str(raised.value)
