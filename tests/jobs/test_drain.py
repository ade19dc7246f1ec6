"""The lazy-edge drainer on real queue files, a real SQLite graph and a real embedded Chroma."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

import core.drain.batches as drain_batches
import core.drain.queue_drain as drain_tick
from core.base.chroma import VectorStore
from core.base.config.config import Settings
from core.base.rules.errors import LockHeld, StoreUnavailable
from core.base.runtime.context import TickContext
from core.base.state.graph import existing_ids, upsert_node
from core.base.state.graph_db import GraphDB
from core.drain.queue_drain import drain_queue, drainer_lock
from core.drain.rules.drain_plan import DrainStats
from core.drain.rules.queue_lines import ReadLine
from core.drain.stores.queue_files import append_locked, enqueue_edges, sidecar_path
from core.drain.stores.queue_reader import QueueReader
from core.suite.tick import open_context
from tests.support import (
    count_chroma_calls,
    count_commits,
    count_rows,
    make_settings,
    patch_target,
    read_edge,
    seed,
)


def line(source: str, target: str, rel: str = "MENTIONED_IN", **extra: Any) -> bytes:
    return json.dumps({"source": source, "target": target, "relationship": rel, **extra}).encode()


def numbered_lines(prefix: str, count: int) -> list[bytes]:
    """`count` lines between the two concepts, relationships `<prefix>0`, `<prefix>1`, ..."""
    return [line("CONCEPT:a", "CONCEPT:b", f"{prefix}{i}") for i in range(count)]


def write_queue(path: Path, lines: list[bytes], *, raw_tail: bytes = b"") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("ab") as f:
        f.write(b"".join(x + b"\n" for x in lines) + raw_tail)


def dead_letters(settings: Settings) -> list[dict[str, Any]]:
    if not settings.drain.dead_letter_path.exists():
        return []
    return [json.loads(x) for x in settings.drain.dead_letter_path.read_text().splitlines()]


def queued(settings: Settings) -> list[dict[str, Any]]:
    if not settings.drain.lazy_edges_queue_path.exists():
        return []
    return [json.loads(x) for x in settings.drain.lazy_edges_queue_path.read_text().splitlines()]


@pytest.fixture
async def stores(
    graph: GraphDB, vectors: VectorStore, settings: Settings
) -> AsyncIterator[TickContext]:
    """A graph with two concept nodes and one session, and Chroma with memories m1..m3."""
    await seed(vectors, settings.chroma.memory_collection,
               [(f"m{i}", {"sessionId": "s1", "createdAt": i, "userId": "u"}) for i in (1, 2, 3)])
    await seed(vectors, settings.chroma.summary_collection,
               [("sum-1", {"sessionId": "s1", "title": "S1", "createdAt": 1})])
    await upsert_node(graph, "CONCEPT:a", "CONCEPT")
    await upsert_node(graph, "CONCEPT:b", "CONCEPT")
    yield TickContext(settings, graph, vectors)


async def test_no_queue_file_is_a_quiet_tick(stores: TickContext) -> None:
    stats = await drain_queue(stores)
    assert stats.total_lines == 0 and not stats.queue_rotated
    assert not stores.settings.drain.draining_path.exists()


async def test_two_valid_lines_become_edges_and_the_queue_is_gone(stores: TickContext) -> None:
    s = stores.settings
    write_queue(s.drain.lazy_edges_queue_path,
                [line("CONCEPT:a", "CONCEPT:b"), line("CONCEPT:b", "memory:m1", "REFERENCED_BY")])
    stats = await drain_queue(stores)
    assert (stats.total_lines, stats.succeeded, stats.failed) == (2, 2, 0)
    assert stats.queue_rotated
    assert await read_edge(stores.graph, "CONCEPT:a", "CONCEPT:b", "MENTIONED_IN") is not None
    assert await read_edge(stores.graph, "CONCEPT:b", "memory:m1", "REFERENCED_BY") is not None
    assert await read_edge(stores.graph, "memory:m1", "session:s1", "ORIGINATES_IN") is not None
    assert not s.drain.lazy_edges_queue_path.exists() and not s.drain.draining_path.exists()


async def test_only_the_unresolvable_edge_stays_queued(stores: TickContext) -> None:
    s = stores.settings
    write_queue(s.drain.lazy_edges_queue_path,
                [line("CONCEPT:a", "memory:m2"), line("CONCEPT:a", "memory:ghost")])
    stats = await drain_queue(stores)
    assert (stats.succeeded, stats.failed, stats.requeued) == (1, 1, 1)
    left = queued(s)
    assert len(left) == 1 and left[0]["target"] == "memory:ghost"
    assert left[0]["_drain"]["attempts"] == 1
    assert left[0]["_drain"]["lastReason"] == "chroma-row-not-found"


async def test_malformed_lines_are_dead_lettered_and_valid_ones_still_apply(
    stores: TickContext,
) -> None:
    s = stores.settings
    bad = [b"{not json", b"null", b"123", b"[]", b'"a string"', b"\xff\xfe",
           b'{"target": "CONCEPT:b", "relationship": "R"}',
           b'{"source": "CONCEPT:a", "relationship": "R"}',
           b'{"source": "CONCEPT:a", "target": "CONCEPT:b"}',
           b'{"source": "", "target": "CONCEPT:b", "relationship": "R"}',
           b'{"source": "CONCEPT:a", "target": "CONCEPT:b", "relationship": "R", "weight": "x"}',
           b'{"source": "CONCEPT:a", "target": "CONCEPT:b", "relationship": "R", "weight": NaN}',
           line("CONCEPT:a", "x" * 1025)]
    write_queue(s.drain.lazy_edges_queue_path,
                [line("CONCEPT:a", "CONCEPT:b"), *bad, line("CONCEPT:b", "CONCEPT:a")])
    stats = await drain_queue(stores)
    assert stats.succeeded == 2
    assert stats.skipped_malformed == len(bad) == stats.dead_lettered
    dead = dead_letters(s)
    assert [d["reason"] for d in dead] == ["malformed"] * len(bad)
    details = " | ".join(d["detail"] for d in dead)
    for expected in ("invalid JSON", "got null", "got number", "got array", "got string",
                     "invalid UTF-8", "missing source", "missing target",
                     "missing relationship", "source is empty", "weight must be a number",
                     "limit 1024"):
        assert expected in details
    assert any("lineBase64" in d for d in dead), "undecodable bytes are kept, base64-encoded"
    assert not s.drain.lazy_edges_queue_path.exists(), "malformed lines are never retried"


async def test_blank_lines_are_ignored(stores: TickContext) -> None:
    write_queue(stores.settings.drain.lazy_edges_queue_path,
                [b"", line("CONCEPT:a", "CONCEPT:b"), b"   ", b"\r"])
    stats = await drain_queue(stores)
    assert (stats.total_lines, stats.succeeded, stats.dead_lettered) == (1, 1, 0)


async def test_uppercase_targets_are_stored_lowercase_and_extra_keys_kept(
    stores: TickContext,
) -> None:
    write_queue(stores.settings.drain.lazy_edges_queue_path,
                [line("CONCEPT:a", "MEMORY:m3", justification="said so", timestamp=123,
                      weight=2.5)])
    await drain_queue(stores)
    edge = await read_edge(stores.graph, "CONCEPT:a", "memory:m3", "MENTIONED_IN")
    assert edge is not None and edge.target == "memory:m3" and edge.weight == 2.5
    assert edge.properties == {"justification": "said so", "timestamp": 123}
    assert await existing_ids(stores.graph, ["MEMORY:m3"]) == set()


async def test_a_leftover_draining_file_is_drained_first_then_the_queue(
    stores: TickContext,
) -> None:
    s = stores.settings
    write_queue(s.drain.draining_path, [line("CONCEPT:a", "CONCEPT:b", "FIRST")])
    write_queue(s.drain.lazy_edges_queue_path, [line("CONCEPT:a", "CONCEPT:b", "SECOND")])
    stats = await drain_queue(stores)
    assert stats.orphan_recovered and stats.queue_rotated and stats.succeeded == 2
    rows = await stores.graph.query("SELECT relationship FROM edges ORDER BY rowid")
    assert [r[0] for r in rows] == ["FIRST", "SECOND"]
    assert not s.drain.draining_path.exists()


class SimulatedCrash(BaseException):
    """Stands for SIGKILL: not an Exception, so no handler of the drainer takes it."""


def crash_on(monkeypatch: pytest.MonkeyPatch, module: ModuleType, name: str, *,
             after: bool = False, path_suffix: str | None = None) -> None:
    """Make `<module>.<name>`, a function the drain's `module` calls, die (before or after
    doing its work), optionally only for calls whose first argument is a path ending in
    `path_suffix`."""
    real = patch_target(module, name)

    def dying(*args: Any, **kwargs: Any) -> Any:
        if path_suffix is not None and not str(args[0]).endswith(path_suffix):
            return real(*args, **kwargs)
        if after:
            real(*args, **kwargs)
        raise SimulatedCrash(name)

    monkeypatch.setattr(module, name, dying)


async def crashing_drain(stores: TickContext, monkeypatch: pytest.MonkeyPatch,
                         module: ModuleType, name: str, **how: Any) -> None:
    crash_on(monkeypatch, module, name, **how)
    with pytest.raises(SimulatedCrash):
        await drain_queue(stores)
    monkeypatch.undo()


async def weight(stores: TickContext, rel: str = "MENTIONED_IN") -> float | None:
    edge = await read_edge(stores.graph, "CONCEPT:a", "CONCEPT:b", rel)
    return None if edge is None else edge.weight


async def test_the_same_line_appended_in_three_ticks_reinforces_the_edge_each_time(
    stores: TickContext,
) -> None:
    same = line("CONCEPT:a", "CONCEPT:b", justification="again")
    weights = []
    for _ in range(3):
        append_locked(stores.settings.drain.lazy_edges_queue_path, [same])
        stats = await drain_queue(stores)
        assert (stats.succeeded, stats.replayed, stats.duplicates) == (1, 0, 0)
        weights.append(await weight(stores))
    assert weights == [1.0, pytest.approx(1.1), pytest.approx(1.2)]


async def test_the_same_line_twice_in_one_batch_counts_twice(stores: TickContext) -> None:
    same = line("CONCEPT:a", "CONCEPT:b")
    write_queue(stores.settings.drain.lazy_edges_queue_path, [same, same])
    stats = await drain_queue(stores)
    assert stats.succeeded == 2
    assert await weight(stores) == pytest.approx(1.1)


async def test_a_crash_after_the_commit_replays_nothing_on_restart(
    stores: TickContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    s = stores.settings
    same = line("CONCEPT:a", "CONCEPT:b", justification="once")
    write_queue(s.drain.lazy_edges_queue_path, [same, same])
    # Dies after the batch committed, before `.draining` is removed.
    await crashing_drain(stores, monkeypatch, drain_tick, "hand_back_late_bytes")
    assert s.drain.draining_path.exists()
    stats = await drain_queue(stores)
    assert stats.orphan_recovered and stats.total_lines == 0 and stats.succeeded == 0
    assert await weight(stores) == pytest.approx(1.1)
    assert not s.drain.draining_path.exists() and not sidecar_path(s.drain.draining_path).exists()


async def test_a_crash_before_the_commit_applies_the_batch_once_on_restart(
    stores: TickContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    s = stores.settings
    write_queue(s.drain.lazy_edges_queue_path, [line("CONCEPT:a", "CONCEPT:b")] * 3)
    monkeypatch.setattr(drain_tick, "DRAIN_BATCH_LINES", 2)
    patch_target(drain_tick, "DRAIN_BATCH_LINES")
    real_write = patch_target(drain_batches.BatchSettler, "_write")
    calls = {"n": 0}

    async def dies_on_second_batch(self: Any, *args: Any, **kwargs: Any) -> None:
        calls["n"] += 1
        if calls["n"] == 2:
            raise SimulatedCrash("before the second commit")
        await real_write(self, *args, **kwargs)

    monkeypatch.setattr(drain_batches.BatchSettler, "_write", dies_on_second_batch)
    with pytest.raises(SimulatedCrash):
        await drain_queue(stores)
    assert await weight(stores) == pytest.approx(1.1), "the first batch (2 lines) committed"
    monkeypatch.setattr(drain_batches.BatchSettler, "_write", real_write)
    stats = await drain_queue(stores)
    assert stats.orphan_recovered and stats.total_lines == 1
    assert await weight(stores) == pytest.approx(1.2)


async def test_a_crash_after_the_dead_letters_never_writes_a_second_record(
    stores: TickContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    s = stores.settings
    write_queue(s.drain.lazy_edges_queue_path, [b"{bad", b"{bad", line("CONCEPT:a", "CONCEPT:b")])
    await crashing_drain(stores, monkeypatch, drain_batches, "append_locked", after=True,
                         path_suffix=".dead.jsonl")
    assert len(dead_letters(s)) == 2 and await weight(stores) is None
    stats = await drain_queue(stores)
    dead = dead_letters(s)
    assert len(dead) == 2 and len({d["readAt"] for d in dead}) == 2
    assert stats.dead_lettered == 2 and stats.succeeded == 1
    assert await weight(stores) == 1.0


async def test_a_crash_after_requeueing_leaves_a_copy_that_is_recognized_and_skipped(
    stores: TickContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    s = stores.settings
    write_queue(s.drain.lazy_edges_queue_path, [line("CONCEPT:a", "memory:late")])
    await crashing_drain(stores, monkeypatch, drain_batches, "append_locked", after=True,
                         path_suffix="lazy-edges.jsonl")
    assert len(queued(s)) == 1, "the re-queued copy was written, the commit was not"
    stats = await drain_queue(stores)  # the leftover re-queues it again, then the queue
    assert stats.requeued == 1 and stats.deferred == 1 and stats.duplicates == 1
    [left] = queued(s)
    assert left["_drain"]["attempts"] == 1
    await seed(stores.vectors, s.chroma.memory_collection, [("late", {"sessionId": "s1"})])
    stats = await drain_queue(stores)
    assert stats.succeeded == 1
    edge = await read_edge(stores.graph, "CONCEPT:a", "memory:late", "MENTIONED_IN")
    assert edge is not None and edge.weight == 1.0
    assert await count_rows(stores.graph, "drain_requeued") == 0, "the token was used up"


async def test_a_dead_letter_fed_back_through_enqueue_is_a_new_line_and_applies(
    graph: GraphDB, vectors: VectorStore, tmp_path: Path
) -> None:
    settings = make_settings(tmp_path, lazyEdgeMaxAttempts=2)
    await upsert_node(graph, "CONCEPT:a", "CONCEPT")
    stores = TickContext(settings, graph, vectors)
    await seed(vectors, settings.chroma.memory_collection, [("m0", {"sessionId": "s0"})])
    await seed(vectors, settings.chroma.summary_collection, [("sum0", {"sessionId": "s0"})])
    append_locked(settings.drain.lazy_edges_queue_path, [line("CONCEPT:a", "memory:late")])
    await drain_queue(stores)
    requeued_copy = settings.drain.lazy_edges_queue_path.read_bytes().strip()
    assert b'"_drain"' in requeued_copy
    await drain_queue(stores)
    [dead] = dead_letters(settings)
    assert dead["attempts"] == 2 and "_drain" not in json.loads(dead["line"])
    await seed(vectors, settings.chroma.memory_collection, [("late", {"sessionId": "s0"})])
    # The operator feeds back the dead letter, and a copy that still has its `_drain` key.
    assert enqueue_edges(settings.drain.lazy_edges_queue_path,
                         [dead["line"].encode(), requeued_copy]) == []
    assert b"_drain" not in settings.drain.lazy_edges_queue_path.read_bytes()
    stats = await drain_queue(stores)
    assert (stats.succeeded, stats.duplicates, stats.requeued) == (2, 0, 0)
    edge = await read_edge(graph, "CONCEPT:a", "memory:late", "MENTIONED_IN")
    assert edge is not None and edge.weight == pytest.approx(1.1)


async def test_a_new_line_for_an_existing_edge_still_reinforces_it(stores: TickContext) -> None:
    s = stores.settings
    write_queue(s.drain.lazy_edges_queue_path, [line("CONCEPT:a", "CONCEPT:b", timestamp=1)])
    await drain_queue(stores)
    write_queue(s.drain.lazy_edges_queue_path, [line("CONCEPT:a", "CONCEPT:b", timestamp=2)])
    await drain_queue(stores)
    edge = await read_edge(stores.graph, "CONCEPT:a", "CONCEPT:b", "MENTIONED_IN")
    assert edge is not None and edge.weight == pytest.approx(1.1)
    assert edge.properties == {"timestamp": 2}


async def test_a_line_goes_to_the_dead_letters_after_the_attempt_limit(
    graph: GraphDB, vectors: VectorStore, tmp_path: Path
) -> None:
    settings = make_settings(tmp_path, lazyEdgeMaxAttempts=3)
    await seed(vectors, settings.chroma.memory_collection, [("m1", {"sessionId": "s1"})])
    await upsert_node(graph, "CONCEPT:a", "CONCEPT")
    stores = TickContext(settings, graph, vectors)
    write_queue(settings.drain.lazy_edges_queue_path, [line("CONCEPT:a", "memory:ghost")])
    outcomes = []
    for _ in range(3):
        stats = await drain_queue(stores)
        outcomes.append((stats.requeued, stats.dead_lettered))
    assert outcomes == [(1, 0), (1, 0), (0, 1)]
    assert queued(settings) == []
    [dead] = dead_letters(settings)
    assert dead["reason"] == "chroma-row-not-found" and dead["attempts"] == 3
    assert json.loads(dead["line"])["target"] == "memory:ghost"


async def test_a_chroma_outage_fails_the_tick_keeps_every_line_and_burns_no_attempt(
    stores: TickContext, chroma_fault: Callable[..., None]
) -> None:
    s = stores.settings
    write_queue(s.drain.lazy_edges_queue_path, [line("CONCEPT:a", "memory:m1")])
    chroma_fault(s.chroma.memory_collection, "get")
    with pytest.raises(StoreUnavailable):
        await drain_queue(stores)
    assert s.drain.draining_path.exists(), "the lines stay on disk for the next tick"
    assert queued(s) == [] and dead_letters(s) == []
    assert await count_rows(stores.graph, "edges") == 0


async def test_a_dry_run_leaves_every_file_and_the_graph_byte_identical(
    stores: TickContext,
) -> None:
    s = stores.settings
    write_queue(s.drain.draining_path, [line("CONCEPT:a", "memory:m1"), b"{bad"])
    write_queue(s.drain.lazy_edges_queue_path, [line("CONCEPT:b", "memory:ghost")])
    write_queue(s.drain.dead_letter_path, [b'{"old": true}'])
    files = [s.drain.draining_path, s.drain.lazy_edges_queue_path, s.drain.dead_letter_path,
             s.state.graph_db_path]
    before = {p: p.read_bytes() for p in files}
    async with open_context(s, dry_run=True, vectors=stores.vectors) as dry:
        stats = await drain_queue(dry, dry_run=True)
    assert (stats.total_lines, stats.succeeded, stats.requeued, stats.skipped_malformed) == (
        3, 1, 1, 1)
    assert {p: p.read_bytes() for p in files} == before


async def test_a_bare_append_while_draining_is_processed_in_the_same_tick(
    stores: TickContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    s = stores.settings
    write_queue(s.drain.lazy_edges_queue_path, [line("CONCEPT:a", "CONCEPT:b", "R1")])
    real_read = QueueReader.read_lines
    appended: list[bool] = []

    def read_then_producer_appends(self: QueueReader, max_lines: int, max_bytes: int,
                                   **bounds: Any) -> list[ReadLine]:
        lines = real_read(self, max_lines, max_bytes, **bounds)
        if not appended:  # a producer that opened the file before the rename writes now
            appended.append(True)
            with self.path.open("ab") as f:
                f.write(line("CONCEPT:a", "CONCEPT:b", "R2") + b"\n")
        return lines

    monkeypatch.setattr(QueueReader, "read_lines", read_then_producer_appends)
    stats = await drain_queue(stores)
    assert stats.succeeded == 2
    assert await read_edge(stores.graph, "CONCEPT:a", "CONCEPT:b", "R2") is not None


async def test_a_bare_append_just_before_removal_is_handed_back_to_the_queue(
    stores: TickContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    s = stores.settings
    write_queue(s.drain.lazy_edges_queue_path, [line("CONCEPT:a", "CONCEPT:b", "R1")])
    real_remove = QueueReader.remove_and_collect_late_bytes

    def producer_appends_then_remove(self: QueueReader) -> Iterator[bytes]:
        with self.path.open("ab") as f:
            f.write(line("CONCEPT:a", "CONCEPT:b", "LATE") + b"\n")
        return real_remove(self)

    monkeypatch.setattr(QueueReader, "remove_and_collect_late_bytes",
                        producer_appends_then_remove)
    stats = await drain_queue(stores)
    assert stats.late_lines_handed_back == 1
    assert [q["relationship"] for q in queued(s)] == ["LATE"]
    monkeypatch.undo()
    await drain_queue(stores)
    assert await read_edge(stores.graph, "CONCEPT:a", "CONCEPT:b", "LATE") is not None


async def test_an_unterminated_last_line_is_still_processed(stores: TickContext) -> None:
    write_queue(stores.settings.drain.lazy_edges_queue_path, [line("CONCEPT:a", "CONCEPT:b", "R1")],
                raw_tail=line("CONCEPT:a", "CONCEPT:b", "R2"))
    stats = await drain_queue(stores)
    assert stats.succeeded == 2


async def test_a_second_drainer_is_refused_naming_the_first(stores: TickContext) -> None:
    import os

    write_queue(stores.settings.drain.lazy_edges_queue_path, [line("CONCEPT:a", "CONCEPT:b")])
    with (drainer_lock(stores.settings.drain.lazy_edges_queue_path),
          pytest.raises(LockHeld, match=f"pid {os.getpid()}")):
        await drain_queue(stores)
    assert stores.settings.drain.lazy_edges_queue_path.exists()


async def test_two_drainers_started_together_process_each_line_once(stores: TickContext) -> None:
    write_queue(stores.settings.drain.lazy_edges_queue_path,
                [line("CONCEPT:a", "CONCEPT:b", f"R{i}") for i in range(50)])
    results = await asyncio.gather(drain_queue(stores), drain_queue(stores),
                                   return_exceptions=True)
    done = [r for r in results if isinstance(r, DrainStats)]
    refused = [r for r in results if isinstance(r, LockHeld)]
    assert len(done) + len(refused) == 2
    assert sum(d.succeeded for d in done) == 50
    rows = await stores.graph.query("SELECT weight FROM edges WHERE source='CONCEPT:a'")
    assert [r[0] for r in rows] == [1.0] * 50


async def test_a_big_queue_makes_a_handful_of_chroma_calls_and_commits_per_batch(
    stores: TickContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    s = stores.settings
    memories = [(f"big{i}", {"sessionId": f"bs{i % 40}", "createdAt": i}) for i in range(2000)]
    await seed(stores.vectors, s.chroma.memory_collection, memories)
    await seed(stores.vectors, s.chroma.summary_collection,
               [(f"bsum{j}", {"sessionId": f"bs{j}", "createdAt": j}) for j in range(40)])
    lines = [line("CONCEPT:a", f"memory:big{i % 2000}", timestamp=i) for i in range(5000)]
    write_queue(s.drain.lazy_edges_queue_path, lines)
    calls = count_chroma_calls(monkeypatch, stores.vectors)
    commits = count_commits(monkeypatch, stores.graph)
    stats = await drain_queue(stores)
    assert stats.succeeded == 5000
    assert calls() <= 3, "one get for memories, one for their sessions"
    assert commits() <= 2, "one transaction per batch (+ housekeeping)"
    assert await count_rows(stores.graph, "edges") == 2000 + 2000  # links + ORIGINATES_IN


async def test_producers_append_whole_lines_and_repair_a_torn_tail(tmp_path: Path) -> None:
    queue = tmp_path / "q.jsonl"
    queue.write_bytes(b'{"torn": ')  # a producer crashed mid-line
    append_locked(queue, [line("A", "B")])
    assert queue.read_bytes().split(b"\n") == [b'{"torn": ', line("A", "B"), b""]


async def test_a_stale_sidecar_never_binds_the_next_queue_file(
    stores: TickContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    s = stores.settings
    write_queue(s.drain.lazy_edges_queue_path, numbered_lines("OLD", 20))
    # Dies right after `.draining` is unlinked: its sidecar and committed offset remain. The
    # next queue file may even get the unlinked file's inode number.
    real = QueueReader.remove_and_collect_late_bytes

    def unlink_then_die(self: QueueReader) -> Iterator[bytes]:
        real(self)
        raise SimulatedCrash("after the unlink")

    monkeypatch.setattr(QueueReader, "remove_and_collect_late_bytes", unlink_then_die)
    with pytest.raises(SimulatedCrash):
        await drain_queue(stores)
    monkeypatch.undo()
    assert sidecar_path(s.drain.draining_path).exists() and not s.drain.draining_path.exists()
    write_queue(s.drain.lazy_edges_queue_path, numbered_lines("NEW", 3))
    stats = await drain_queue(stores)
    assert stats.succeeded == 3, "the new file is read from its first byte"
    rows = await stores.graph.query(
        "SELECT COUNT(*) FROM edges WHERE relationship LIKE 'NEW%'")
    assert rows[0][0] == 3


async def test_a_sidecar_whose_committed_offset_is_past_the_file_is_not_trusted(
    stores: TickContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    s = stores.settings
    write_queue(s.drain.lazy_edges_queue_path, numbered_lines("R", 20))
    # Committed, not removed.
    await crashing_drain(stores, monkeypatch, drain_tick, "hand_back_late_bytes")
    # Something replaced `.draining` with a shorter file behind the drainer's back.
    s.drain.draining_path.write_bytes(line("CONCEPT:a", "CONCEPT:b", "SHORT") + b"\n")
    stats = await drain_queue(stores)
    assert stats.succeeded == 1, "drained from its first byte: nothing is skipped"
