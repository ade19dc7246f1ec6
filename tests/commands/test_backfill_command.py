"""`python -m daemons.backfill`: flags, the time window, paging, dry runs, failures and progress.

The window and paging cases call `core.eager_backfill` on the real fixture stores (fast);
the cases whose promise is about the whole command (nothing written by a dry run, exit 1 with
the failures listed) run it as a subprocess on a config in tmp_path.
"""

from __future__ import annotations

import io
import json
import re
import subprocess
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from core.base.chroma import SCAN_PAGE_ROWS, VectorStore
from core.base.config.config import Settings
from core.base.io.clock import now_ms
from core.base.reports.progress import LogProgress, TerminalProgress, choose_progress
from core.base.rules.camel_json import to_json
from core.base.rules.errors import StoreUnavailable
from core.base.rules.timestamps import iso_from_ms
from core.base.runtime.context import TickContext
from core.base.state.graph import existing_ids, upsert_node
from core.base.state.graph_db import GraphDB
from core.base.state.state import open_graph
from core.drain.eager_backfill import DAY_MS, eager_backfill
from daemons.backfill import build_parser, main
from tests.support import count_rows, make_settings, read_node, run_module, seed


def run_backfill_process(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The command as an operator runs it: its own process, a config file in tmp_path."""
    config = tmp_path / "kb.toml"
    if not config.exists():
        config.write_text('[knowledgeBase]\ndataDir = "data"\n')
    return run_module("daemons.backfill", "--config", str(config), *args,
                      home=tmp_path / "home")


def summary(sid: str, created: Any, **extra: Any) -> tuple[str, dict[str, Any]]:
    return f"sum-{sid}", {"sessionId": sid, "createdAt": created, "title": sid, **extra}


async def seed_sessions(
    vectors: VectorStore, settings: Settings, summaries: Sequence[tuple[str, Mapping[str, Any]]],
    *, memories_per_session: int = 1,
) -> None:
    await seed(vectors, settings.chroma.summary_collection, summaries)
    memories = [(f"{m['sessionId']}-m{i}", {"sessionId": m["sessionId"], "createdAt": 1,
                                           "userId": "u"})
                for _, m in summaries for i in range(memories_per_session)]
    if memories:
        await seed(vectors, settings.chroma.memory_collection, memories)


async def backfill(stores: TickContext, *, days: int = 7, dry_run: bool = False,
                   skip_drain: bool = True) -> dict[str, Any]:
    report = await eager_backfill(stores, days=days, dry_run=dry_run, skip_drain=skip_drain,
                                     progress=LogProgress())
    figures: dict[str, Any] = to_json(report.figures())
    return figures


# --- flags -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "argv",
    [["--days", "0"], ["--days", "-1"], ["--days", "abc"], ["--days", "1.5"], ["--days"]],
    ids=["zero", "negative", "word", "fraction", "no-value"],
)
def test_days_that_is_not_a_positive_whole_number_is_exit_2_with_one_line(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main([*argv, "--dry-run"])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1, err
    assert "--days" in err


def test_days_defaults_to_30_as_in_the_original() -> None:
    assert build_parser().parse_args([]).days == 30


def test_an_unknown_flag_is_exit_2_naming_it(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--days", "7", "--frobnicate"])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "--frobnicate" in err


def test_help_documents_every_flag(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--help"])
    assert exited.value.code == 0
    out = capsys.readouterr().out
    for flag in ("--days N", "--dry-run", "--skip-drain", "--json", "--config F"):
        assert flag in out


# --- the window ------------------------------------------------------------------------------


async def test_days_7_ingests_the_session_from_2_days_ago_and_not_the_one_from_20(
    graph: GraphDB, vectors: VectorStore, settings: Settings
) -> None:
    now = now_ms()
    await seed_sessions(vectors, settings, [summary("recent", iso_from_ms(now - 2 * DAY_MS)),
                                            summary("old", iso_from_ms(now - 20 * DAY_MS))])
    figures = await backfill(TickContext(settings, graph, vectors), days=7)
    assert figures["ok"] and figures["liveIngest"]["sessionsFound"] == 1
    assert await existing_ids(graph, ["session:recent", "session:old"]) == {"session:recent"}
    assert await existing_ids(graph, ["memory:recent-m0"]) == {"memory:recent-m0"}
    node = await read_node(graph, "session:recent")
    assert node is not None and node.properties["liveIngested"] is True


async def test_created_at_is_compared_as_a_time_in_every_format_writers_use(
    graph: GraphDB, vectors: VectorStore, settings: Settings
) -> None:
    now = now_ms()
    inside, outside = now - 2 * DAY_MS, now - 20 * DAY_MS
    await seed_sessions(vectors, settings, [
        summary("epoch-ms", inside),
        summary("epoch-s", inside // 1000),
        summary("epoch-ms-string", str(inside)),
        summary("iso-z", iso_from_ms(inside)),
        summary("iso-offset", iso_from_ms(inside).replace("Z", "+05:30")),
        summary("iso-naive", iso_from_ms(inside).removesuffix("Z")),
        # As strings these sort after any recent ISO date; as times they are 20 days old.
        summary("old-epoch-ms", outside),
        summary("old-epoch-s", outside // 1000),
    ])
    figures = await backfill(TickContext(settings, graph, vectors), days=7)
    ingested = await existing_ids(graph, [f"session:{s}" for s in (
        "epoch-ms", "epoch-s", "epoch-ms-string", "iso-z", "iso-offset", "iso-naive",
        "old-epoch-ms", "old-epoch-s")])
    assert ingested == {f"session:{s}" for s in (
        "epoch-ms", "epoch-s", "epoch-ms-string", "iso-z", "iso-offset", "iso-naive")}
    assert figures["liveIngest"]["unparseableCreatedAt"] == 0


async def test_an_unparseable_created_at_is_counted_and_named_in_the_log_and_figures(
    graph: GraphDB, vectors: VectorStore, settings: Settings, capsys: pytest.CaptureFixture[str]
) -> None:
    await seed_sessions(vectors, settings, [summary("fine", now_ms() - DAY_MS),
                                            summary("garbled", "last tuesday")])
    figures = await backfill(TickContext(settings, graph, vectors), days=7)
    live = figures["liveIngest"]
    assert live["unparseableCreatedAt"] == 1
    assert live["unparseableRows"] == [
        {"rowId": "sum-garbled", "sessionId": "garbled", "createdAt": "last tuesday"}]
    assert "sum-garbled" in capsys.readouterr().err
    # Counted and named, not a failure of the run: the row has no time to be in a window.
    assert figures["ok"]


async def test_summaries_beyond_one_page_are_all_read(
    graph: GraphDB, vectors: VectorStore, settings: Settings
) -> None:
    count = SCAN_PAGE_ROWS + 7
    created = now_ms() - DAY_MS
    await seed_sessions(vectors, settings, [summary(f"s{i:05d}", created) for i in range(count)])
    figures = await backfill(TickContext(settings, graph, vectors), days=7)
    assert figures["ok"], figures["failures"]
    assert figures["liveIngest"]["summariesScanned"] == count
    assert figures["liveIngest"]["sessionsUpserted"] == count
    assert await count_rows(graph, "nodes") == 2 * count


# --- failures --------------------------------------------------------------------------------


async def test_a_store_that_is_down_stops_the_run_instead_of_failing_each_session(
    graph: GraphDB, vectors: VectorStore, settings: Settings,
    chroma_fault: Callable[..., None],
) -> None:
    await seed_sessions(vectors, settings, [summary(f"s{i}", now_ms() - DAY_MS)
                                            for i in range(3)])
    chroma_fault(settings.chroma.memory_collection, "get")
    with pytest.raises(StoreUnavailable, match="every session of a batch of 3"):
        await backfill(TickContext(settings, graph, vectors), days=7)
    assert await count_rows(graph, "nodes") == 0


def poison_session_node(graph_path: Path, session_id: str) -> None:
    """A fault on the real graph: SQLite refuses to insert this one session's node."""
    import sqlite3

    conn = sqlite3.connect(graph_path)
    conn.execute(
        f"CREATE TRIGGER poison BEFORE INSERT ON nodes WHEN NEW.id = 'session:{session_id}' "
        "BEGIN SELECT RAISE(ABORT, 'refused by a test trigger'); END")
    conn.commit()
    conn.close()


async def test_a_failing_session_is_listed_the_others_are_ingested_and_the_exit_is_1(
    tmp_path: Path,
) -> None:
    settings = make_settings(tmp_path)
    vectors = await VectorStore.open(settings.chroma)
    try:
        await seed_sessions(vectors, settings, [summary(s, now_ms() - DAY_MS)
                                                for s in ("a", "poisoned", "c")])
    finally:
        await vectors.close()
    await (await open_graph(settings.state)).close()  # creates the schema
    poison_session_node(settings.state.graph_db_path, "poisoned")

    done = run_backfill_process(tmp_path, "--days", "7", "--json")
    assert done.returncode == 1, done.stderr
    figures = json.loads(done.stdout)
    assert figures["ok"] is False and figures["failureCount"] == 1
    assert figures["failures"][0].startswith("[poisoned] IntegrityError")
    assert "poisoned" in done.stderr  # the log names it too
    graph = await open_graph(settings.state, read_only=True)
    try:
        assert await existing_ids(graph, ["session:a", "session:poisoned", "session:c"]) == {
            "session:a", "session:c"}
    finally:
        await graph.close()


# --- dry run ---------------------------------------------------------------------------------


async def test_a_dry_run_counts_sessions_memories_and_queue_lines_and_writes_nothing(
    tmp_path: Path,
) -> None:
    settings = make_settings(tmp_path)
    vectors = await VectorStore.open(settings.chroma)
    try:
        await seed_sessions(vectors, settings, [summary(s, now_ms() - DAY_MS) for s in "ab"],
                            memories_per_session=2)
    finally:
        await vectors.close()
    graph = await open_graph(settings.state)
    await upsert_node(graph, "CONCEPT:x", "CONCEPT")
    await graph.close()
    settings.drain.lazy_edges_queue_path.parent.mkdir(parents=True, exist_ok=True)
    settings.drain.lazy_edges_queue_path.write_bytes(
        b'{"source":"CONCEPT:x","target":"memory:a-m0","relationship":"MENTIONED_IN"}\n'
        b'not json\n')
    files = [settings.state.graph_db_path, settings.drain.lazy_edges_queue_path]
    before = {p: p.read_bytes() for p in files}
    listing = sorted(settings.drain.lazy_edges_queue_path.parent.iterdir())

    done = run_backfill_process(tmp_path, "--days", "7", "--dry-run", "--json")
    assert done.returncode == 0, done.stderr
    figures = json.loads(done.stdout)
    assert figures["dryRun"] is True
    assert figures["liveIngest"]["sessionsUpserted"] == 2
    assert figures["liveIngest"]["memoriesUpserted"] == 4
    assert figures["drain"]["totalLines"] == 2
    assert {p: p.read_bytes() for p in files} == before
    assert sorted(settings.drain.lazy_edges_queue_path.parent.iterdir()) == listing
    # A read-only reader of a WAL database leaves an empty -wal (and a -shm index) behind:
    # SQLite's read protocol, not data.
    wal = Path(f"{settings.state.graph_db_path}-wal")
    assert not wal.exists() or wal.stat().st_size == 0


async def test_a_dry_run_tolerates_a_store_without_collections(
    graph: GraphDB, vectors: VectorStore, settings: Settings
) -> None:
    figures = await backfill(TickContext(settings, graph, vectors), dry_run=True, skip_drain=False)
    assert "not found" in figures["liveIngest"]["skipped"]
    assert figures["ok"] and figures["drain"]["totalLines"] == 0


# --- progress --------------------------------------------------------------------------------


class FakeTerminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_terminal_gets_a_bar_and_anything_else_gets_log_lines() -> None:
    assert isinstance(choose_progress(FakeTerminal()), TerminalProgress)
    assert isinstance(choose_progress(io.StringIO()), LogProgress)


def test_the_bar_counts_to_its_total_and_ends_with_a_newline() -> None:
    terminal = FakeTerminal()
    bar = TerminalProgress(terminal)
    bar.start(400, label="sessions")
    bar.advance(200)
    bar.advance(200)
    bar.finish()
    drawn = terminal.getvalue()
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", drawn)  # colours and cursor moves
    assert text.endswith("\n")
    final = text.rstrip("\n").split("\n")[-1].split("\r")[-1]
    assert "sessions" in final and "400/400" in final and "100%" in final
    bar.finish()  # idempotent: a failure path may call it again
    assert terminal.getvalue() == drawn


async def test_summaries_without_a_memory_collection_still_bring_their_sessions(
    graph: GraphDB, vectors: VectorStore, settings: Settings
) -> None:
    await seed(vectors, settings.chroma.summary_collection,
               [summary(f"s{i}", now_ms() - DAY_MS) for i in range(3)])
    figures = await backfill(TickContext(settings, graph, vectors), days=7)
    assert figures["ok"] is True
    assert figures["failureCount"] == 0
    assert await existing_ids(graph, ["session:s0", "session:s1", "session:s2"]) == {
        "session:s0", "session:s1", "session:s2"}


async def test_the_summary_for_a_person_counts_in_the_singular_for_one(tmp_path: Path) -> None:
    settings = make_settings(tmp_path)
    vectors = await VectorStore.open(settings.chroma)
    try:
        await seed_sessions(vectors, settings, [summary("only", now_ms() - DAY_MS)],
                            memories_per_session=1)
    finally:
        await vectors.close()

    done = run_backfill_process(tmp_path, "--dry-run")
    assert done.returncode == 0, done.stderr
    assert "would ingest 1 session and 1 memory " in done.stdout, done.stdout
    assert "1 sessions" not in done.stdout and "1 memories" not in done.stdout
    assert "last 30 days" in done.stdout  # --days defaults to 30
