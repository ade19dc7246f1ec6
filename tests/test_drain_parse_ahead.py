"""Parse-ahead: the next batch is read and parsed while the current one is applied, and that
changes nothing a batch does. A stop drops the batch read ahead (nothing of it written, the
committed offset stays the last settled batch's); a failure while reading or parsing ahead is
the next batch's, met when its turn comes; a split batch's halves carry their parsed lines;
bytes a bare producer writes after the read ahead met the end of the file are handed back, not
lost. Real queue files, real SQLite, real embedded Chroma; the fakes only record calls or
inject a fault."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import pytest

import core.jobs.drain as drain
from core.jobs.context import TickContext
from core.jobs.drain import QueueFileError, drain_queue
from core.rules.config import Settings
from core.rules.drain_plan import Parsed, parse_batch
from core.rules.queue_lines import ReadLine
from core.stores import drain_state
from core.stores.chroma import VectorStore
from core.stores.graph import upsert_node
from core.stores.queue_files import QueueReader, read_generation
from core.stores.sqlite import GraphDB
from tests.support import read_edge


def edge(rel: str) -> bytes:
    return json.dumps({"source": "CONCEPT:a", "target": "CONCEPT:b",
                       "relationship": rel}).encode()


def write(path: Path, lines: Sequence[bytes]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("ab") as f:
        f.write(b"".join(x + b"\n" for x in lines))


async def applied(stores: TickContext, count: int) -> list[bool]:
    """Whether each of the edges R0..R<count-1> is in the graph."""
    return [await read_edge(stores.graph, "CONCEPT:a", "CONCEPT:b", f"R{i}") is not None
            for i in range(count)]


@pytest.fixture
async def stores(graph: GraphDB, vectors: VectorStore, settings: Settings
                 ) -> AsyncIterator[TickContext]:
    await upsert_node(graph, "CONCEPT:a", "CONCEPT")
    await upsert_node(graph, "CONCEPT:b", "CONCEPT")
    yield TickContext(settings, graph, vectors)


@pytest.fixture
def parsed_log(monkeypatch: pytest.MonkeyPatch) -> list[bytes]:
    """Every line the drain parses, in the order it parses them (batches of two lines)."""
    monkeypatch.setattr(drain, "DRAIN_BATCH_LINES", 2)
    log: list[bytes] = []

    def recording(lines: Sequence[ReadLine]) -> list[Parsed]:
        log.extend(read.raw for read in lines)
        return parse_batch(lines)

    monkeypatch.setattr(drain, "parse_batch", recording)
    return log


def at_each_write(monkeypatch: pytest.MonkeyPatch, then: Any) -> None:
    """Call `then(drainer, write_number)` after each batch's write (its commit)."""
    real_write = drain._Drainer._write
    calls = {"n": 0}

    async def write_then(self: Any, *args: Any, **kwargs: Any) -> None:
        await real_write(self, *args, **kwargs)
        calls["n"] += 1
        then(self, calls["n"])

    monkeypatch.setattr(drain._Drainer, "_write", write_then)


