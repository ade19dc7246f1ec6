"""The queue line grammar's limits, end to end: nesting at most MAX_JSON_DEPTH (the deepest value
the drainer's JSON encoder writes back), a weight within ±WEIGHT_LIMIT (0 and -0.0 link as the
default 1.0, as the original's `edge.weight || 1.0`), and reinforced edge weights that never
leave the graph's clamp, so never reach ±Inf. `enqueue` refuses what is beyond a limit (exit 2,
nothing appended); a line written straight into the file is dead-lettered `malformed` at once.

Real parts only: real queue files, real SQLite files, a real embedded Chroma in a temp folder
(nothing is seeded into it: CONCEPT: and CLASS: ids are never back-filled, they link when they
are already nodes of the graph), and the real commands where the behaviour is a command's."""

from __future__ import annotations

import itertools
import json
import math
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, Literal

import orjson
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from core.base.chroma import VectorStore
from core.base.config.config import Settings
from core.base.rules.nodes import EdgeRow
from core.base.runtime.context import TickContext
from core.base.state.graph import MAX_WEIGHT, MIN_WEIGHT, link_edges, upsert_node
from core.base.state.graph_db import GraphDB
from core.base.state.sqlite import SqliteGraph
from core.drain.queue_drain import drain_queue
from core.drain.rules.queue_lines import (
    MALFORMED,
    MAX_JSON_DEPTH,
    WEIGHT_LIMIT,
    EdgeLine,
    MalformedLine,
    parse_line,
)
from core.drain.stores.queue_files import enqueue_edges
from tests.support import count_rows, read_edge, run_module

SOURCE = "CONCEPT:grammar"
TARGET = "CLASS:QueueLine"
Nesting = Literal["arrays", "objects"]


def edge_line(relationship: str = "R", **extra: Any) -> bytes:
    """One queue line between the two pre-made nodes."""
    return json.dumps({"source": SOURCE, "target": TARGET, "relationship": relationship,
                       **extra}).encode()


def nested_value(depth: int, nesting: Nesting = "arrays") -> bytes:
    """JSON text of a value `depth` deep: `[]` (or `{}`) is 1, each wrapper adds one."""
    if nesting == "arrays":
        return b"[" * depth + b"]" * depth
    return b'{"k":' * (depth - 1) + b"{}" + b"}" * (depth - 1)


def nested_line(depth: int, nesting: Nesting = "arrays", relationship: str = "R") -> bytes:
    """A valid edge line whose whole nesting is `depth`: its own object is 1, and its property
    `p` holds a value `depth - 1` deep."""
    head = edge_line(relationship)[:-1]  # without the closing brace
    return head + b', "p": ' + nested_value(depth - 1, nesting) + b"}"


def depth_of(value: Any) -> int:
    """How deep a parsed JSON value is (a scalar is 0, `[]` and `{}` are 1)."""
    depth, level = 0, [(value, 1)]
    while level:
        item, at = level.pop()
        if isinstance(item, (list, dict)):
            depth = max(depth, at)
            children = item.values() if isinstance(item, dict) else item
            level.extend((child, at + 1) for child in children)
    return depth


def nested_list(depth: int) -> list[Any]:
    """A Python list `depth` deep."""
    value: list[Any] = []
    for _ in range(depth - 1):
        value = [value]
    return value


def write_queue(path: Path, lines: list[bytes]) -> None:
    """Lines appended straight to the queue file, as a producer bypassing `enqueue` would."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("ab") as handle:
        handle.write(b"".join(line + b"\n" for line in lines))


def dead_letters(settings_: Settings) -> list[dict[str, Any]]:
    if not settings_.drain.dead_letter_path.exists():
        return []
    return [json.loads(x) for x in settings_.drain.dead_letter_path.read_bytes().splitlines()]


async def make_nodes(graph: GraphDB) -> None:
    await upsert_node(graph, SOURCE, "CONCEPT")
    await upsert_node(graph, TARGET, "CLASS")


async def edge_weight(graph: GraphDB, relationship: str) -> float:
    stored = await read_edge(graph, SOURCE, TARGET, relationship)
    assert stored is not None, f"edge {relationship} was not linked"
    return stored.weight


@pytest.fixture
async def stores(graph: GraphDB, vectors: VectorStore, settings: Settings
                 ) -> AsyncIterator[TickContext]:
    await make_nodes(graph)
    yield TickContext(settings, graph, vectors)


def write_config(tmp_path: Path) -> Path:
    """A config whose data folder is `tmp_path / "data"`, as `make_settings(tmp_path)`'s."""
    config = tmp_path / "kb.toml"
    config.write_text('[knowledgeBase]\ndataDir = "data"\nlogFormat = "json"\n')
    return config


