"""`python -m daemons.migrate --to URL` as an operator runs it (subprocesses, real config files,
the state the real demo command made, the session's real PostgreSQL, a fresh database per
test): the copy is exact, the daemons carry on from it, and every refusal is exit 2 (or 1)
with one line and, under `--json`, exactly one JSON object."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any

from core.base.rules.nodes import MAX_WEIGHT, REINFORCE_FACTOR
from core.base.state.schema import STATE_TABLES
from core.base.state.state import open_graph
from core.drain.stores.queue_files import new_segment, write_sidecar
from tests.postgres_server import PostgresServer
from tests.support import make_settings, run_module


def fresh_database(server: PostgresServer) -> str:
    return server.create_database(f"cmd_{uuid.uuid4().hex[:12]}")


def write_config(path: Path, **keys: Any) -> Path:
    lines = ["[knowledgeBase]", 'dataDir = "data"'] + [f"{k} = {json.dumps(v)}"
                                                       for k, v in keys.items()]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def run(tmp_path: Path, module: str, *args: str, config: str = "kb.toml",
        stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return run_module(module, *args, "--config", str(tmp_path / config),
                      home=tmp_path / "home", stdin=stdin)


def migrate(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run(tmp_path, "daemons.migrate", *args)


def one_json_object(done: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    lines = done.stdout.splitlines()
    assert len(lines) == 1, done.stdout
    parsed = json.loads(lines[0])
    assert isinstance(parsed, dict)
    return parsed


def sqlite_counts(path: Path) -> dict[str, int]:
    with sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True) as conn:
        return {t: conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in STATE_TABLES}


async def _pg(url: str, sql: str) -> list[tuple[Any, ...]]:
    state = make_settings(Path("/nonexistent"), stateUrl=url).state
    graph = await open_graph(state, read_only=True)
    try:
        return [tuple(r) for r in await graph.query(sql)]
    finally:
        await graph.close()


def pg(url: str, sql: str) -> list[tuple[Any, ...]]:
    return asyncio.run(_pg(url, sql))


def pg_counts(url: str) -> dict[str, int]:
    return {t: int(pg(url, f"SELECT count(*) FROM {t}")[0][0]) for t in STATE_TABLES}


def demo_state(tmp_path: Path) -> Path:
    """The real demo's state in tmp_path/data (graph, telemetry, tenants, offsets, tokens)."""
    write_config(tmp_path / "kb.toml")
    done = run(tmp_path, "daemons.demo")
    assert done.returncode == 0, done.stderr
    return tmp_path / "data" / "graph.sqlite"


def weights(url: str) -> dict[tuple[str, str, str], float]:
    return {(s, t, r): float(w) for s, t, r, w in
            pg(url, "SELECT source, target, relationship, weight FROM edges")}


def test_the_demo_state_moves_to_postgresql_and_the_daemons_carry_on_from_it(
    tmp_path: Path, postgres_server: PostgresServer
) -> None:
    graph_file = demo_state(tmp_path)
    before = sqlite_counts(graph_file)
    with sqlite3.connect(graph_file) as conn:
        [(demo_generation,)] = conn.execute("SELECT generation FROM drain_generations")
    files = {p.name: p.read_bytes() for p in graph_file.parent.glob("graph.sqlite*")}
    url = fresh_database(postgres_server)

    done = migrate(tmp_path, "--to", url, "--json")
    assert done.returncode == 0, done.stderr
    figures = one_json_object(done)
    assert figures["ok"] is True
    assert {t["table"]: t["rows"] for t in figures["tables"]} == before
    assert all(t["matches"] for t in figures["tables"])
    assert pg_counts(url) == before
    assert before["nodes"] and before["edges"] and before["drain_requeued"]
    # The source is untouched, byte for byte (no write, no checkpoint, no new file).
    assert {p.name: p.read_bytes() for p in graph_file.parent.glob("graph.sqlite*")} == files

    # The daemons, pointed at the database, carry on from the copied state.
    write_config(tmp_path / "pg.toml", stateUrl=url, reconciliationEnabled=True)
    old = weights(url)
    (source, target, relationship), weight = sorted(old.items())[0]
    lines = [{"source": source, "target": target, "relationship": relationship},
             {"source": source, "target": target, "relationship": "MIGRATED_TOGETHER"}]
    queued = run(tmp_path, "daemons.enqueue", config="pg.toml",
                 stdin="".join(json.dumps(line) + "\n" for line in lines))
    assert queued.returncode == 0, queued.stderr
    drained = run(tmp_path, "daemons.drain", "--tick", "--json", config="pg.toml")
    assert drained.returncode == 0, drained.stderr

    now = weights(url)
    # The new mention reinforced its edge once; the lines the demo drained were not applied
    # again (every other edge is as copied), and the new edge linked.
    assert now[(source, target, relationship)] == min(weight + REINFORCE_FACTOR, MAX_WEIGHT)
    assert now[(source, target, "MIGRATED_TOGETHER")] == 1.0
    assert {k: v for k, v in now.items() if k[2] != "MIGRATED_TOGETHER"
            and k != (source, target, relationship)} == {
        k: v for k, v in old.items() if k != (source, target, relationship)}
    # The re-queued lines kept their tokens: their tries went on counting (1 -> 2).
    queue = tmp_path / "data" / "memory-core" / "lazy-edges.jsonl"
    attempts = [json.loads(line)["_drain"]["attempts"] for line in
                queue.read_text().splitlines()]
    assert attempts and set(attempts) == {2}
    # The demo's generation was migrated as this host's drainer's: its next commit forgot it
    # (a row tagged as nobody's would stay forever).
    assert pg(url, f"SELECT count(*) FROM drain_generations "
                   f"WHERE generation = '{demo_generation}'") == [(0,)]

    reconciled = run(tmp_path, "daemons.reconcile", "--tick", "--json", config="pg.toml")
    assert reconciled.returncode == 0, reconciled.stderr
    status = run(tmp_path, "daemons.status", "--json", config="pg.toml")
    assert status.returncode == 0, status.stderr
    shown = one_json_object(status)
    assert shown["graph"]["path"] == url
    assert {t["tenantId"] for t in shown["tenants"]} >= {"acme"}
    assert not (tmp_path / "data" / "graph.sqlite-journal").exists()


