"""The Chroma token never shows, in any encoding at any alignment, through the commands: a
token-checking proxy in front of a real `chroma run` answers its refusals with the request
quoted back (the token in it raw, percent-encoded, in hex and in base64 at each of the three
alignments), as a plain body and as a Chroma error's message. Whatever the commands print
(stdout, stderr, `--json`), record (every table of the state) and keep (every file of the data
folder) is searched for the token with the tests' own detector (tests/token_proxy.py). And a
`stateUrl` query that names a credential, in any spelling, is refused without its value."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from core.base.runtime.config_file import load_config
from tests.chroma_server import ChromaServer
from tests.support import run_module, seed_acme_drift
from tests.token_proxy import secret_encodings_in, token_proxy

#: What the configuration sends (the secret under test); the proxy expects another one when
#: it is to refuse every request.
TOKEN = "kb-S3cr3t_tok/9Qx+Zp2w=Lm7vR4"
PREFIX = "/kb/chroma"


@pytest.fixture(scope="module")
def chroma(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ChromaServer]:
    root = tmp_path_factory.mktemp("chroma")
    server = ChromaServer(root / "server-data", home=root / "home")
    server.start()
    yield server
    server.stop()


def write_config(folder: Path, url: str) -> Path:
    (folder / "token").write_text(TOKEN + "\n", encoding="utf-8")
    path = folder / "kb.toml"
    path.write_text("\n".join([
        "[knowledgeBase]", 'dataDir = "data"', f'chromaUrl = "{url}"',
        'chromaAuthTokenFile = "token"', "reconciliationEnabled = true",
        "reconciliationAutoTombstone = true", "reconciliationMaxStaleFraction = 1.0",
        'logFormat = "json"']) + "\n", encoding="utf-8")
    return path


def leaks(text: str) -> list[str]:
    return secret_encodings_in(text, TOKEN)


def everything_kept(data: Path) -> str:
    """Every file of the data folder as text, and every value of every table of the state."""
    kept = [p.read_bytes().decode("latin-1") for p in sorted(data.rglob("*")) if p.is_file()]
    graph = data / "graph.sqlite"
    if graph.exists():
        db = sqlite3.connect(f"file:{graph}?mode=ro", uri=True)
        try:
            for (table,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'"):
                kept += [repr(row) for row in db.execute(f'SELECT * FROM "{table}"')]
        finally:
            db.close()
    return "\n".join(kept)


def run_all(tmp_path: Path, commands: list[tuple[str, ...]]) -> None:
    """Each command fails (exit 1) with one error line, one JSON object under `--json`, and
    nothing it prints carries the token."""
    for argv in commands:
        done: subprocess.CompletedProcess[str] = run_module(*argv, home=tmp_path / "home")
        assert done.returncode == 1, (argv, done.stdout, done.stderr[-3000:])
        assert leaks(done.stdout) == [] and leaks(done.stderr) == [], argv
        if "--json" in argv:
            assert json.loads(done.stdout)["ok"] is False, argv


def test_a_proxy_refusing_every_request_with_the_request_echoed_never_shows_the_token(
    tmp_path: Path, chroma: ChromaServer,
) -> None:
    with token_proxy(upstream_port=chroma.port, prefix=PREFIX, header="Authorization",
                     token="the-token-the-proxy-wants", echo=lambda _m, _p: False) as proxy:
        config = write_config(tmp_path, proxy.url)
        kb = ("--config", str(config))
        run_all(tmp_path, [("daemons.drain", "--tick", "--json", *kb),
                           ("daemons.reconcile", "explain", "acme", *kb)])
        assert proxy.log.refused, "the proxy refused (and echoed) the commands' requests"
    assert leaks(everything_kept(tmp_path / "data")) == []


def test_a_store_error_whose_message_echoes_the_request_never_shows_the_token(
    tmp_path: Path, chroma: ChromaServer,
) -> None:
    """The token is right, the store opens; then every collection read fails with a Chroma
    error whose message quotes the request: the pass fails, records and logs that failure,
    and so does `explain`."""
    echoing = {"on": False}
    with token_proxy(upstream_port=chroma.port, prefix=PREFIX, header="Authorization",
                     token=TOKEN, echo_json=True,
                     echo=lambda method, path: echoing["on"] and path.endswith("/get")
                     ) as proxy:
        config = write_config(tmp_path, proxy.url)
        asyncio.run(seed_acme_drift(load_config(str(config)).settings))
        echoing["on"] = True
        kb = ("--config", str(config))
        run_all(tmp_path, [("daemons.reconcile", "--tick", "--json", *kb),
                           ("daemons.reconcile", "explain", "acme", "--json", *kb)])
        assert "echo" in proxy.log.refused
    kept = everything_kept(tmp_path / "data")
    assert "daemon_ticks" in kept, "the failed tick is recorded, with its error"
    assert leaks(kept) == []


@pytest.mark.parametrize("query", ["password =s3cret-pw", "pass%77ord=s3cret-pw",
                                   "PWD=s3cret-pw", "sslmode=require&token=s3cret-pw"])
def test_a_state_url_naming_a_credential_is_refused_and_never_echoed(
    tmp_path: Path, query: str,
) -> None:
    config = tmp_path / "kb.toml"
    config.write_text('[knowledgeBase]\ndataDir = "data"\n'
                      f'stateUrl = "postgresql://kb@127.0.0.1:5432/kb?{query}"\n')
    done = run_module("daemons.status", "--json", "--config", str(config),
                      home=tmp_path / "home")
    assert done.returncode == 2
    [line] = done.stderr.splitlines()
    assert "knowledgeBase.stateUrl" in line and "PGPASSFILE" in line
    assert "s3cret-pw" not in done.stdout + done.stderr
    assert not (tmp_path / "data").exists()