def enqueue(config: Path, tmp_path: Path, stdin: bytes) -> subprocess.CompletedProcess[str]:
    """`python -m daemons.enqueue` with `stdin`, as a producer runs it."""
    return run_module("daemons.enqueue", "--config", str(config), home=tmp_path / "home",
                      stdin=stdin.decode())


# ------------------------------------------------------------------------------- the depth rule


def test_max_json_depth_is_exactly_what_the_drainers_encoder_writes() -> None:
    assert depth_of(nested_list(MAX_JSON_DEPTH)) == MAX_JSON_DEPTH
    orjson.dumps(nested_list(MAX_JSON_DEPTH))
    orjson.dumps({"p": nested_list(MAX_JSON_DEPTH - 1)})
    with pytest.raises(orjson.JSONEncodeError, match="Recursion limit"):
        orjson.dumps(nested_list(MAX_JSON_DEPTH + 1))
    with pytest.raises(orjson.JSONEncodeError, match="Recursion limit"):
        orjson.dumps({"p": nested_list(MAX_JSON_DEPTH)})


@pytest.mark.parametrize("nesting", ["arrays", "objects"])
def test_the_depth_rule_counts_the_whole_line(nesting: Nesting) -> None:
    at_limit = nested_line(MAX_JSON_DEPTH, nesting)
    deeper = nested_line(MAX_JSON_DEPTH + 1, nesting)
    # The lines are as deep as they say, and both are JSON orjson reads (its decoder goes to
    # 1,024): only the depth rule can refuse the deeper one.
    assert depth_of(orjson.loads(at_limit)) == MAX_JSON_DEPTH
    assert depth_of(orjson.loads(deeper)) == MAX_JSON_DEPTH + 1
    accepted = parse_line(at_limit)
    assert isinstance(accepted, EdgeLine), accepted
    assert depth_of(accepted.properties) == MAX_JSON_DEPTH
    refused = parse_line(deeper)
    assert isinstance(refused, MalformedLine)
    assert "nested too deeply" in refused.detail
    assert f"more than {MAX_JSON_DEPTH} levels" in refused.detail


async def test_a_line_at_the_nesting_limit_is_enqueued_and_linked_in_one_tick(
    tmp_path: Path, settings: Settings
) -> None:
    config = write_config(tmp_path)
    graph = await SqliteGraph.open(settings.state.graph_db_path)
    try:
        await make_nodes(graph)  # CONCEPT: and CLASS: ids link only as existing nodes
    finally:
        await graph.close()
    line = nested_line(MAX_JSON_DEPTH, relationship="AT_LIMIT")
    appended = enqueue(config, tmp_path, line + b"\n")
    assert appended.returncode == 0, appended.stderr
    assert settings.drain.lazy_edges_queue_path.read_bytes() == line + b"\n"

    tick = run_module("daemons.drain", "--tick", "--json", "--config", str(config),
                      home=tmp_path / "home")
    assert tick.returncode == 0, tick.stderr
    figures = json.loads(tick.stdout)["drain"]
    assert (figures["totalLines"], figures["succeeded"]) == (1, 1), figures
    assert (figures["deadLettered"], figures["skippedMalformed"], figures["requeued"]) == (
        0, 0, 0), figures
    assert not settings.drain.dead_letter_path.exists()
    assert not settings.drain.lazy_edges_queue_path.exists()
    assert not settings.drain.draining_path.exists()
    graph = await SqliteGraph.open(settings.state.graph_db_path, read_only=True)
    try:
        stored = await read_edge(graph, SOURCE, TARGET, "AT_LIMIT")
    finally:
        await graph.close()
    assert stored is not None and stored.weight == 1.0
    assert depth_of(stored.properties) == MAX_JSON_DEPTH


