"""Server mode as secured deployments run it: a real `chroma run` behind a token-checking reverse
proxy that serves it under a path prefix. With the right token every command works through the
proxy; with a wrong one every command that needs Chroma exits 1 with one line on stderr and
changes nothing, neither in the data folder nor on the server."""

from __future__ import annotations

import asyncio
import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from core.base.chroma import VectorStore
from core.base.config.config import Settings
from core.base.runtime.config_file import load_config
from tests.chroma_server import ChromaServer
from tests.support import run_module, seed, seed_acme_drift
from tests.token_proxy import TokenProxy, token_proxy

TOKEN = "kb-test-token-3f9a1c"
PREFIX = "/kb/chroma"


@pytest.fixture
def chroma(tmp_path: Path) -> Iterator[ChromaServer]:
    server = ChromaServer(tmp_path / "server-data", home=tmp_path / "home")
    server.start()
    yield server
    server.stop()


def write_config(folder: Path, *, url: str, token: str, header: str) -> Path:
    """`folder/kb.toml` in server mode through the proxy, its token in `folder/token`."""
    (folder / "token").write_text(token + "\n", encoding="utf-8")
    lines = ["[knowledgeBase]", 'dataDir = "data"', f'chromaUrl = "{url}"',
             'chromaAuthTokenFile = "token"', f'chromaAuthHeader = "{header}"',
             "reconciliationEnabled = true", "reconciliationAutoTombstone = true",
             "reconciliationMaxStaleFraction = 1.0", 'logFormat = "json"']
    path = folder / "kb.toml"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


async def _prepare(settings: Settings) -> None:
    """Tenant `acme` at version 4, two of its four chunks actionable; one memory row."""
    await seed_acme_drift(settings)
    vectors = await VectorStore.open(settings.chroma)
    try:
        await seed(vectors, settings.chroma.memory_collection,
                   [("m1", {"sessionId": "s1", "createdAt": 1_000})])
        await seed(vectors, settings.chroma.summary_collection,
                   [("sum1", {"sessionId": "s1", "title": "t", "createdAt": 1_000})])
    finally:
        await vectors.close()


def server_rows(port: int) -> dict[str, Any]:
    """Every collection's ids and metadatas, read from the server itself (not the proxy)."""
    import chromadb

    client = chromadb.HttpClient(host="127.0.0.1", port=port)
    return {c.name: c.get(include=["metadatas"]) for c in client.list_collections()}


