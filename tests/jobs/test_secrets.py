"""A webhook URL's secrets (user-info, path, query) never appear in logs, `--json`, `status` or
any SQLite table, even when the receiver echoes them back in its error, the URL is malformed,
or an older version stored them.

Run as an operator would: real commands, a real HTTP receiver on 127.0.0.1, a real SQLite
file searched table by table.
"""

from __future__ import annotations

import asyncio
import base64
import json
import socket
import sqlite3
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from core.alerting.alerting_pass import alerting_tick
from core.alerting.stores.alert_records import recent_alerts
from core.base.chroma import VectorStore
from core.base.rules.camel_json import to_json
from core.base.rules.telemetry import EVENT_RECONCILE
from core.base.rules.tenants import TENANT_CONFIG_LABEL
from core.base.runtime.config_file import load_config
from core.base.runtime.context import TickContext
from core.base.state.graph import upsert_node
from core.base.state.graph_db import GraphDB
from core.base.state.state import open_graph
from core.base.state.telemetry import record_ingestion_metric
from core.suite.status import RecentAlert, gather_status
from tests.support import make_settings, run_module, seed

SECRETS = ("PASSWORD", "SECRETPATH", "SECRETQUERY", "alice")


@contextmanager
def refusing_receiver(refusal: Callable[[BaseHTTPRequestHandler], str]) -> Iterator[int]:
    """A real HTTP receiver on 127.0.0.1 that answers every POST with a 401 whose body is
    `refusal(request)`; yields its port."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", "0")))
            body = refusal(self).encode()
            self.send_response(401)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02},
                              daemon=True)
    thread.start()
    try:
        yield int(server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()


def _quoting_decoded_credentials(request: BaseHTTPRequestHandler) -> str:
    auth = request.headers.get("Authorization", "")
    decoded = base64.b64decode(auth.split()[-1]).decode() if auth else ""
    return f"unauthorized: {request.path} as {decoded}"


@pytest.fixture
def echoing_receiver() -> Iterator[int]:
    """A receiver that refuses every alert with a 401 quoting what it was sent: the path,
    the query and the decoded Basic credentials (some real receivers do)."""
    with refusing_receiver(_quoting_decoded_credentials) as port:
        yield port


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def every_stored_value(path: Path) -> str:
    """Every value of every row of every table, as text."""
    connection = sqlite3.connect(path)
    try:
        tables = [r[0] for r in connection.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table'")]
        values = [str(value) for table in tables
                  for row in connection.execute(f'SELECT * FROM "{table}"') for value in row]
    finally:
        connection.close()
    assert values, "the database holds rows"
    return "\n".join(values)


def assert_no_secret(where: str, text: str) -> None:
    leaked = [s for s in SECRETS if s in text]
    assert not leaked, f"{leaked} in {where}"


async def _prepare(config: Path) -> None:
    settings = load_config(str(config)).settings
    graph = await open_graph(settings.state)
    try:
        await upsert_node(graph, "kb-config:acme", TENANT_CONFIG_LABEL,
                                {"version": 3, "repoSlug": "acme/repo"})
    finally:
        await graph.close()
    vectors = await VectorStore.open(settings.chroma)
    try:
        await seed(vectors, settings.chroma.knowledge_base_collection, [
            ("c1", {"tenantId": "acme", "tenantConfigVersion": 1, "ingestedAt": 1})])
    finally:
        await vectors.close()


def test_a_password_bearing_webhook_never_shows_anywhere(
    tmp_path: Path, echoing_receiver: int
) -> None:
    refused = (f"webhook:http://alice:PASSWORD@127.0.0.1:{echoing_receiver}"
               "/hooks/SECRETPATH?token=SECRETQUERY")
    unreachable = f"webhook:http://alice:PASSWORD@127.0.0.1:{closed_port()}/x/SECRETPATH"
    malformed = "webhook:ftp://alice:PASSWORD@example.com/SECRETPATH?token=SECRETQUERY"
    config = tmp_path / "kb.toml"
    config.write_text(
        '[knowledgeBase]\ndataDir = "data"\nreconciliationEnabled = true\n'
        'alertingEnabled = true\n'
        '[[knowledgeBase.alertRules]]\nmetric = "reconcileEvents"\nthreshold = 0\n'
        f'severity = "critical"\nchannels = ["{refused}", "{unreachable}", "console"]\n'
        '[[knowledgeBase.alertRules]]\nmetric = "chunksTotal"\nthreshold = 0\n'
        f'severity = "warning"\nchannels = ["{malformed}"]\n',
        encoding="utf-8")
    asyncio.run(_prepare(config))
    home = tmp_path / "home"

    ticked = run_module("daemons.reconcile", "--tick", "--json", "--config", str(config),
                        home=home)
    assert ticked.returncode == 0, ticked.stderr[-3000:]
    alerting = json.loads(ticked.stdout)["alerting"]
    assert (alerting["fired"], alerting["delivered"], alerting["invalidRules"]) == (3, 1, 1)
    assert "HTTP 401" in ticked.stdout, "the receiver's refusal is reported (scrubbed)"
    assert alerting["alerts"][0]["channel"] == f"webhook:http://127.0.0.1:{echoing_receiver}/…"
    assert "alertRules[1] skipped" in ticked.stderr, "the invalid rule is warned about at load"
    status_json = run_module("daemons.status", "--json", "--config", str(config), home=home)
    status_text = run_module("daemons.status", "--config", str(config), home=home)
    assert status_json.returncode == 0 and status_text.returncode == 0
    assert f"webhook:http://127.0.0.1:{echoing_receiver}/…" in status_text.stdout

    for where, text in [("tick stdout", ticked.stdout), ("tick stderr", ticked.stderr),
                        ("status --json", status_json.stdout),
                        ("status", status_text.stdout),
                        ("status stderr", status_json.stderr + status_text.stderr),
                        ("SQLite", every_stored_value(tmp_path / "data" / "graph.sqlite"))]:
        assert_no_secret(where, text)


async def test_rows_an_older_version_stored_with_the_full_url_are_redacted(
    tmp_path: Path, graph: GraphDB, vectors: VectorStore
) -> None:
    spec = "webhook:http://alice:PASSWORD@127.0.0.1:9/hooks/SECRETPATH?token=SECRETQUERY"
    async with graph.write() as tx:
        await tx.execute(
            "INSERT INTO alerts_fired(fired_at, tenant_id, repo_slug, metric, value, threshold, "
            "severity, channel, subject, delivered, error) VALUES (1, 't1', '*', "
            "'reconcileEvents', 1, 0, 'warning', ?, 's', 0, ?)",
            (spec, "ConnectError: http://alice:PASSWORD@127.0.0.1:9/hooks/SECRETPATH"))
        for channel in (spec, "console"):
            await tx.execute(
                "INSERT INTO alert_cooldowns(tenant_id, repo_slug, metric, severity, channel, "
                "fired_at) VALUES ('t1', '*', 'reconcileEvents', 'warning', ?, 5)", (channel,))
    # Before any pass rewrites them, status already shows them redacted.
    [shown] = [to_json(RecentAlert.of(a)) for a in await recent_alerts(graph)]
    assert_no_secret("status of an old row", repr(shown))

    settings = make_settings(tmp_path, alertingEnabled=True)
    await record_ingestion_metric(graph, tenant_id="t1", event_type=EVENT_RECONCILE)
    await alerting_tick(TickContext(settings, graph, vectors), False)
    assert_no_secret("SQLite", every_stored_value(settings.state.graph_db_path))
    connection = sqlite3.connect(settings.state.graph_db_path)
    try:
        channels = sorted(r[0] for r in connection.execute(
            "SELECT channel FROM alert_cooldowns"))
    finally:
        connection.close()
    assert channels[0] == "console"
    assert channels[1].startswith("webhook:http://127.0.0.1:9/… #")


async def test_status_hides_credentials_in_figures_an_older_version_recorded(
    tmp_path: Path, graph: GraphDB
) -> None:
    old_label = "webhook:http://alice:PASSWORD@127.0.0.1:9/…"
    figures = {"alerts": [{"channel": old_label, "delivered": False,
                           "error": "ConnectError: http://alice:PASSWORD@127.0.0.1:9/x"}]}
    async with graph.write() as tx:
        await tx.execute(
            "INSERT INTO daemon_ticks(daemon, started_at, finished_at, duration_ms, ok, figures) "
            "VALUES ('alerting', 1, 2, 1, 1, ?)", (json.dumps(figures),))
    settings = make_settings(tmp_path, graphDbPath=graph.location)
    shown = to_json(await gather_status(settings))
    assert_no_secret("status of an old tick", json.dumps(shown))
    [alert] = shown["ticks"]["alerting"]["figures"]["alerts"]
    assert alert["channel"] == "webhook:http://127.0.0.1:9/…"


# --------------------------------------------------------------------------------------------
# Every failure path, every output: a password, a token and their encoded forms planted in
# every secret-bearing part of the webhook URLs (user-info, path, query).
# --------------------------------------------------------------------------------------------

PLANTED_USER = "alice"
PLANTED_PASSWORD = "S3cr3t/P@ss w0rd!"
PLANTED_TOKEN = "PATHTOKEN123"
OTHER_PASSWORD = "OTHERPASS9"
#: The Chroma server token, planted in `chromaAuthTokenFile` (a file the search skips).
CHROMA_TOKEN = "ChromaTok-5e6f7a8b9c"
TOKEN_FILE_NAME = "chroma.token"


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def planted_webhook(port: int) -> str:
    """A webhook URL with the password in its user-info and query and the token in its path
    and (base64) query, as an operator might write one."""
    password = quote(PLANTED_PASSWORD, safe="")
    return (f"webhook:http://{PLANTED_USER}:{password}@127.0.0.1:{port}/hooks/{PLANTED_TOKEN}"
            f"?sig={_b64(PLANTED_TOKEN)}&pw={password}")


#: Each secret in each form it could leak in: raw, percent-encoded, base64, and the Basic
#: credentials httpx sends (of the pair as sent and as written).
PLANTED_FORMS = tuple(sorted({
    form
    for secret in (PLANTED_PASSWORD, PLANTED_TOKEN, OTHER_PASSWORD, CHROMA_TOKEN)
    for form in (secret, quote(secret, safe=""), quote(secret), _b64(secret))
} | {_b64(f"{PLANTED_USER}:{PLANTED_PASSWORD}"),
     _b64(f"{PLANTED_USER}:{quote(PLANTED_PASSWORD, safe='')}"),
     _b64(f"bob:{OTHER_PASSWORD}")}))


def assert_no_planted_form(where: str, text: str | bytes) -> None:
    haystack = text if isinstance(text, bytes) else text.encode("utf-8", "replace")
    leaked = [form for form in PLANTED_FORMS if form.encode() in haystack]
    assert not leaked, f"{leaked} in {where}"


def _quoting_the_request(request: BaseHTTPRequestHandler) -> str:
    return (f"denied {request.headers.get('Authorization', '')} for {request.path} "
            f"headers={dict(request.headers)}")


@pytest.fixture
def header_echoing_receiver() -> Iterator[int]:
    """A receiver that refuses every alert with a 401 quoting the request as it came: the
    Authorization header first (base64, as httpx sent it), then the path and query, then
    every header."""
    with refusing_receiver(_quoting_the_request) as port:
        yield port


def _config(path: Path, data_dir: str, port: int, **keys: str) -> Path:
    """A config with alerting on, one valid rule on the planted webhook and one invalid rule
    whose (malformed) webhook holds another password."""
    extra = "".join(f'{key} = "{value}"\n' for key, value in keys.items())
    path.write_text(
        f'[knowledgeBase]\ndataDir = "{data_dir}"\nreconciliationEnabled = true\n'
        f'alertingEnabled = true\n{extra}'
        '[[knowledgeBase.alertRules]]\nmetric = "reconcileEvents"\nthreshold = 0\n'
        f'severity = "critical"\nchannels = ["{planted_webhook(port)}", "console"]\n'
        '[[knowledgeBase.alertRules]]\nmetric = "bogus"\nthreshold = 0\n'
        'severity = "critical"\n'
        f'channels = ["webhook:ftp://bob:{OTHER_PASSWORD}@127.0.0.1/x?{OTHER_PASSWORD}"]\n',
        encoding="utf-8")
    return path


def test_no_form_of_a_planted_secret_reaches_any_output_on_any_failure_path(
    tmp_path: Path, header_echoing_receiver: int
) -> None:
    port = header_echoing_receiver
    home = tmp_path / "home"
    # The receiver echoes the request (Basic credentials, path, query) in its refusal.
    echoing = _config(tmp_path / "kb.toml", "data", port)
    asyncio.run(_prepare(echoing))
    # A folder where the telemetry spool file should be (the reconcile tick cannot spool).
    spool = _config(tmp_path / "kb-spool.toml", "data-spool", port)
    (tmp_path / "data-spool" / "telemetry-spool.jsonl").mkdir(parents=True)
    # A file where the queue's folder should be (the tests run as root: chmod would not stop
    # them, a file in the way does).
    (tmp_path / "data-queue").mkdir()
    (tmp_path / "data-queue" / "blocker").write_text("not a folder\n", encoding="utf-8")
    queue = _config(tmp_path / "kb-queue.toml", "data-queue", port,
                    lazyEdgesQueuePath="data-queue/blocker/lazy-edges.jsonl")
    # A store that is down, reached with a token.
    token_file = tmp_path / TOKEN_FILE_NAME
    token_file.write_text(CHROMA_TOKEN + "\n", encoding="utf-8")
    down = _config(tmp_path / "kb-down.toml", "data-down", port,
                   chromaUrl=f"http://127.0.0.1:{closed_port()}",
                   chromaAuthTokenFile=str(token_file))

    runs = {
        "echoing receiver": (run_module("daemons.reconcile", "--tick", "--json", "--config",
                                        str(echoing), home=home), 0),
        "folder as spool": (run_module("daemons.reconcile", "--tick", "--json", "--config",
                                       str(spool), home=home), 1),
        "file as queue folder": (run_module("daemons.drain", "--tick", "--json", "--config",
                                            str(queue), home=home), 1),
        "store down": (run_module("daemons.drain", "--tick", "--json", "--config", str(down),
                                  home=home), 1),
        "store down, reconcile": (run_module("daemons.reconcile", "--tick", "--json",
                                             "--config", str(down), home=home), 1),
        "store down, explain": (run_module("daemons.reconcile", "explain", "acme", "--config",
                                           str(down), home=home), 1),
    }
    for config in (echoing, spool, queue, down):
        # status cannot read a queue behind a file (exit 1); it reads the others.
        expected = 1 if config == queue else 0
        runs[f"status --json {config.name}"] = (
            run_module("daemons.status", "--json", "--config", str(config), home=home),
            expected)
        runs[f"status {config.name}"] = (
            run_module("daemons.status", "--config", str(config), home=home), expected)

    for where, (done, expected) in runs.items():
        assert done.returncode == expected, (where, done.stderr[-3000:])
        if "--json" in done.args and not where.startswith("status --json kb-queue"):
            assert done.stdout.count("\n") == 1, (where, done.stdout, done.stderr[-2000:])
            assert isinstance(json.loads(done.stdout), dict), where
        assert_no_planted_form(f"{where}: stdout", done.stdout)
        assert_no_planted_form(f"{where}: stderr", done.stderr)
    echoed = json.loads(runs["echoing receiver"][0].stdout)["alerting"]
    assert (echoed["fired"], echoed["delivered"]) == (2, 1), echoed
    [refused] = [a for a in echoed["alerts"] if not a["delivered"]]
    assert refused["error"].startswith("HTTP 401: denied Basic …"), refused["error"]
    assert_no_planted_form("SQLite", every_stored_value(tmp_path / "data" / "graph.sqlite"))
    for path in sorted(p for p in tmp_path.rglob("*") if p.is_file()):
        # The configuration and the token file hold them, by design.
        if path.suffix != ".toml" and path.name != TOKEN_FILE_NAME:
            assert_no_planted_form(str(path.relative_to(tmp_path)), path.read_bytes())


def test_a_refusal_under_tick_json_is_one_json_object_and_no_traceback(tmp_path: Path) -> None:
    config = _config(tmp_path / "kb.toml", "data", closed_port())
    queue = tmp_path / "data" / "memory-core" / "lazy-edges.jsonl"
    queue.parent.mkdir(parents=True)
    (tmp_path / "elsewhere.jsonl").write_text("", encoding="utf-8")
    queue.symlink_to(tmp_path / "elsewhere.jsonl")

    done = run_module("daemons.drain", "--tick", "--json", "--config", str(config),
                      home=tmp_path / "home")

    assert done.returncode == 2, done.stderr[-3000:]
    [shown] = [json.loads(line) for line in done.stdout.splitlines()]
    assert shown["ok"] is False and "symbolic link" in shown["error"]
    assert "Traceback" not in done.stderr and '"exception"' not in done.stderr
    [failed] = [json.loads(line) for line in done.stderr.splitlines()
                if '"tick.failed"' in line]
    assert failed["errorType"] == "QueuePathIsSymlink" and "symbolic link" in failed["error"]
    [error_line] = [line for line in done.stderr.splitlines()
                    if line.startswith("daemons.drain: error:")]
    assert "symbolic link" in error_line
    assert_no_planted_form("stderr", done.stderr)
