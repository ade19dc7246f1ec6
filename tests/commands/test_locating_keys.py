"""The keys that say where data lives or what is acted on never fall back to a default: each
wrong value an operator could type is exit 2 with one line on stderr naming the file, the key
and what was expected, before any store opens, on every command, and nothing is created."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from core.base.config.config import KEYS
from tests.support import run_module

#: Every command, as typed (each takes --config after its arguments). `restore` names an
#: archive outside the data folder; `enqueue` gets one valid line on stdin.
COMMANDS: tuple[tuple[str, ...], ...] = (
    ("daemons",),
    ("daemons.drain",),
    ("daemons.drain", "--tick", "--json"),
    ("daemons.reconcile",),
    ("daemons.reconcile", "--tick", "--dry-run"),
    ("daemons.reconcile", "explain", "acme", "--json"),
    ("daemons.reconcile", "restore", "{archive}"),
    ("daemons.status", "--json"),
    ("daemons.tenants", "list"),
    ("daemons.tenants", "set-config", "acme"),
    ("daemons.backfill", "--days", "1"),
    ("daemons.enqueue",),
    ("daemons.demo",),
)

SERVER = 'chromaUrl = "http://127.0.0.1:9"\n'

#: (what the operator wrote in [knowledgeBase], the key it must name, words of the reason,
#: text that must never be echoed). Each is a mistake made in practice: a number for a path,
#: a stray space, credentials in the URL, a collection name Chroma refuses...
WRONG_VALUES: tuple[tuple[str, str, str, str | None], ...] = (
    ("dataDir = 3", "dataDir", "expected string (path), got 3", None),
    ('dataDir = ""', "dataDir", "it is empty", None),
    ('dataDir = " /srv/kb"', "dataDir", "leading or trailing whitespace", None),
    ('dataDir = "kb\\u0000data"', "dataDir", "control character", None),
    ("chromaPath = []", "chromaPath", "expected string (path), got []", None),
    ("graphDbPath = false", "graphDbPath", "got False", None),
    ('lazyEdgesQueuePath = "queue\\u0007.jsonl"', "lazyEdgesQueuePath", "control character", None),
    ('chromaUrl = "http://kbuser:Pa55word@127.0.0.1:8000"', "chromaUrl",
     "user-info (user:password@); put the credential in a file named by chromaAuthTokenFile",
     "Pa55word"),
    ('chromaUrl = "http://127.0.0.1:8000/?token=T0KENVALUE"', "chromaUrl",
     "query or fragment; a credential goes in a file named by chromaAuthTokenFile",
     "T0KENVALUE"),
    ('chromaUrl = " http://127.0.0.1:8000"', "chromaUrl", "leading or trailing whitespace",
     None),
    ('chromaUrl = "127.0.0.1:8000"', "chromaUrl", "must start with http:// or https://", None),
    ('chromaUrl = "tcp://127.0.0.1:8000"', "chromaUrl", "must start with http:// or https://",
     None),
    ('chromaUrl = "http://::1:8000"', "chromaUrl", "IPv6 address must be in brackets", None),
    ('chromaUrl = "http://127.0.0.1:80000"', "chromaUrl", "port 80000 is not in 1-65535", None),
    ('chromaUrl = "http://chroma.internal:8000/a//b"', "chromaUrl", "empty, '.' or '..' segment",
     None),
    ("chromaUrl = 8000", "chromaUrl", "got 8000", None),
    ('knowledgeBaseCollection = "kb"', "knowledgeBaseCollection", "3-512 letters", None),
    ('memoryCollection = "agent memory"', "memoryCollection", "3-512 letters", None),
    ('summaryCollection = "neo..sessions"', "summaryCollection", "no '..'", None),
    ('knowledgeBaseCollection = "10.0.0.1"', "knowledgeBaseCollection",
     "not an IPv4 address", None),
    ('chromaTenant = "acme/prod"', "chromaTenant", "only letters, digits", None),
    ("chromaDatabase = 5", "chromaDatabase", "got 5", None),
    ('chromaAuthHeader = "Bearer"', "chromaAuthHeader", '"Authorization" | "X-Chroma-Token"',
     None),
    (SERVER + 'chromaAuthTokenFile = "no-such-token"', "chromaAuthTokenFile",
     "no-such-token: cannot read it: No such file or directory", None),
    (SERVER + 'chromaAuthTokenFile = "empty-token"', "chromaAuthTokenFile",
     "empty-token: cannot be used as a token: it is empty", None),
    (SERVER + 'chromaAuthTokenFile = "two-line-token"', "chromaAuthTokenFile",
     "two-line-token: cannot be used as a token: it has a character other than visible ASCII",
     "SECRETLINE"),
    (SERVER + 'chromaAuthTokenFile = "."', "chromaAuthTokenFile", "cannot read it: Is a "
     "directory", None),
    ('chromaUrl = "https://127.0.0.1:9"\nchromaCaFile = "no-such-ca.pem"', "chromaCaFile",
     "no-such-ca.pem: cannot read it", None),
    ('stateUrl = "postgresql://kb:Pa55state@127.0.0.1:5432/kb"', "stateUrl",
     "it holds a password: put it in PGPASSFILE or PGPASSWORD", "Pa55state"),
    ('stateUrl = "postgresql://127.0.0.1:5432"', "stateUrl", "it names no database", None),
    ('stateUrl = "mysql://127.0.0.1/kb"', "stateUrl", "expected postgresql://", None),
    (SERVER + 'memoryCoreChromaUrl = "http://mc:Pa55mem@127.0.0.1:8001"', "memoryCoreChromaUrl",
     "user-info (user:password@)", "Pa55mem"),
    ('memoryCoreChromaUrl = "http://127.0.0.1:8001"', "memoryCoreChromaUrl",
     "is set but chromaUrl is empty", None),
    ("neoRoot = 5", "neoRoot", "got 5", None),
    ('neoRoot = "no-such-checkout"', "neoRoot", "not a folder (a neo.mjs checkout)", None),
    ('neoRoot = "."', "neoRoot", "holds no .neo-ai-data folder", None),
    ('graphSchema = "Neo"', "graphSchema", '"auto" | "kb" | "neo"', None),
)


def prepare(tmp_path: Path, table: str) -> Path:
    """A config file holding `table` under [knowledgeBase], the token files the cases name,
    and an archive outside the data folder; returns the config file."""
    (tmp_path / "empty-token").write_text("")
    (tmp_path / "two-line-token").write_text("SECRETLINE\nSECOND\n")
    (tmp_path / "archive.jsonl").write_text("")
    config = tmp_path / "kb.toml"
    config.write_text(table if table.startswith("[") else f"[knowledgeBase]\n{table}\n",
                      encoding="utf-8")
    return config


def run(tmp_path: Path, command: tuple[str, ...], config: Path
        ) -> subprocess.CompletedProcess[str]:
    argv = [a.replace("{archive}", str(tmp_path / "archive.jsonl")) for a in command]
    stdin = '{"source":"memory:a","target":"session:b","relationship":"R"}\n' \
        if command == ("daemons.enqueue",) else None
    return run_module(*argv, "--config", str(config), home=tmp_path / "home", stdin=stdin,
                      timeout=60)


def files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if "home" not in p.relative_to(folder).parts)


def assert_refused(done: subprocess.CompletedProcess[str], config: Path, *needles: str) -> None:
    assert done.returncode == 2, (done.returncode, done.stdout, done.stderr)
    [line] = done.stderr.splitlines()
    assert f"error: {config}: " in line, line
    for needle in needles:
        assert needle in line, line


@pytest.mark.parametrize(("table", "key", "reason", "never_shown"), WRONG_VALUES,
                         ids=[f"{i}-{case[1]}" for i, case in enumerate(WRONG_VALUES)])
def test_each_wrong_value_of_a_locating_key_is_exit_2_naming_file_and_key_and_creates_nothing(
    tmp_path: Path, table: str, key: str, reason: str, never_shown: str | None
) -> None:
    config = prepare(tmp_path, table)
    before = files(tmp_path)
    # Each case on a different command, so that together they cover every command.
    command = COMMANDS[WRONG_VALUES.index((table, key, reason, never_shown)) % len(COMMANDS)]
    done = run(tmp_path, command, config)
    assert_refused(done, config, f"knowledgeBase.{key}", reason)
    if never_shown is not None:
        assert never_shown not in done.stdout + done.stderr
    assert files(tmp_path) == before, command


def test_the_cases_cover_every_locating_key() -> None:
    assert {case[1] for case in WRONG_VALUES} == {k.name for k in KEYS if k.locating}


@pytest.mark.parametrize("table", ["[knowledgebase]", "[knowledge_base]", "[KnowledgeBase]"])
def test_a_near_miss_table_is_exit_2_on_every_command_and_creates_nothing(
    tmp_path: Path, table: str
) -> None:
    config = prepare(tmp_path, f'{table}\ndataDir = "/srv/kb"\n')
    before = files(tmp_path)
    commands = COMMANDS if table == "[knowledgebase]" else COMMANDS[:2]
    for command in commands:
        done = run(tmp_path, command, config)
        assert_refused(done, config, f"table {table} is not read",
                       "must be spelled [knowledgeBase]")
    assert files(tmp_path) == before
    assert not Path("/srv/kb").exists()


def test_a_knowledge_base_that_is_not_a_table_is_exit_2(tmp_path: Path) -> None:
    config = prepare(tmp_path, "[knowledgeBase]\n")
    config.write_text('knowledgeBase = "/srv/kb"\n')
    done = run(tmp_path, ("daemons.reconcile", "--tick"), config)
    assert_refused(done, config, "knowledgeBase must be a table")
