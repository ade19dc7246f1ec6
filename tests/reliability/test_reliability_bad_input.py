"""Bad input: a fuzz corpus of queue lines and of config files. The daemon never crashes,
never drops a valid line, and every rejection says what and where."""

from __future__ import annotations

import asyncio
import json
import math
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from core.base.chroma import VectorStore
from core.base.config.config import KEYS, resolve_config
from core.base.config.config_settings import setting_value
from core.base.rules.errors import ConfigError
from core.base.runtime.config_file import load_config
from core.base.runtime.context import TickContext
from core.base.state.graph import upsert_node
from core.base.state.graph_db import GraphDB
from core.base.state.state import open_graph
from core.drain.queue_drain import drain_queue
from core.drain.rules.queue_lines import EdgeLine, MalformedLine, parse_line
from tests.support import make_settings

CORPUS: list[bytes] = [
    b"\x00\x01\x02garbage",
    b"\xff\xfe\xfd",
    b'{"source": "CONCEPT:a", "target": "CONCEPT:b", "relationship": "R\xc3"}',
    b"x" * (10 * 1024 * 1024),  # a 10 MB line
    b"[" * 100_000 + b"]" * 100_000,  # deeply nested
    b'{"a": ' * 5_000 + b"1" + b"}" * 5_000,
    b"null", b"true", b"false", b"0", b"-1.5e308", b'"string"', b"[]", b"{}",
    b'{"source": "CONCEPT:a", "target": "CONCEPT:b", "relationship": "R", "weight": 1e400}',
    b'{"source": "CONCEPT:a", "target": "CONCEPT:b", "relationship": "R", "weight": '
    + b"9" * 400 + b"}",
    b'{"source": "CONCEPT:a", "target": "CONCEPT:b", "relationship": "R", "weight": NaN}',
    b'{"source": "CONCEPT:a", "target": "CONCEPT:b", "relationship": "R", "weight": -Infinity}',
    b'{"source": "CONCEPT:a", "target": "CONCEPT:b", "relationship": "R", "weight": true}',
    b'{"source": ["CONCEPT:a"], "target": "CONCEPT:b", "relationship": "R"}',
    b'{"source": "CONCEPT:a", "target": "CONCEPT:b", "relationship": {"r": 1}}',
    b'{"source": "   ", "target": "CONCEPT:b", "relationship": "R"}',
]


def valid(n: int, **extra: Any) -> bytes:
    return json.dumps({"source": "CONCEPT:a", "target": "CONCEPT:b", "relationship": f"V{n}",
                       **extra}).encode()


@pytest.mark.parametrize("raw", CORPUS, ids=lambda raw: repr(raw[:30]))
def test_every_corpus_line_is_rejected_with_a_reason(raw: bytes) -> None:
    parsed = parse_line(raw)
    assert isinstance(parsed, MalformedLine)
    assert parsed.detail and parsed.raw == raw


def test_duplicate_keys_take_the_last_value_as_javascript_does() -> None:
    parsed = parse_line(b'{"source": "CONCEPT:x", "source": "CONCEPT:a", "target": "T",'
                        b' "relationship": "R"}')
    assert isinstance(parsed, EdgeLine) and parsed.source == "CONCEPT:a"


async def test_a_queue_full_of_bad_input_never_crashes_and_keeps_every_valid_line(
    vectors: VectorStore, graph: GraphDB, tmp_path: Path
) -> None:
    settings = make_settings(tmp_path)
    await upsert_node(graph, "CONCEPT:a", "CONCEPT")
    await upsert_node(graph, "CONCEPT:b", "CONCEPT")
    queue = settings.drain.lazy_edges_queue_path
    queue.parent.mkdir(parents=True)
    with queue.open("wb") as f:
        for n, bad in enumerate(CORPUS):
            f.write(valid(n, weight=0.5 + n) + b"\n" + bad + b"\n")
    stats = await drain_queue(TickContext(settings, graph, vectors))
    assert stats.succeeded == len(CORPUS)
    assert stats.skipped_malformed == len(CORPUS)
    dead = [json.loads(x) for x in settings.drain.dead_letter_path.read_text().splitlines()]
    assert all(d["reason"] == "malformed" and d["detail"] for d in dead)
    assert any("limit 1048576" in d["detail"] for d in dead), "the 10 MB line, said so"
    assert any("nested too deeply" in d["detail"] for d in dead)
    assert any("non-finite number" in d["detail"] for d in dead)
    rows = await graph.query("SELECT COUNT(*) FROM edges WHERE relationship LIKE 'V%'")
    assert rows[0][0] == len(CORPUS)


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(noise=st.lists(st.binary(max_size=200).filter(lambda b: b"\n" not in b), max_size=15))
def test_random_bytes_between_valid_lines_never_cost_a_valid_line(noise: list[bytes]) -> None:
    async def scenario(root: Path) -> None:
        settings = make_settings(root)
        graph = await open_graph(settings.state)
        vectors = await VectorStore.open(settings.chroma)
        try:
            await upsert_node(graph, "CONCEPT:a", "CONCEPT")
            await upsert_node(graph, "CONCEPT:b", "CONCEPT")
            queue = settings.drain.lazy_edges_queue_path
            queue.parent.mkdir(parents=True)
            queue.write_bytes(b"".join(valid(i) + b"\n" + junk + b"\n"
                                       for i, junk in enumerate(noise)) + valid(999) + b"\n")
            stats = await drain_queue(TickContext(settings, graph, vectors))
            rows = await graph.query(
                "SELECT relationship, weight FROM edges ORDER BY relationship")
            expected = sorted(f"V{i}" for i in [*range(len(noise)), 999])
            applied = sorted(r[0] for r in rows if r[0].startswith("V"))
            assert applied == expected
            assert not queue.exists() or all(
                not line.strip() or json.loads(line).get("relationship")
                for line in queue.read_text().splitlines())
            assert stats.processed + stats.duplicates == stats.total_lines
        finally:
            await vectors.close()
            await graph.close()

    with tempfile.TemporaryDirectory() as root:
        asyncio.run(scenario(Path(root)))