async def test_the_next_batch_is_parsed_while_this_one_is_applied_and_each_line_once(
    stores: TickContext, parsed_log: list[bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    write(stores.settings.lazy_edges_queue_path, [edge(f"R{i}") for i in range(6)])
    parsed_at_write: list[int] = []
    at_each_write(monkeypatch, lambda _, n: parsed_at_write.append(len(parsed_log)))
    stats = await drain_queue(stores)
    assert stats.succeeded == 6 and await applied(stores, 6) == [True] * 6
    assert parsed_at_write[0] == 4, "the second batch was parsed before the first committed"
    assert sorted(parsed_log) == sorted(edge(f"R{i}") for i in range(6)), "each line once"


async def test_a_stop_drops_the_batch_read_ahead_and_the_next_start_resumes_after_the_commit(
    stores: TickContext, parsed_log: list[bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    s = stores.settings
    write(s.lazy_edges_queue_path, [edge(f"R{i}") for i in range(6)])
    at_each_write(monkeypatch, lambda *_: stores.control.request_stop())
    stats = await drain_queue(stores)
    assert stats.interrupted and stats.succeeded == 2
    assert len(parsed_log) == 4, "the second batch had been read and parsed ahead"
    assert await applied(stores, 6) == [True, True] + [False] * 4, "nothing of it written"
    generation = read_generation(s.draining_path)
    assert generation is not None
    committed, _ = await drain_state.progress(stores.graph, generation.id)
    assert committed == 2 * (len(edge("R0")) + 1), "the committed offset is the first batch's"
    monkeypatch.undo()
    stats = await drain_queue(TickContext(s, stores.graph, stores.vectors))
    assert stats.orphan_recovered and stats.succeeded == 4
    assert await applied(stores, 6) == [True] * 6
    rows = await stores.graph.query("SELECT COUNT(*), MAX(weight) FROM edges")
    assert tuple(rows[0]) == (6, 1.0), "every line applied exactly once"


async def test_a_parse_failing_ahead_is_the_next_batchs_and_isolates_its_line_only(
    stores: TickContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(drain, "DRAIN_BATCH_LINES", 2)

    def parser_fails_on_r3(lines: Sequence[ReadLine]) -> list[Parsed]:
        if any(b'"R3"' in read.raw for read in lines):
            raise RecursionError("the parser itself fails on this line")
        return parse_batch(lines)

    monkeypatch.setattr(drain, "parse_batch", parser_fails_on_r3)
    s = stores.settings
    write(s.lazy_edges_queue_path, [edge(f"R{i}") for i in range(6)])
    stats = await drain_queue(stores)
    assert (stats.succeeded, stats.isolated) == (5, 1)
    assert await applied(stores, 6) == [True, True, True, False, True, True]
    [dead] = [json.loads(x) for x in s.dead_letter_path.read_bytes().splitlines()]
    assert dead["reason"] == "unprocessable" and "RecursionError" in dead["detail"]


async def test_a_read_failing_ahead_fails_the_tick_after_this_batch_commits(
    stores: TickContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(drain, "DRAIN_BATCH_LINES", 2)
    real_read = QueueReader.read_lines
    reads = {"n": 0}

    def second_read_fails(self: QueueReader, *args: Any, **kwargs: Any) -> list[ReadLine]:
        reads["n"] += 1
        if reads["n"] == 2:
            raise OSError(5, "Input/output error")
        return real_read(self, *args, **kwargs)

    monkeypatch.setattr(QueueReader, "read_lines", second_read_fails)
    s = stores.settings
    write(s.lazy_edges_queue_path, [edge(f"R{i}") for i in range(4)])
    with pytest.raises(QueueFileError):
        await drain_queue(stores)
    assert await applied(stores, 4) == [True, True, False, False], "the first batch committed"
    monkeypatch.undo()
    stats = await drain_queue(stores)
    assert stats.orphan_recovered and stats.succeeded == 2
    rows = await stores.graph.query("SELECT COUNT(*), MAX(weight) FROM edges")
    assert tuple(rows[0]) == (4, 1.0)


async def test_a_split_batch_carries_its_parsed_lines_to_its_halves(
    stores: TickContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    s = stores.settings
    conn = sqlite3.connect(s.graph_db_path)
    conn.execute("CREATE TRIGGER poisoned BEFORE INSERT ON edges WHEN NEW.relationship = 'R13' "
                 "BEGIN SELECT RAISE(ABORT, 'this row is poisoned'); END")
    conn.commit()
    conn.close()
    parsed: list[int] = []

    def counting(lines: Sequence[ReadLine]) -> list[Parsed]:
        parsed.append(len(lines))
        return parse_batch(lines)

    monkeypatch.setattr(drain, "parse_batch", counting)
    lines = [edge(f"R{i}") for i in range(30)]
    lines[7:7] = [b"", b"   "]  # blank lines: read, never parsed into a line
    write(s.lazy_edges_queue_path, lines)
    stats = await drain_queue(stores)
    assert (stats.succeeded, stats.isolated) == (29, 1)
    assert await applied(stores, 30) == [i != 13 for i in range(30)]
    assert sum(parsed) == 32, "parsed once, ahead; the halves reuse it"


async def test_bytes_written_after_the_read_ahead_met_the_end_are_handed_back(
    stores: TickContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(drain, "DRAIN_BATCH_LINES", 2)
    s = stores.settings
    write(s.lazy_edges_queue_path, [edge("R0"), edge("R1")])

    def producer_appends(drainer: Any, n: int) -> None:
        if n == 1:  # a producer that opened the file before the rename writes now
            with s.draining_path.open("ab") as f:
                f.write(edge("LATE") + b"\n" + edge("TAIL")[:20])

    at_each_write(monkeypatch, producer_appends)
    await drain_queue(stores)
    queued = s.lazy_edges_queue_path.read_bytes() if s.lazy_edges_queue_path.exists() else b""
    dead = s.dead_letter_path.read_bytes() if s.dead_letter_path.exists() else b""
    late = await read_edge(stores.graph, "CONCEPT:a", "CONCEPT:b", "LATE")
    assert (late is not None) != (edge("LATE") in queued), "applied or handed back, once"
    tail = edge("TAIL")[:20]
    assert (tail in queued) != (json.dumps(tail.decode())[1:-1].encode() in dead), (
        "the unfinished line is handed back or dead-lettered, once")
