"""What an operator sees: every command says what it did in words, `--help` reads the same
everywhere, a dry run on a missing store creates nothing, and a URL's credentials are never
shown. Commands run in-process (their `main`, as the console scripts call it) for speed; the
subprocess path is covered by the demo, status and deployment tests."""

from __future__ import annotations

import argparse
import io
import json
import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn

import pytest

from daemons import __main__ as combined
from daemons import backfill, demo, drain, enqueue, reconcile, status, tenants
from tests.support import make_settings, seed

Main = Callable[[Sequence[str] | None], NoReturn]


def run(main: Main, *argv: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    """Run a command's entry point; its exit code and stdout."""
    with pytest.raises(SystemExit) as stopped:
        main(list(argv))
    code = stopped.value.code
    return int(code) if isinstance(code, int) else 1, capsys.readouterr().out


def config(tmp_path: Path, extra: str = "") -> str:
    path = tmp_path / "kb.toml"
    path.write_text(f'[knowledgeBase]\ndataDir = "{tmp_path / "data"}"\n{extra}')
    return str(path)


def worded(out: str, *, most: int = 12) -> bool:
    """A summary for a person: one to `most` non-blank lines, a sentence among them, not JSON,
    not a `key=value` dump."""
    lines = [line for line in out.splitlines() if line.strip()]
    return (0 < len(lines) <= most and any(len(line.split()) >= 4 for line in lines)
            and not out.lstrip().startswith("{") and not re.search(r"\b\w+=\S", out))


async def _seed_memories(tmp_path: Path) -> None:
    from core.base.chroma import VectorStore

    settings = make_settings(tmp_path)
    vectors = await VectorStore.open(settings.chroma)
    try:
        await seed(vectors, settings.chroma.memory_collection,
                   [(f"m{i}", {"sessionId": "s1", "createdAt": 1_700_000_000_000})
                    for i in range(3)])
        await seed(vectors, settings.chroma.summary_collection,
                   [("sum1", {"sessionId": "s1", "createdAt": 1_700_000_000_000})])
    finally:
        await vectors.close()


def seeded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stdin: bytes) -> str:
    """A config over a store with three memories of one summarized session, and `stdin` ready
    for `enqueue`; the config's path."""
    import asyncio

    asyncio.run(_seed_memories(tmp_path))
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin)))
    return config(tmp_path)


def test_every_command_prints_a_short_summary_without_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    kb = seeded(tmp_path, monkeypatch,
                b'{"source":"memory:m1","target":"memory:m2","relationship":"R"}\n')
    said: dict[str, str] = {}
    for name, main, argv in [
        ("enqueue", enqueue.main, []),
        ("drain --tick --dry-run", drain.main, ["--tick", "--dry-run"]),
        ("drain --tick", drain.main, ["--tick"]),
        ("reconcile --tick (disabled)", reconcile.main, ["--tick"]),
        ("reconcile --tick --dry-run", reconcile.main, ["--tick", "--dry-run"]),
        ("backfill", backfill.main, ["--days", "3"]),
        ("tenants set-config", tenants.main, ["set-config", "acme", "--repo-slug", "acme/kb"]),
        ("tenants list", tenants.main, ["list"]),
        ("status", status.main, []),
    ]:
        code, out = run(main, *argv, "--config", kb, capsys=capsys)
        assert code == 0, (name, out)
        assert worded(out, most=60 if name == "status" else 6), f"{name} printed {out!r}"
        said[name] = out
    assert "appended 1 edge line" in said["enqueue"]
    assert "1 line read, 1 linked" in said["drain --tick"]
    assert "dry run" in said["drain --tick --dry-run"]
    assert "reconciliation is disabled" in said["reconcile --tick (disabled)"]
    assert "reconciliationEnabled = true" in said["reconcile --tick (disabled)"]
    assert "config version 1" in said["tenants set-config"]
    assert "acme/kb" in said["tenants list"]
    enabled = config(tmp_path, "reconciliationEnabled = true\n")
    code, out = run(reconcile.main, "--tick", "--config", enabled, capsys=capsys)
    assert code == 0 and worded(out)
    assert "reconcile pass over 1 tenant (report only" in out


