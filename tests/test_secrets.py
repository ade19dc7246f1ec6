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
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from core.jobs.alerting import alerting_tick
from core.jobs.context import TickContext
from core.reports.status import RecentAlert, gather_status
from core.rules.figures import to_json
from core.rules.telemetry import EVENT_RECONCILE
from core.rules.tenants import TENANT_CONFIG_LABEL
from core.stores.alert_records import recent_alerts
from core.stores.chroma import VectorStore
from core.stores.config_file import load_config
from core.stores.graph import upsert_node
from core.stores.sqlite import GraphDB
from core.stores.telemetry import record_ingestion_metric
from tests.support import make_settings, run_module, seed

SECRETS = ("PASSWORD", "SECRETPATH", "SECRETQUERY", "alice")


@pytest.fixture
def echoing_receiver() -> Iterator[int]:
    """A receiver that refuses every alert with a 401 quoting what it was sent: the path,
    the query and the decoded Basic credentials (some real receivers do)."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", "0")))
            auth = self.headers.get("Authorization", "")
            decoded = base64.b64decode(auth.split()[-1]).decode() if auth else ""
            body = f"unauthorized: {self.path} as {decoded}".encode()
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
    graph = await GraphDB.open(settings.graph_db_path)
    try:
        await upsert_node(graph, "kb-config:acme", TENANT_CONFIG_LABEL,
                                {"version": 3, "repoSlug": "acme/repo"})
    finally:
        await graph.close()
    vectors = await VectorStore.open(settings)
    try:
        await seed(vectors, settings.knowledge_base_collection, [
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
    assert_no_secret("SQLite", every_stored_value(settings.graph_db_path))
    connection = sqlite3.connect(settings.graph_db_path)
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
    settings = make_settings(tmp_path, graphDbPath=str(graph.path))
    shown = to_json(await gather_status(settings))
    assert_no_secret("status of an old tick", json.dumps(shown))
    [alert] = shown["ticks"]["alerting"]["figures"]["alerts"]
    assert alert["channel"] == "webhook:http://127.0.0.1:9/…"