def test_a_target_with_rows_is_refused_and_left_as_it_was(
    tmp_path: Path, postgres_server: PostgresServer
) -> None:
    nodes_in_source = sqlite_counts(demo_state(tmp_path))["nodes"]
    url = fresh_database(postgres_server)
    first = migrate(tmp_path, "--to", url)
    assert first.returncode == 0, first.stderr
    assert "copied and verified" in first.stdout
    shown = [line.split()[:2] for line in first.stdout.splitlines()]
    assert ["nodes", f"{nodes_in_source:,}"] in shown, first.stdout
    nodes = pg(url, "SELECT id, label, properties FROM nodes ORDER BY id")
    counts = pg_counts(url)

    again = migrate(tmp_path, "--to", url)
    assert again.returncode == 2
    assert again.stderr.count("\n") == 1
    assert "table nodes already has rows" in again.stderr
    assert pg(url, "SELECT id, label, properties FROM nodes ORDER BY id") == nodes
    assert pg_counts(url) == counts
    refused = migrate(tmp_path, "--to", url, "--json")
    assert refused.returncode == 2
    assert one_json_object(refused)["ok"] is False


def test_a_password_in_the_url_is_refused_and_never_shown(tmp_path: Path) -> None:
    write_config(tmp_path / "kb.toml")
    for flags in ((), ("--json",)):
        done = migrate(tmp_path, "--to", "postgresql://kb:s3cr3t-pw@127.0.0.1:5432/kb", *flags)
        assert done.returncode == 2
        assert "password" in done.stderr
        assert "s3cr3t" not in done.stdout + done.stderr
        if flags:
            assert one_json_object(done)["ok"] is False


def test_every_refusal_is_exit_2_with_one_line_and_one_json_object(
    tmp_path: Path, postgres_server: PostgresServer
) -> None:
    url = fresh_database(postgres_server)
    write_config(tmp_path / "kb.toml")
    missing = tmp_path / "data" / "graph.sqlite"
    cases = {
        "no SQLite state file there": ("--to", url),
        "expected postgresql://": ("--to", "mysql://127.0.0.1/kb"),
        "the following arguments are required: --to": (),
    }
    for expected, args in cases.items():
        for flags in ((), ("--json",)):
            done = migrate(tmp_path, *args, *flags)
            assert done.returncode == 2, (args, done.stderr)
            assert expected in done.stderr and done.stderr.count("\n") == 1, done.stderr
            if flags:
                assert one_json_object(done)["ok"] is False
            else:
                assert done.stdout == ""
    assert not missing.exists() and not missing.parent.exists()  # nothing created

    write_config(tmp_path / "kb.toml", stateUrl=url)
    on_pg = migrate(tmp_path, "--to", url, "--json")
    assert on_pg.returncode == 2
    assert "nothing to migrate from" in on_pg.stderr
    assert one_json_object(on_pg)["ok"] is False
    # Refused before the target was touched: not even the schema was applied.
    assert pg(url, "SELECT count(*) FROM pg_tables WHERE schemaname = 'public'") == [(0,)]