def files_under(folder: Path) -> dict[str, bytes]:
    """Each file's content by relative path; SQLite's -wal/-shm companions by name only (an
    open and close may remove an empty WAL: housekeeping, not a change)."""
    return {str(p.relative_to(folder)): b"" if p.name.endswith(("-wal", "-shm"))
            else p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def commands(config: Path, archive: str) -> list[tuple[str, ...]]:
    """Every command that opens Chroma, as an operator types it."""
    kb = ("--config", str(config))
    return [("daemons.reconcile", "--tick", "--json", *kb),
            ("daemons.reconcile", "explain", "acme", "--json", *kb),
            ("daemons.reconcile", "restore", archive, *kb),
            ("daemons.drain", "--tick", "--json", *kb),
            ("daemons.backfill", "--days", "1", *kb)]


def run(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_module(*args, home=tmp_path / "home")


def test_behind_a_token_proxy_under_a_path_prefix_the_right_token_works_a_wrong_one_changes_nothing(
    tmp_path: Path, chroma: ChromaServer
) -> None:
    header = "Authorization"
    with token_proxy(upstream_port=chroma.port, prefix=PREFIX, header=header,
                     token=TOKEN) as proxy:
        # A trailing slash and an upper-case scheme are ordinary ways to write the same URL.
        config = write_config(tmp_path, url=proxy.url.replace("http://", "HTTP://") + "/",
                              token=TOKEN, header=header)
        settings = load_config(str(config)).settings
        assert settings.chroma.url == proxy.url
        asyncio.run(_prepare(settings))
        _right_token_runs_every_command(tmp_path, config, proxy, chroma)
        archive = next((tmp_path / "data/tombstones").iterdir())

        (tmp_path / "token").write_text("wrong-token\n", encoding="utf-8")
        before_files = files_under(tmp_path / "data")
        before_rows = server_rows(chroma.port)
        forwarded = proxy.log.forwarded
        for argv in commands(config, str(archive)):
            done = run(tmp_path, *argv)
            assert done.returncode == 1, (argv, done.stdout, done.stderr)
            [line] = done.stderr.splitlines()
            assert line.startswith(f"kb-{argv[0].split('.')[1]}") or \
                argv[0].split(".")[1] in line.split(":")[0], line
            assert "cannot open" in line and proxy.url in line, line
            assert TOKEN not in done.stdout + done.stderr
            assert "wrong-token" not in done.stdout + done.stderr
            if "--tick" in argv:  # explain: see the report (its --json error path)
                assert json.loads(done.stdout)["ok"] is False
        assert proxy.log.forwarded == forwarded, "nothing got past the proxy"
        after_files = files_under(tmp_path / "data")
        assert set(after_files) <= set(before_files), "no file was created"
        assert after_files == {k: v for k, v in before_files.items() if k in after_files}, \
            "nor changed"
        assert server_rows(chroma.port) == before_rows


def _right_token_runs_every_command(tmp_path: Path, config: Path, proxy: TokenProxy,
                                    chroma: ChromaServer) -> None:
    ticked = run(tmp_path, "daemons.reconcile", "--tick", "--json", "--config", str(config))
    assert ticked.returncode == 0, ticked.stderr
    figures = json.loads(ticked.stdout)
    assert figures["ok"] is True and figures["tenants"][0]["tombstonedCount"] == 2
    kb_ids = sorted(server_rows(chroma.port)["neo-knowledge-base"]["ids"])
    assert kb_ids == ["grace", "now"], "the pass acted on the server behind the proxy"

    explained = run(tmp_path, "daemons.reconcile", "explain", "acme", "--json",
                    "--config", str(config))
    assert explained.returncode == 0, explained.stderr
    assert json.loads(explained.stdout)["tenantId"] == "acme"

    [archive] = figures["archives"]
    restored = run(tmp_path, "daemons.reconcile", "restore", archive, "--json",
                   "--config", str(config))
    assert restored.returncode == 0, restored.stderr
    assert json.loads(restored.stdout)["restored"] == 2
    assert sorted(server_rows(chroma.port)["neo-knowledge-base"]["ids"]) == [
        "grace", "now", "old1", "old2"]

    drained = run(tmp_path, "daemons.drain", "--tick", "--json", "--config", str(config))
    assert drained.returncode == 0, drained.stderr
    assert json.loads(drained.stdout)["ok"] is True

    status = run(tmp_path, "daemons.status", "--json", "--config", str(config))
    assert status.returncode == 0, status.stderr
    assert TOKEN not in status.stdout + status.stderr
    assert proxy.log.forwarded > 0 and proxy.log.refused == []
    assert not (tmp_path / "data/chroma").exists(), "nothing fell back to an embedded store"


def test_the_token_goes_in_x_chroma_token_when_chroma_auth_header_says_so(
    tmp_path: Path, chroma: ChromaServer
) -> None:
    with token_proxy(upstream_port=chroma.port, prefix=PREFIX, header="X-Chroma-Token",
                     token=TOKEN) as proxy:
        config = write_config(tmp_path, url=proxy.url, token=TOKEN, header="X-Chroma-Token")
        asyncio.run(_prepare(load_config(str(config)).settings))
        argv = ("daemons.reconcile", "--tick", "--dry-run", "--json", "--config", str(config))
        done = run(tmp_path, *argv)
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["tenants"][0]["actionableCount"] == 2
        assert proxy.log.refused == []
        # The same token in the other header is refused by the proxy: the header is honoured.
        config.write_text(config.read_text().replace('"X-Chroma-Token"', '"Authorization"'))
        refused = run(tmp_path, *argv)
        assert refused.returncode == 1 and proxy.log.refused, refused.stderr
        assert TOKEN not in refused.stdout + refused.stderr


def test_a_tenant_the_store_does_not_have_is_exit_1_never_the_default_tenant(
    tmp_path: Path,
) -> None:
    config = tmp_path / "kb.toml"
    config.write_text('[knowledgeBase]\ndataDir = "data"\nchromaTenant = "acme-prod"\n'
                      'reconciliationEnabled = true\n', encoding="utf-8")
    done = run(tmp_path, "daemons.reconcile", "--tick", "--json", "--config", str(config))
    assert done.returncode == 1, done.stderr
    [line] = done.stderr.splitlines()
    assert "cannot open: Tenant [acme-prod] not found" in line
    assert json.loads(done.stdout)["ok"] is False