def test_a_line_one_level_deeper_is_refused_by_enqueue_with_exit_2(
    tmp_path: Path, settings: Settings
) -> None:
    config = write_config(tmp_path)
    queue = settings.drain.lazy_edges_queue_path
    refused = enqueue(config, tmp_path,
                      nested_line(MAX_JSON_DEPTH + 1) + b"\n" + edge_line("GOOD") + b"\n")
    assert refused.returncode == 2, refused.stderr
    assert f"line 1: JSON nested too deeply (more than {MAX_JSON_DEPTH} levels)" in refused.stderr
    assert "line 2" not in refused.stderr
    assert not queue.exists(), "nothing appended, the good line neither"

    # A queue that has lines keeps exactly them.
    write_queue(queue, [edge_line("EARLIER")])
    before = queue.read_bytes()
    refused = enqueue(config, tmp_path, nested_line(MAX_JSON_DEPTH + 1, "objects") + b"\n")
    assert refused.returncode == 2, refused.stderr
    assert "line 1: JSON nested too deeply" in refused.stderr
    assert queue.read_bytes() == before


async def test_a_too_deep_line_in_the_file_is_dead_lettered_malformed_at_once_not_retried(
    stores: TickContext,
) -> None:
    s = stores.settings
    too_deep = nested_line(MAX_JSON_DEPTH + 1, relationship="TOO_DEEP")
    write_queue(s.drain.lazy_edges_queue_path, [too_deep, edge_line("GOOD")])
    stats = await drain_queue(stores)
    assert (stats.succeeded, stats.skipped_malformed, stats.dead_lettered) == (1, 1, 1)
    assert stats.requeued == 0
    [dead] = dead_letters(s)
    assert dead["reason"] == MALFORMED and dead["attempts"] == 0, dead
    assert "nested too deeply" in dead["detail"]
    assert dead["line"].encode() == too_deep
    assert await edge_weight(stores.graph, "GOOD") == 1.0
    assert await read_edge(stores.graph, SOURCE, TARGET, "TOO_DEEP") is None
    assert not s.drain.lazy_edges_queue_path.exists() and not s.drain.draining_path.exists()
    assert await count_rows(stores.graph, "drain_requeued") == 0
    # Nothing comes round again.
    assert (await drain_queue(stores)).total_lines == 0
    assert len(dead_letters(s)) == 1


# ------------------------------------------------------------------------------------- weights


async def test_a_zero_weight_links_and_reinforces_as_the_default_weight(
    stores: TickContext,
) -> None:
    s = stores.settings
    zeros: dict[str, dict[str, Any]] = {"ZERO_INT": {"weight": 0}, "ZERO": {"weight": 0.0},
                                        "NEGATIVE_ZERO": {"weight": -0.0}}
    kinds = {"DEFAULT": {}, **zeros}
    assert b'"weight": -0.0' in edge_line("NEGATIVE_ZERO", weight=-0.0)

    # The first mention links at the default weight.
    assert enqueue_edges(s.drain.lazy_edges_queue_path,
                         [edge_line(rel, **extra) for rel, extra in kinds.items()]) == []
    assert (await drain_queue(stores)).succeeded == len(kinds)
    assert {rel: await edge_weight(stores.graph, rel) for rel in kinds} == dict.fromkeys(
        kinds, 1.0)

    # Each further mention reinforces as a default-weight line does (0.1 x 1.0 each).
    assert enqueue_edges(s.drain.lazy_edges_queue_path,
                         [edge_line(rel, **extra) for _ in range(3)
                          for rel, extra in kinds.items()]) == []
    assert (await drain_queue(stores)).succeeded == 3 * len(kinds)
    default = await edge_weight(stores.graph, "DEFAULT")
    assert default == pytest.approx(1.3)
    assert {rel: await edge_weight(stores.graph, rel) for rel in zeros} == dict.fromkeys(
        zeros, default)
    assert dead_letters(s) == []


BEYOND_LIMIT = [WEIGHT_LIMIT * 2, -WEIGHT_LIMIT * 2, 1e308]


