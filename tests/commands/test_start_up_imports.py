"""Fast commands (issue 34 item 8): a command that never opens Chroma never imports chromadb,
and one that does imports it only once it knows it needs it (after its flags parse). The
commands that run no daemon job (`kb-status`, `kb-tenants`, `kb-enqueue`) load none of the
daemon machinery either (the scheduler, and through it the metrics exposition).

Each command runs in a fresh interpreter of its own, on a real embedded store, and reports
which of those modules it loaded; its output is not looked at here (other tests do).
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pytest

from core.base.runtime.config_file import load_config
from tests.support import REPO, child_env, seed_acme_drift

#: Runs `<module>.main(argv)` as its console script would, then writes its exit code and which
#: of the watched modules it loaded to the report file (stdout and stderr are the command's).
PROBE = """
import importlib, json, sys
report, module, *argv = sys.argv[1:]
code = 0
try:
    importlib.import_module(module).main(argv)
except SystemExit as exc:
    code = exc.code
watched = ("chromadb", "core.suite.scheduler", "prometheus_client")
with open(report, "w", encoding="utf-8") as out:
    json.dump({"code": code, "loaded": [m for m in watched if m in sys.modules]}, out)
"""

DAEMON_MACHINERY = ["core.suite.scheduler", "prometheus_client"]


@pytest.fixture(scope="module")
def config(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A config whose embedded store holds tenant `acme` and four of its chunks."""
    root = tmp_path_factory.mktemp("fast-commands")
    path = root / "kb.toml"
    path.write_text('[knowledgeBase]\ndataDir = "data"\n', encoding="utf-8")
    asyncio.run(seed_acme_drift(load_config(str(path)).settings))
    return path


def loaded_by(config: Path, module: str, *argv: str) -> tuple[int, list[str]]:
    """Run `module`'s command with `argv` (after `--config`) in a fresh interpreter: its exit
    code and the watched modules it loaded."""
    report = config.parent / "probe.json"
    report.unlink(missing_ok=True)
    done = subprocess.run(
        [sys.executable, "-c", PROBE, str(report), module, "--config", str(config), *argv],
        cwd=REPO, env=child_env(config.parent / "home"), input="", capture_output=True,
        text=True, timeout=120, check=False)
    assert report.exists(), done.stderr[-4000:]
    found = json.loads(report.read_text(encoding="utf-8"))
    return found["code"], found["loaded"]


@pytest.mark.parametrize(("module", "argv", "code"), [
    ("daemons.status", ["--help"], 0),
    ("daemons.status", [], 0),
    ("daemons.status", ["--json"], 0),
    ("daemons.status", ["--health"], 0),
    ("daemons.status", ["--days", "3"], 2),
    ("daemons.tenants", ["show", "acme"], 0),
    ("daemons.tenants", ["list"], 0),
    ("daemons.tenants", ["set-policy", "acme", "--orphan-version-gap", "3"], 0),
    ("daemons.tenants", ["set-policy", "acme", "--auto-tombstone", "maybe"], 2),
    ("daemons.enqueue", [], 0),
], ids=lambda value: " ".join(value) if isinstance(value, list) else str(value))
def test_a_command_that_needs_no_store_of_chroma_loads_neither_chroma_nor_a_daemon(
    config: Path, module: str, argv: list[str], code: int,
) -> None:
    assert loaded_by(config, module, *argv) == (code, [])


@pytest.mark.parametrize("argv", [["--help"], ["explain", "--help"], ["explain", "--bogus"],
                                  ["explain"]],
                         ids=" ".join)
def test_explain_does_not_load_chroma_before_its_flags_parse(
    config: Path, argv: list[str],
) -> None:
    code, loaded = loaded_by(config, "daemons.reconcile", *argv)
    assert code == (0 if "--help" in argv else 2)
    assert "chromadb" not in loaded


def test_explain_loads_chroma_once_it_reads_the_tenants_chunks(config: Path) -> None:
    code, loaded = loaded_by(config, "daemons.reconcile", "explain", "acme")
    assert code == 0
    assert loaded == ["chromadb", *DAEMON_MACHINERY]
