"""The webhook channel against a real HTTP server on 127.0.0.1: the JSON it receives, retries,
and the bounds that keep a dead or hanging receiver from holding up other alerts or the pass."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from core.alerting.alerting_pass import AlertingFigures, alerting_tick
from core.alerting.rules.alert_evaluation import Alert
from core.alerting.rules.alert_text import alert_body
from core.alerting.stores.alert_delivery import (
    DEFAULT_DELIVERY_POLICY,
    DeliveryPolicy,
    deliver_alerts,
    webhook_payload,
)
from core.alerting.stores.alert_records import load_cooldowns, recent_alerts
from core.base.chroma import VectorStore
from core.base.config.alert_channels import channel_label
from core.base.config.alert_rules import Severity
from core.base.rules.camel_json import to_json
from core.base.rules.telemetry import EVENT_RECONCILE
from core.base.runtime.context import TickContext
from core.base.state.graph_db import GraphDB
from core.base.state.telemetry import record_ingestion_metric
from tests.support import make_settings

NOW = 1_700_000_000_000
#: Tight bounds for tests that exercise a failure path on purpose, so they take tenths of a
#: second instead of the production policy's seconds.
FAST = DeliveryPolicy(attempt_timeout_s=0.3, attempts=2, backoff_s=0.02, budget_s=3.0)
#: Slack for scheduling noise on a busy CI machine when asserting a time bound.
SLACK_S = 0.5


@dataclass
class Received:
    path: str
    content_type: str
    body: dict[str, Any]
    at: float


@dataclass
class Receiver:
    """A real webhook receiver: records each POST and answers with the queued statuses
    (then 200); when `hang` is set it holds each request until the test ends."""

    url: str
    requests: list[Received] = field(default_factory=list)
    statuses: list[int] = field(default_factory=list)
    hang: bool = False
    release: threading.Event = field(default_factory=threading.Event)


class _QuietServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that gave up (the point of the hanging tests) is not an error here."""


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    state: Receiver

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            state.requests.append(Received(self.path, self.headers.get("Content-Type", ""),
                                           json.loads(raw), time.monotonic()))
            if state.hang:
                state.release.wait(timeout=30)
                return
            status = state.statuses.pop(0) if state.statuses else 200
            self.send_response(status)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = _QuietServer(("127.0.0.1", 0), Handler)
    state = Receiver(f"http://127.0.0.1:{server.server_address[1]}/hooks/kb-secret-token")
    # A short poll interval: shutdown() waits up to one interval (0.5 s by default).
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02},
                              daemon=True)
    thread.start()
    try:
        yield state
    finally:
        state.release.set()
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


