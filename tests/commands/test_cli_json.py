"""`--json` is exactly one JSON object on stdout on every exit path of every command that
takes it: a usage error, a configuration error, a store down, an unexpected exception. Each
command is run as an operator runs it (a subprocess with a real config file, a real SQLite
path, a Chroma server URL where nothing listens); only the unexpected exception is injected,
in-process, because no real input produces one on demand.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

import pytest

from tests.chroma_server import free_port
from tests.support import run_module

#: Every command with `--json`: (module, the words before the flags, whether it opens Chroma).
COMMANDS: dict[str, tuple[str, tuple[str, ...], bool]] = {
    "drain --tick": ("daemons.drain", ("--tick",), True),
    "reconcile --tick": ("daemons.reconcile", ("--tick",), True),
    "reconcile restore": ("daemons.reconcile", ("restore", "ARCHIVE"), True),
    "reconcile explain": ("daemons.reconcile", ("explain", "acme"), True),
    "backfill": ("daemons.backfill", ("--days", "1"), True),
    "status": ("daemons.status", (), False),
    "tenants list": ("daemons.tenants", ("list",), False),
    "tenants show": ("daemons.tenants", ("show", "acme"), False),
    "tenants set-config": ("daemons.tenants", ("set-config", "acme"), False),
}


def the_one_failure_object(stdout: str) -> dict[str, Any]:
    """The single JSON object on stdout, which must say `ok: false` and carry an error."""
    lines = stdout.splitlines()
    assert len(lines) == 1, f"expected one line of JSON on stdout, got {stdout!r}"
    shown = json.loads(lines[0])
    assert isinstance(shown, dict)
    assert shown["ok"] is False
    assert isinstance(shown["error"], str) and shown["error"]
    return shown


def command_line(name: str, tmp_path: Path, *flags: str) -> tuple[str, list[str]]:
    module, words, _ = COMMANDS[name]
    archive = tmp_path / "archive.jsonl"
    archive.write_text("{}\n", encoding="utf-8")
    return module, [str(archive) if w == "ARCHIVE" else w for w in words] + list(flags)


def write_config(tmp_path: Path, *lines: str) -> Path:
    path = tmp_path / "kb.toml"
    path.write_text("\n".join(["[knowledgeBase]", 'dataDir = "data"', *lines]) + "\n",
                    encoding="utf-8")
    return path


@pytest.mark.parametrize("name", COMMANDS)
def test_a_usage_error_under_json_is_one_failure_object_and_exit_2(
    tmp_path: Path, name: str
) -> None:
    module, words = command_line(name, tmp_path, "--json", "--no-such-flag")
    done = run_module(module, *words, home=tmp_path / "home")
    assert done.returncode == 2, done.stderr
    assert "--no-such-flag" in the_one_failure_object(done.stdout)["error"]
    assert done.stderr.count("\n") == 1


@pytest.mark.parametrize("argv", [
    ("daemons.drain", "--json"),                      # --json without --tick
    ("daemons.reconcile", "--json"),
    ("daemons.tenants", "--json", "show"),            # a subcommand's missing argument
    ("daemons.tenants", "show", "--json"),
    ("daemons.backfill", "--days", "0", "--json"),    # a flag's value refused
    ("daemons.status", "--js", "--bogus"),            # an abbreviation argparse accepts
], ids=" ".join)
def test_every_kind_of_usage_error_under_json_is_one_failure_object(
    tmp_path: Path, argv: tuple[str, ...]
) -> None:
    done = run_module(*argv, home=tmp_path / "home")
    assert done.returncode == 2, done.stderr
    the_one_failure_object(done.stdout)


@pytest.mark.parametrize("name", COMMANDS)
def test_a_configuration_error_under_json_is_one_failure_object_and_exit_2(
    tmp_path: Path, name: str
) -> None:
    config = tmp_path / "kb.toml"
    config.write_text("[knowledgeBase]\nremIntervalMs = = 3\n", encoding="utf-8")
    module, words = command_line(name, tmp_path, "--json", "--config", str(config))
    done = run_module(module, *words, home=tmp_path / "home")
    assert done.returncode == 2, done.stderr
    assert f"{config}:2" in the_one_failure_object(done.stdout)["error"]


@pytest.mark.parametrize("name", COMMANDS)
def test_a_store_down_under_json_is_one_failure_object_and_exit_1(
    tmp_path: Path, name: str
) -> None:
    """Chroma commands: a server URL where nothing listens. SQLite-only commands: a graph
    path SQLite cannot open (a folder)."""
    if COMMANDS[name][2]:
        config = write_config(tmp_path, f'chromaUrl = "http://127.0.0.1:{free_port()}"',
                              "reconciliationEnabled = true")
    else:
        (tmp_path / "a-folder").mkdir()
        config = write_config(tmp_path, 'graphDbPath = "a-folder"')
    module, words = command_line(name, tmp_path, "--json", "--config", str(config))
    done = run_module(module, *words, home=tmp_path / "home")
    assert done.returncode == 1, done.stderr
    the_one_failure_object(done.stdout)


def _main_of(module: str) -> Callable[[list[str]], NoReturn]:
    imported = __import__(module, fromlist=["main"])
    main: Callable[[list[str]], NoReturn] = imported.main
    return main


@pytest.mark.parametrize("name", COMMANDS)
def test_an_unexpected_exception_under_json_is_one_failure_object_with_inert_text(
    tmp_path: Path, name: str, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The exception's traceback is logged (stderr), the command exits 1, and stdout still
    gets its one object, its text escaped so that no terminal acts on it."""
    import core.base.runtime.settings

    def broken(config: str | None) -> NoReturn:
        raise RuntimeError("boom \x1b[2J")

    monkeypatch.setattr(core.base.runtime.settings, "load_config", broken)
    module, words = command_line(name, tmp_path, "--json",
                                 "--config", str(write_config(tmp_path)))
    with pytest.raises(SystemExit) as exited:
        _main_of(module)(words)
    assert exited.value.code == 1
    error = the_one_failure_object(capsys.readouterr().out)["error"]
    assert error == "unexpected RuntimeError: boom \\x1b[2J"


def test_a_command_that_printed_its_object_gets_no_second_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    """A failure after a run printed its figures (here, closing the graph) leaves stdout with
    that one object."""
    import daemons.status
    from core.base.rules.errors import StoreUnavailable
    from daemons.cli.commands import emit_json

    async def printed_then_failed(config: str | None, *, as_json: bool) -> int:
        emit_json({"ok": True})
        raise StoreUnavailable("closing failed")

    monkeypatch.setattr(daemons.status, "show_status", printed_then_failed)
    with pytest.raises(SystemExit) as exited:
        daemons.status.main(["--json", "--config", str(write_config(tmp_path))])
    assert exited.value.code == 1
    assert capsys.readouterr().out == '{"ok": true}\n'