WRONG_VALUES: list[Any] = ["text", "", 0, -1, 1.5, math.inf, True, False, [], [1, "a"], {},
                           {"nested": 1}, 10**30]


@pytest.mark.parametrize("key", [k.name for k in KEYS])
def test_every_key_with_every_wrong_type_takes_its_default_and_names_the_key(
    key: str, tmp_path: Path
) -> None:
    """...or, for the two destructive guards, the value that deletes nothing (they fail
    closed); `alertRules` is described by type, never quoted (it may hold secrets)."""
    spec = next(k for k in KEYS if k.name == key)
    default = resolve_config({}, base_dir=tmp_path).settings
    rejected = 0
    for value in WRONG_VALUES:
        if spec.locating:
            # Where data lives never falls back: an invalid value is a config error naming
            # the key (checked per value in tests/commands/test_locating_keys.py).
            try:
                resolve_config({"knowledgeBase": {key: value}}, base_dir=tmp_path)
            except ConfigError as exc:
                rejected += 1
                assert f"knowledgeBase.{key}: expected" in str(exc)
            continue
        loaded = resolve_config({"knowledgeBase": {key: value}}, base_dir=tmp_path)
        if spec.type == "rules" and isinstance(value, list):
            # An array is the right type: each item that is not a rule is skipped, with a
            # warning naming it, and no rule runs.
            rejected += bool(value)
            assert [w.key for w in loaded.warnings] == [key] * len(value)
            assert [f"{key}[{i}]" in w.message for i, w in enumerate(loaded.warnings)] == \
                [True] * len(value)
            assert loaded.settings.alerting.rules.valid == ()
            continue
        if loaded.warnings:
            rejected += 1
            assert [w.key for w in loaded.warnings] == [key]
            message = loaded.warnings[0].message
            assert key in message
            assert (f"a {type(value).__name__}" if spec.type == "rules" else repr(value)) in \
                message
            expected = spec.closed_value if spec.fails_closed else \
                setting_value(default, spec)
            assert setting_value(loaded.settings, spec) == expected
    assert rejected >= len(WRONG_VALUES) - 4, "most of these values are wrong for any key"


@pytest.mark.parametrize("text", [
    "[knowledgeBase\n", "[knowledgeBase]\nx = \n", "[knowledgeBase]\nremIntervalMs = 1 2\n",
    '[knowledgeBase]\ndataDir = "unterminated\n', "[knowledgeBase]\n[knowledgeBase]\n",
    "[knowledgeBase]\na = 1\na = 2\n", "= 3\n",
])
def test_syntax_errors_name_file_line_and_column(text: str, tmp_path: Path) -> None:
    config = tmp_path / "kb.toml"
    config.write_text(text)
    with pytest.raises(ConfigError) as caught:
        load_config(str(config), environ={})
    message = str(caught.value)
    assert message.startswith(f"{config}:") and message.split(":")[1].isdigit()
    assert "\n" not in message


@settings(max_examples=60, deadline=None)
@example(table={"dataDir": "\x00"})  # found by this test: a NUL in a path raised ValueError
@given(table=st.dictionaries(
    st.sampled_from([k.name for k in KEYS] + ["typo", "remintervalms"]),
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=10),
              st.lists(st.integers(), max_size=3),
              st.dictionaries(st.text(max_size=3), st.integers(), max_size=2)),
    max_size=8))
def test_any_table_resolves_without_raising_and_every_warning_names_a_key(
    table: dict[str, Any],
) -> None:
    table = {k: v for k, v in table.items() if v is not None}  # TOML has no null
    try:
        loaded = resolve_config({"knowledgeBase": table}, base_dir=Path("/tmp"))
    except ConfigError as exc:  # only a key that names where data lives may refuse the table
        assert any(f"knowledgeBase.{k.name}: " in str(exc) for k in KEYS
                   if k.locating and k.name in table)
        return
    for warning in loaded.warnings:
        assert warning.key in table