def test_a_row_the_target_refuses_is_exit_1_naming_the_table_and_the_target_stays_empty(
    tmp_path: Path, postgres_server: PostgresServer
) -> None:
    graph_file = demo_state(tmp_path)
    with sqlite3.connect(graph_file) as conn:  # foreign keys off: an earlier version's edge
        conn.execute("INSERT INTO edges(source, target, relationship, weight, properties) "
                     "VALUES ('concept:gone', 'concept:gone-too', 'X', 1.0, '{}')")
    url = fresh_database(postgres_server)
    done = migrate(tmp_path, "--to", url, "--json")
    assert done.returncode == 1, done.stderr
    figures = one_json_object(done)
    assert figures["ok"] is False and figures["error"].startswith("table edges:")
    assert "table edges: PostgreSQL refused a row" in done.stderr
    assert set(pg_counts(url).values()) == {0}
    text = migrate(tmp_path, "--to", url)
    assert text.returncode == 1 and "not migrated: table edges" in text.stdout


def test_a_leftover_draining_file_resumes_at_its_copied_offset_on_postgresql(
    tmp_path: Path, postgres_server: PostgresServer
) -> None:
    """A drainer that crashed on SQLite after committing line A of its `.draining` file (its
    edge and its offset in one transaction) and before line B: after the move, the drain on
    PostgreSQL applies B only, then forgets the old segment as its own."""
    graph_file = demo_state(tmp_path)
    queue = tmp_path / "data" / "memory-core" / "lazy-edges.jsonl"
    draining = queue.with_name(queue.name + ".draining")
    with sqlite3.connect(graph_file) as conn:
        source, target = conn.execute("SELECT source, target FROM edges ORDER BY source, target "
                                      "LIMIT 1").fetchone()
    line_a, line_b = (json.dumps({"source": source, "target": target, "relationship": rel})
                      + "\n" for rel in ("LEFTOVER_A", "LEFTOVER_B"))
    draining.write_text(line_a + line_b, encoding="utf-8")
    dead = queue.with_name(queue.name + ".dead.jsonl")
    segment = new_segment(now_ms=1, dead_letters_size=dead.stat().st_size)
    write_sidecar(draining, segment)
    with sqlite3.connect(graph_file) as conn:
        conn.execute("INSERT INTO edges(source, target, relationship, weight, properties) "
                     "VALUES (?, ?, 'LEFTOVER_A', 1.0, '{}')", (source, target))
        conn.execute("INSERT INTO drain_generations(generation, committed_offset, "
                     "dead_letters_size, updated_at) VALUES (?, ?, ?, 1)",
                     (segment.id, len(line_a.encode()), dead.stat().st_size))

    url = fresh_database(postgres_server)
    done = migrate(tmp_path, "--to", url)
    assert done.returncode == 0, done.stderr
    write_config(tmp_path / "pg.toml", stateUrl=url)
    drained = run(tmp_path, "daemons.drain", "--tick", "--json", config="pg.toml")
    assert drained.returncode == 0, drained.stderr

    now = weights(url)
    assert now[(source, target, "LEFTOVER_A")] == 1.0  # not applied a second time
    assert now[(source, target, "LEFTOVER_B")] == 1.0  # resumed after A
    assert not draining.exists()
    assert pg(url, f"SELECT count(*) FROM drain_generations "
                   f"WHERE generation = '{segment.id}'") == [(0,)]


def test_the_sqlite_drainer_copied_by_migrate_is_shown_gone_and_can_be_forgotten(
    tmp_path: Path, postgres_server: PostgresServer
) -> None:
    """After kb-migrate the SQLite file's drainer (id '') is a row nobody ticks again: it is
    shown gone once its intervals pass, and `kb-drain forget '(single)'` removes it."""
    write_config(tmp_path / "kb.toml")
    drained = run(tmp_path, "daemons.drain", "--tick", "--json")
    assert drained.returncode == 0, drained.stderr
    url = fresh_database(postgres_server)
    done = migrate(tmp_path, "--to", url, "--json")
    assert done.returncode == 0, done.stderr
    write_config(tmp_path / "pg.toml", stateUrl=url, remIntervalMs=1_000,
                 drainerGoneIntervals=1)
    drained = run(tmp_path, "daemons.drain", "--tick", "--json", config="pg.toml")
    assert drained.returncode == 0, drained.stderr

    def drainers() -> dict[str, Any]:
        shown = run(tmp_path, "daemons.status", "--json", config="pg.toml")
        assert shown.returncode == 0, shown.stderr
        return {d["drainer"]: d for d in one_json_object(shown)["drainers"]}

    assert "" in drainers() and len(drainers()) == 2
    deadline = time.monotonic() + 30
    while not drainers()[""]["gone"]:
        assert time.monotonic() < deadline, "the copied drainer never showed as gone"
        time.sleep(0.2)
    text = run(tmp_path, "daemons.status", config="pg.toml").stdout
    assert "(single) (gone)" in text
    forgot = run(tmp_path, "daemons.drain", "forget", "(single)", config="pg.toml")
    assert forgot.returncode == 0, forgot.stderr
    assert "forgot drainer (single)" in forgot.stdout
    assert list(drainers()) != [] and "" not in drainers()