@pytest.fixture
def closed_url() -> str:
    """A URL on 127.0.0.1 where nothing listens (connection refused at once)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}/hooks"


def make_alert(channel: str, *, tenant: str = "t1", severity: Severity = "warning") -> Alert:
    return Alert(tenant_id=tenant, repo_slug="repo-a", metric="reconcileEvents", value=3,
                 threshold=0, severity=severity, channel=channel, delivery_mode="wake",
                 scope="repo", fired_at_ms=NOW)


async def test_a_webhook_alert_is_posted_as_json_with_subject_body_and_every_field(
    tmp_path: Path, graph: GraphDB, vectors: VectorStore, receiver: Receiver
) -> None:
    channel = f"webhook:{receiver.url}"
    settings = make_settings(tmp_path, alertingEnabled=True, alertRules=[{
        "metric": "reconcileEvents", "threshold": 0, "severity": "critical",
        "channels": [channel], "deliveryMode": "audit", "scope": "repo"}])
    await record_ingestion_metric(graph, tenant_id="t1", repo_slug="repo-a",
                                  event_type=EVENT_RECONCILE, timestamp_ms=NOW - 1)
    figures = to_json(await alerting_tick(TickContext(settings, graph, vectors), False,
                                          clock=lambda: NOW))
    assert figures["delivered"] == 1
    [request] = receiver.requests
    assert request.path == "/hooks/kb-secret-token"
    assert request.content_type == "application/json"
    assert request.body == {
        "subject": "[alert] critical: reconcileEvents 1 over threshold 0 "
                   "(tenant t1, repo repo-a)",
        "body": request.body["body"],
        "tenantId": "t1", "repoSlug": "repo-a", "metric": "reconcileEvents", "value": 1,
        "threshold": 0, "severity": "critical", "channel": channel_label(channel),
        "deliveryMode": "audit", "scope": "repo", "firedAt": NOW,
    }
    assert "kb-secret-token" not in json.dumps(request.body), "receivers log payloads too"
    assert request.body["body"].startswith("KB ingestion alert — **critical**\n")
    assert "kb-secret-token" not in figures["alerts"][0]["channel"], "labels hide the path"
    [recorded] = await recent_alerts(graph)
    assert (recorded.delivered, recorded.error) == (True, None)
    assert len(await load_cooldowns(graph, since_ms=0)) == 1


def test_the_payload_is_the_subject_body_and_alert_fields() -> None:
    alert = make_alert("webhook:http://127.0.0.1:9/x")
    payload = webhook_payload(alert)
    assert payload == {"subject": payload["subject"], "body": alert_body(alert),
                       **to_json(alert)}


async def test_a_receiver_that_fails_once_gets_the_alert_on_the_retry(
    receiver: Receiver
) -> None:
    receiver.statuses = [503]
    [delivery] = await deliver_alerts([make_alert(f"webhook:{receiver.url}")], policy=FAST)
    assert (delivery.delivered, delivery.attempts) == (True, 2)
    assert len(receiver.requests) == 2


async def test_a_client_error_is_not_retried(receiver: Receiver) -> None:
    receiver.statuses = [400]
    with capture_logs() as logs:
        [delivery] = await deliver_alerts([make_alert(f"webhook:{receiver.url}")],
                                          policy=FAST)
    assert (delivery.delivered, delivery.error, delivery.attempts) == (False, "HTTP 400: ok", 1)
    assert len(receiver.requests) == 1
    [failed] = [e for e in logs if e["event"] == "alert.delivery_failed"]
    assert failed["log_level"] == "error"
    assert failed["channel"].startswith("webhook:http://127.0.0.1:")
    assert "kb-secret-token" not in failed["channel"], "logs hide the path"


async def test_a_closed_port_is_logged_and_does_not_delay_the_next_alert(
    receiver: Receiver, closed_url: str
) -> None:
    # The production policy: the closed port is refused at once and retried after 0.5 s and
    # 1 s; the other alert must not wait for that.
    policy = DEFAULT_DELIVERY_POLICY
    started = time.monotonic()
    with capture_logs() as logs:
        dead, live = await deliver_alerts(
            [make_alert(f"webhook:{closed_url}"), make_alert(f"webhook:{receiver.url}",
                                                             tenant="t2")],
            policy=policy)
    elapsed = time.monotonic() - started
    assert live.delivered and receiver.requests[0].body["tenantId"] == "t2"
    assert receiver.requests[0].at - started < SLACK_S
    assert not dead.delivered and dead.attempts == policy.attempts
    assert dead.error is not None and "ConnectError" in dead.error
    backoffs = sum(policy.backoff_before(n) for n in range(2, policy.attempts + 1))
    assert backoffs <= elapsed < backoffs + SLACK_S
    [failed] = [e for e in logs if e["event"] == "alert.delivery_failed"]
    assert (failed["tenantId"], failed["log_level"]) == ("t1", "error")


async def test_a_hanging_receiver_gives_up_after_the_attempt_timeout(
    receiver: Receiver
) -> None:
    receiver.hang = True
    started = time.monotonic()
    [delivery] = await deliver_alerts([make_alert(f"webhook:{receiver.url}")], policy=FAST)
    elapsed = time.monotonic() - started
    assert delivery.error == "no answer within 0.3 s (after 2 tries)"
    assert len(receiver.requests) == 2
    assert elapsed < 2 * FAST.attempt_timeout_s + FAST.backoff_s + SLACK_S


async def test_hanging_receivers_cannot_hold_the_pass_past_its_budget(
    receiver: Receiver
) -> None:
    receiver.hang = True
    policy = DeliveryPolicy(attempt_timeout_s=5.0, attempts=3, backoff_s=0.02, budget_s=0.4,
                            concurrency=2)
    alerts = [make_alert(f"webhook:{receiver.url}", tenant=f"t{i}") for i in range(4)]
    started = time.monotonic()
    deliveries = await deliver_alerts([*alerts, make_alert("console")], policy=policy)
    elapsed = time.monotonic() - started
    assert elapsed < policy.budget_s + SLACK_S
    assert [d.error for d in deliveries[:4]] == ["delivery budget of 0.4 s used up"] * 4
    # Two slots, both held by hanging requests: the others waited and were cut at the bound.
    assert len(receiver.requests) == 2
    assert deliveries[4].delivered, "the console takes no HTTP slot and is never held up"


async def test_a_failed_delivery_is_recorded_and_starts_no_cooldown(
    tmp_path: Path, graph: GraphDB, vectors: VectorStore, closed_url: str
) -> None:
    settings = make_settings(tmp_path, alertingEnabled=True, alertRules=[{
        "metric": "reconcileEvents", "threshold": 0, "severity": "warning",
        "channels": [f"webhook:{closed_url}", "console"]}])
    await record_ingestion_metric(graph, tenant_id="t1", event_type=EVENT_RECONCILE,
                                  timestamp_ms=NOW - 1)
    stores = TickContext(settings, graph, vectors)
    first = await alerting_tick(stores, False, clock=lambda: NOW, delivery=FAST)
    assert isinstance(first, AlertingFigures)
    assert (first.fired, first.delivered, first.failed) == (2, 1, 1)
    recorded = {r.alert.channel.split(":")[0]: r for r in await recent_alerts(graph)}
    assert recorded["webhook"].delivered is False and recorded["webhook"].error
    assert recorded["console"].delivered is True
    assert [k.channel for k in await load_cooldowns(graph, since_ms=0)] == ["console"]
    # The next pass tries the webhook again; the console alert is cooling down.
    second = await alerting_tick(stores, False, clock=lambda: NOW + 60_000, delivery=FAST)
    assert isinstance(second, AlertingFigures)
    assert (second.fired, second.suppressed) == (1, 1)


@pytest.mark.parametrize("bad", [dict(attempts=0), dict(concurrency=0), dict(budget_s=0.0),
                                 dict(attempt_timeout_s=-1.0)])
def test_a_policy_that_could_not_really_try_is_refused(bad: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        DeliveryPolicy(**bad)