def test_the_status_tables_add_up_and_date_the_oldest_line_by_its_own_time(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    kb = seeded(tmp_path, monkeypatch,
                b'{"source":"memory:m1","target":"memory:m2","relationship":"R"}\n'
                b'{"source":"CONCEPT:a","target":"memory:m9","relationship":"R",'
                b'"timestamp":"2020-01-02T03:04:05Z"}\n')
    assert run(enqueue.main, "--config", kb, capsys=capsys)[0] == 0
    assert run(drain.main, "--tick", "--config", kb, capsys=capsys)[0] == 0
    code, out = run(status.main, "--config", kb, capsys=capsys)
    assert code == 0
    assert "2020-01-02T03:04:05Z" in out and "from its timestamp" in out, \
        "a re-queued line is dated by its own timestamp, not by its last attempt"
    code, shown = run(status.main, "--config", kb, "--json", capsys=capsys)
    graph = json.loads(shown)["graph"]
    other = graph["nodes"] - graph["memories"]["total"] - graph["sessions"]["total"]
    assert re.search(rf"all nodes\s+{graph['nodes']}\b", out)
    assert re.search(rf"other nodes \(concepts, tenants, \.\.\.\)\s+{other}\b", out)
    assert "=" not in out.split("Last ticks")[1].split("Tenants")[0], "no key=value dump"
    assert "took" in out and re.search(r"\d+ ms", out)


def _parsers() -> dict[str, argparse.ArgumentParser]:
    parsers: dict[str, argparse.ArgumentParser] = {
        "kb-daemons": combined.build_parser(), "kb-drain": drain.build_parser(),
        "kb-reconcile": reconcile.build_parser(),
        "kb-reconcile restore": reconcile.build_restore_parser(),
        "kb-backfill": backfill.build_parser(), "kb-enqueue": enqueue.build_parser(),
        "kb-tenants": tenants.build_parser(), "kb-status": status.build_parser(),
        "kb-demo": demo.build_parser(),
    }
    actions: Any = tenants.build_parser()._subparsers
    for action in actions._group_actions:
        for name, sub in action.choices.items():
            parsers[f"kb-tenants {name}"] = sub
    return parsers


def test_help_reads_the_same_way_for_every_command() -> None:
    for script, parser in _parsers().items():
        usage = parser.format_usage()
        assert usage.startswith(f"usage: {script} "), usage
        text = parser.format_help()
        assert "`" not in text, f"{script}: a backtick pasted from the README: {text}"
        assert "python -m" not in text, f"{script}: usage names the console script"
        if " " not in script:  # a command (its subcommands may share its description)
            assert parser.description and not parser.description.startswith(script)


def test_restore_help_says_what_it_accepts() -> None:
    text = reconcile.build_restore_parser().format_help()
    assert "at any path" in " ".join(text.split())


def test_dry_runs_on_a_missing_store_create_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    kb = config(tmp_path)
    before = sorted(tmp_path.rglob("*"))
    for main, argv in [(drain.main, ["--tick", "--dry-run"]),
                       (reconcile.main, ["--tick", "--dry-run"]),
                       (backfill.main, ["--dry-run"])]:
        code, out = run(main, *argv, "--config", kb, capsys=capsys)
        assert code == 0 and "dry run" in out
    assert sorted(tmp_path.rglob("*")) == before, "no Chroma folder, lock file or SQLite file"


async def test_a_chroma_url_with_user_info_is_refused_and_never_shown(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A URL with user-info used to be accepted (and shown without it); it is now a config
    # error pointing at chromaUrl's token file, and the error still never shows the secret.
    from core.base.config.config import KEYS, invalid_value_message, url_without_user_info
    from core.base.rules.errors import ConfigError

    assert url_without_user_info("http://alice:PASSWORD@127.0.0.1:9") == "http://127.0.0.1:9"
    assert url_without_user_info("http://127.0.0.1:9") == "http://127.0.0.1:9"
    key = next(k for k in KEYS if k.name == "chromaUrl")
    assert "PASSWORD" not in invalid_value_message(key, "http://alice:PASSWORD@h:1")
    with pytest.raises(ConfigError) as refused:
        make_settings(tmp_path, chromaUrl="http://TOKENSECRET@127.0.0.1:9")
    assert "TOKENSECRET" not in str(refused.value)
    assert "chromaAuthTokenFile" in str(refused.value)


def test_a_line_to_a_node_no_back_fill_can_create_says_it_is_not_in_the_graph(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    kb = seeded(tmp_path, monkeypatch,
                b'{"source":"CONCEPT:nowhere","target":"memory:m1","relationship":"R"}\n')
    assert run(enqueue.main, "--config", kb, capsys=capsys)[0] == 0
    assert run(drain.main, "--tick", "--config", kb, capsys=capsys)[0] == 0
    [requeued] = (tmp_path / "data/memory-core/lazy-edges.jsonl").read_text().splitlines()
    assert json.loads(requeued)["_drain"]["lastReason"] == "not-in-graph"
