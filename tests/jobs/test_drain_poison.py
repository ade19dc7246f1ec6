"""No line can stop the queue: hostile bytes are dead-lettered and the lines after them apply in
the same tick; a failure nobody foresaw is isolated to its line; an outage is told apart and
spends nothing; every `properties` value in SQLite stays strict JSON. Real files, real SQLite,
real embedded Chroma; the only fakes inject a Chroma fault the real store cannot produce."""

from __future__ import annotations

import json
import math
import sqlite3
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from chromadb.errors import InternalError

from core.base.chroma import VectorStore
from core.base.config.config import Settings
from core.base.rules.errors import StoreUnavailable
from core.base.runtime.context import TickContext
from core.base.state.graph import existing_ids, upsert_node
from core.base.state.graph_db import GraphDB
from core.base.state.state import open_graph
from core.drain.queue_drain import drain_queue
from tests.support import read_edge, seed


def edge(rel: str, **extra: Any) -> bytes:
    return json.dumps({"source": "CONCEPT:a", "target": "CONCEPT:b", "relationship": rel,
                       **extra}).encode()


def write(path: Path, lines: list[bytes]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("ab") as f:
        f.write(b"".join(x + b"\n" for x in lines))


def dead_letters(settings: Settings) -> list[dict[str, Any]]:
    if not settings.drain.dead_letter_path.exists():
        return []
    return [json.loads(x) for x in settings.drain.dead_letter_path.read_bytes().splitlines()]


@pytest.fixture
async def stores(graph: GraphDB, vectors: VectorStore, settings: Settings
                 ) -> AsyncIterator[TickContext]:
    await seed(vectors, settings.chroma.memory_collection,
               [(f"m{i}", {"sessionId": "s1", "createdAt": i}) for i in range(5)])
    await seed(vectors, settings.chroma.summary_collection, [("sum-1", {"sessionId": "s1"})])
    await upsert_node(graph, "CONCEPT:a", "CONCEPT")
    await upsert_node(graph, "CONCEPT:b", "CONCEPT")
    yield TickContext(settings, graph, vectors)


PREFIX = b'{"source": "CONCEPT:a", "target": "CONCEPT:b", '
POISON: dict[str, bytes] = {
    "lone high surrogate in a property":
        PREFIX + rb'"relationship": "R", "justification": "a\ud800b"}',
    "lone low surrogate in the relationship": PREFIX + rb'"relationship": "R\udc00"}',
    "lone surrogate in an id":
        rb'{"source": "CONCEPT:\ud800", "target": "CONCEPT:b", "relationship": "R"}',
    "lone surrogate in a key": PREFIX + rb'"relationship": "R", "\ud800": 1}',
    "reversed surrogate pair": PREFIX + rb'"relationship": "R", "j": "\udc00\ud800"}',
    "1e999 in a property": PREFIX + b'"relationship": "R", "justification": 1e999}',
    "-1e999 deep in a property": PREFIX + b'"relationship": "R", "p": {"q": [1, -1e999]}}',
    "1e999 weight": PREFIX + b'"relationship": "R", "weight": 1e999}',
    "a weight past the limit": PREFIX + b'"relationship": "R", "weight": 18446744073709551616}',
    "an integer past a double": PREFIX + b'"relationship": "R", "p": 1' + b"0" * 400 + b"}",
    "NaN in a property": PREFIX + b'"relationship": "R", "p": NaN}',
    "Infinity in an array": PREFIX + b'"relationship": "R", "p": [Infinity]}',
    "-Infinity weight": PREFIX + b'"relationship": "R", "weight": -Infinity}',
    "raw NUL in a string": PREFIX + b'"relationship": "R", "p": "a\x00b"}',
    "escaped NUL in an id":
        rb'{"source": "CONCEPT:a\u0000", "target": "CONCEPT:b", "relationship": "R"}',
    "NUL bytes alone": b"\x00\x00\x00",
    "deep nesting": PREFIX + b'"relationship": "R", "p": ' + b"[" * 2000 + b"]" * 2000 + b"}",
    "invalid UTF-8 in a string": PREFIX + b'"relationship": "R", "p": "\xff\xfe"}',
    "a byte-order mark": b"\xef\xbb\xbf" + edge("R"),
    "a 2 MiB line": PREFIX + b'"relationship": "R", "p": "' + b"x" * (2 << 20) + b'"}',
}


@pytest.mark.parametrize("poison", list(POISON.values()), ids=list(POISON))
async def test_a_poison_line_is_dead_lettered_and_the_lines_after_it_apply_in_the_same_tick(
    stores: TickContext, poison: bytes
) -> None:
    s = stores.settings
    write(s.drain.lazy_edges_queue_path, [edge("BEFORE"), poison, edge("AFTER")])
    stats = await drain_queue(stores)
    assert (stats.succeeded, stats.skipped_malformed, stats.dead_lettered) == (2, 1, 1)
    assert await read_edge(stores.graph, "CONCEPT:a", "CONCEPT:b", "AFTER") is not None
    [dead] = dead_letters(s)
    assert dead["reason"] == "malformed" and dead["detail"], dead
    assert not s.drain.lazy_edges_queue_path.exists() and not s.drain.draining_path.exists()
    # The next tick has nothing left to trip on.
    assert (await drain_queue(stores)).total_lines == 0


def strict_json(text: str) -> Any:
    """The strictest reading: RFC 8259 only, every number finite."""

    def refuse(name: str) -> Any:
        raise ValueError(f"{name} is not JSON")

    def finite(number: str) -> float:
        value = float(number)
        if not math.isfinite(value):
            raise ValueError(f"{number} overflows")
        return value

    return json.loads(text, parse_constant=refuse, parse_float=finite)


def every_properties_value(path: Path) -> list[Any]:
    conn = sqlite3.connect(path)
    try:
        rows = conn.execute("SELECT properties FROM nodes UNION ALL "
                            "SELECT properties FROM edges").fetchall()
    finally:
        conn.close()
    return [strict_json(text) for (text,) in rows]


async def test_every_properties_value_stays_strict_json_after_a_hostile_queue(
    stores: TickContext,
) -> None:
    s = stores.settings
    odd_but_valid = [
        edge("V1", p=2**63 + 1, q=-(2**63), big=1e308, tiny=5e-324),
        edge("V2", text="NUL \u0000 tab \t quote \" backslash \\ emoji \U0001F600 \u2028"),
        edge("V3", nested={"a": [{"b": [None, True, False, 0.5]}]}, empty={}, list=[]),
        b'{"source": "CONCEPT:a", "target": "CONCEPT:b", "relationship": "V4", "k": 1,'
        b' "k": "last wins", "\\ud83d\\ude00": "pair"}',
        edge("V1", p="merged into the same edge"),
        edge("V5", target_again="memory", weight=10**6),
    ]
    write(s.drain.lazy_edges_queue_path, [*odd_but_valid, *POISON.values(),
                                    edge("V6").replace(b"CONCEPT:b", b"MEMORY:m1")])
    stats = await drain_queue(stores)
    assert stats.succeeded == len(odd_but_valid) + 1
    assert stats.skipped_malformed == len(POISON)
    values = every_properties_value(s.state.graph_db_path)
    assert len(values) >= 8 and all(isinstance(v, dict) for v in values)
    v1 = await read_edge(stores.graph, "CONCEPT:a", "CONCEPT:b", "V1")
    assert v1 is not None and v1.properties["p"] == "merged into the same edge"
    assert v1.properties["big"] == 1e308 and v1.weight == pytest.approx(1.1)


async def test_an_edge_an_earlier_version_stored_as_invalid_json_is_healed_not_stuck(
    stores: TickContext,
) -> None:
    s = stores.settings
    conn = sqlite3.connect(s.state.graph_db_path)
    conn.execute("INSERT INTO edges VALUES ('CONCEPT:a', 'CONCEPT:b', 'R', 1.0, "
                 "'{\"x\":Infinity}')")
    conn.execute("UPDATE nodes SET properties = '{\"y\":NaN}' WHERE id = 'CONCEPT:b'")
    conn.commit()
    conn.close()
    write(s.drain.lazy_edges_queue_path, [edge("R", justification="after")])
    stats = await drain_queue(stores)
    assert stats.succeeded == 1
    await upsert_node(stores.graph, "CONCEPT:b", "CONCEPT", {"z": 1})
    assert all(isinstance(v, dict) for v in every_properties_value(s.state.graph_db_path))
    stored = await read_edge(stores.graph, "CONCEPT:a", "CONCEPT:b", "R")
    assert stored is not None and stored.properties == {"justification": "after"}


def poison_trigger(path: Path) -> None:
    """A row SQLite itself refuses, for a reason the drainer cannot know in advance."""
    conn = sqlite3.connect(path)
    conn.execute("CREATE TRIGGER poisoned BEFORE INSERT ON edges "
                 "WHEN NEW.relationship = 'POISON' "
                 "BEGIN SELECT RAISE(ABORT, 'this row is poisoned'); END")
    conn.commit()
    conn.close()


async def test_a_line_failing_for_a_reason_nobody_foresaw_is_isolated_and_the_rest_apply(
    stores: TickContext,
) -> None:
    s = stores.settings
    poison_trigger(s.state.graph_db_path)
    lines = [edge(f"R{i}") for i in range(40)]
    lines[23] = edge("POISON", note="valid JSON, refused by the store")
    write(s.drain.lazy_edges_queue_path, lines)
    stats = await drain_queue(stores)
    assert (stats.succeeded, stats.isolated, stats.dead_lettered) == (39, 1, 1)
    [dead] = dead_letters(s)
    assert dead["reason"] == "unprocessable" and "this row is poisoned" in dead["detail"]
    assert json.loads(dead["line"])["relationship"] == "POISON"
    rows = await stores.graph.query("SELECT COUNT(*), MAX(weight) FROM edges")
    assert tuple(rows[0]) == (39, 1.0), "every other line applied exactly once"
    assert not s.drain.draining_path.exists()


def fail_gets_naming(vectors: VectorStore, monkeypatch: pytest.MonkeyPatch,
                     poisoned_id: str | None, error: type[Exception] = ValueError) -> None:
    """A Chroma `get` that fails when it asks for `poisoned_id`, or every `get` when None (the
    store is down). A ValueError is how the client refuses a request for its data."""
    real = vectors._call_on_collection

    def failing(name: str, method: str, kwargs: Mapping[str, Any]) -> Any:
        if method == "get" and (poisoned_id is None or poisoned_id in (kwargs.get("ids") or ())):
            raise error(f"injected: the request fails ({poisoned_id})")
        return real(name, method, kwargs)

    monkeypatch.setattr(vectors, "_call_on_collection", failing)


async def test_a_chroma_request_failing_on_one_lines_data_isolates_that_line_only(
    stores: TickContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    s = stores.settings
    fail_gets_naming(stores.vectors, monkeypatch, "poisoned")
    lines = [edge(f"R{i}").replace(b"CONCEPT:b", f"memory:m{i % 5}".encode())
             for i in range(10)]
    lines.insert(6, edge("BAD").replace(b"CONCEPT:b", b"memory:poisoned"))
    write(s.drain.lazy_edges_queue_path, lines)
    stats = await drain_queue(stores)
    assert (stats.succeeded, stats.isolated, stats.requeued) == (10, 1, 0)
    [dead] = dead_letters(s)
    assert dead["reason"] == "unprocessable" and "memory:poisoned" in dead["line"]
    assert await existing_ids(stores.graph, [f"memory:m{i}" for i in range(5)]) == {
        f"memory:m{i}" for i in range(5)}


@pytest.mark.parametrize("error", [ConnectionError, TimeoutError, InternalError])
async def test_a_server_error_on_one_request_is_an_outage_even_when_the_store_answers_others(
    stores: TickContext, monkeypatch: pytest.MonkeyPatch, error: type[Exception]
) -> None:
    s = stores.settings
    fail_gets_naming(stores.vectors, monkeypatch, "flaky", error)
    write(s.drain.lazy_edges_queue_path, [edge("R1").replace(b"CONCEPT:b", b"memory:flaky"),
                                    edge("R2")])
    with pytest.raises(StoreUnavailable):
        await drain_queue(stores)
    assert dead_letters(s) == [], "never dead-lettered for the store's trouble"
    assert s.drain.draining_path.exists() and b"_drain" not in s.drain.draining_path.read_bytes()


async def test_a_chroma_outage_fails_the_tick_dead_letters_nothing_and_spends_no_attempt(
    stores: TickContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    s = stores.settings
    write(s.drain.lazy_edges_queue_path, [edge(f"R{i}").replace(b"CONCEPT:b", b"memory:m1")
                                    for i in range(6)])
    fail_gets_naming(stores.vectors, monkeypatch, None)
    for _ in range(3):
        with pytest.raises(StoreUnavailable):
            await drain_queue(stores)
    assert dead_letters(s) == [] and not s.drain.lazy_edges_queue_path.exists()
    assert b"_drain" not in s.drain.draining_path.read_bytes(), "no attempt was spent"
    monkeypatch.undo()
    stats = await drain_queue(stores)
    assert stats.orphan_recovered and stats.succeeded == 6 and stats.isolated == 0


async def test_a_locked_database_fails_the_tick_and_isolates_nothing(
    graph: GraphDB, vectors: VectorStore, settings: Settings
) -> None:
    slow = await open_graph(settings.state, busy_timeout_ms=100)
    await upsert_node(slow, "CONCEPT:a", "CONCEPT")
    await upsert_node(slow, "CONCEPT:b", "CONCEPT")
    stores = TickContext(settings, slow, vectors)
    write(settings.drain.lazy_edges_queue_path, [edge(f"R{i}") for i in range(5)])
    blocker = sqlite3.connect(settings.state.graph_db_path, isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")
    try:
        for _ in range(2):
            with pytest.raises(StoreUnavailable, match="locked"):
                await drain_queue(stores)
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()
    assert dead_letters(settings) == []
    stats = await drain_queue(stores)
    assert stats.succeeded == 5 and stats.isolated == 0
    await slow.close()