async def test_a_weight_beyond_the_limit_is_refused_by_enqueue_and_malformed_in_the_file(
    tmp_path: Path, stores: TickContext,
) -> None:
    # `enqueue`, with its own data folder (the embedded store of `stores` is not its).
    command_dir = tmp_path / "command"
    command_dir.mkdir()
    config = write_config(command_dir)
    lines = [edge_line(f"BEYOND{i}", weight=w) for i, w in enumerate(BEYOND_LIMIT)]
    refused = enqueue(config, command_dir, b"\n".join([*lines, edge_line("GOOD")]) + b"\n")
    assert refused.returncode == 2, refused.stderr
    for number, weight in enumerate(BEYOND_LIMIT, start=1):
        assert f"line {number}: weight {weight!r} is out of range" in refused.stderr
    assert "line 4" not in refused.stderr
    assert not (command_dir / "data/memory-core/lazy-edges.jsonl").exists()

    # The same lines written straight into the file: dead-lettered malformed at once.
    s = stores.settings
    write_queue(s.drain.lazy_edges_queue_path, [*lines, edge_line("GOOD")])
    stats = await drain_queue(stores)
    assert (stats.succeeded, stats.skipped_malformed, stats.dead_lettered, stats.requeued) == (
        1, len(BEYOND_LIMIT), len(BEYOND_LIMIT), 0)
    dead = dead_letters(s)
    assert [(d["reason"], d["attempts"]) for d in dead] == [(MALFORMED, 0)] * len(BEYOND_LIMIT)
    assert sorted(d["line"].encode() for d in dead) == sorted(lines)
    assert all("out of range" in d["detail"] for d in dead), dead
    assert await edge_weight(stores.graph, "GOOD") == 1.0
    for i in range(len(BEYOND_LIMIT)):
        assert await read_edge(stores.graph, SOURCE, TARGET, f"BEYOND{i}") is None
    assert not s.drain.lazy_edges_queue_path.exists() and not s.drain.draining_path.exists()


async def test_ten_lines_of_the_most_negative_weight_leave_a_finite_edge(
    stores: TickContext,
) -> None:
    s = stores.settings
    assert enqueue_edges(s.drain.lazy_edges_queue_path,
                         [edge_line("NEGATIVE", weight=-WEIGHT_LIMIT)] * 10) == []
    stats = await drain_queue(stores)
    assert (stats.succeeded, stats.dead_lettered) == (10, 0)
    weight = await edge_weight(stores.graph, "NEGATIVE")
    assert math.isfinite(weight)
    # Each reinforcement adds -WEIGHT_LIMIT/10; the floor holds it at MIN_WEIGHT.
    assert MIN_WEIGHT <= weight <= MAX_WEIGHT
    assert weight == MIN_WEIGHT == -WEIGHT_LIMIT


_graph_numbers = itertools.count()
#: Any weight a line may carry, with the edges of the range, both zeros and the tiniest
#: magnitude drawn often.
weights = st.one_of(
    st.sampled_from([0.0, -0.0, WEIGHT_LIMIT, -WEIGHT_LIMIT, 5e-324, -5e-324, MAX_WEIGHT]),
    st.floats(min_value=-WEIGHT_LIMIT, max_value=WEIGHT_LIMIT, allow_nan=False),
)


@settings(max_examples=50, deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(sequence=st.lists(weights, min_size=1, max_size=25))
@example(sequence=[-WEIGHT_LIMIT] * 25)  # ten lines of -1e308 once left an edge at -Inf
@example(sequence=[WEIGHT_LIMIT] * 25)
@example(sequence=[0.0, -0.0, -WEIGHT_LIMIT, WEIGHT_LIMIT, -WEIGHT_LIMIT, -WEIGHT_LIMIT])
async def test_no_sequence_of_weights_gives_an_edge_a_non_finite_weight(
    tmp_path: Path, sequence: list[float]
) -> None:
    graph = await SqliteGraph.open(tmp_path / f"graph-{next(_graph_numbers)}.sqlite")
    try:
        await make_nodes(graph)
        for weight in sequence:
            async with graph.write() as tx:
                await link_edges(tx, [EdgeRow(SOURCE, TARGET, "R", weight)])
            stored = await edge_weight(graph, "R")
            assert math.isfinite(stored), (sequence, stored)
            # A short sequence could not reach ±Inf anyway: what makes every sequence, of any
            # length, stay finite is that each stored weight is back within the limit.
            assert -WEIGHT_LIMIT <= stored <= WEIGHT_LIMIT, (sequence, stored)
    finally:
        await graph.close()
