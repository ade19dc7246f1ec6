"""Delivering alerts: the `console` channel (a structlog event) and `webhook:<url>` (an HTTP
POST of JSON), all of one pass concurrently, within a bound.

Delivery is the one part of alerting that talks to the outside world, so it is the part built
to fail politely: every failure becomes a `Delivery` value with its error (logged, recorded by
the pass), never an exception; one slow or dead endpoint holds one slot of `concurrency`, not
the others; and the whole phase ends by `budget_s` however many endpoints hang.

httpx (already a chromadb requirement): unlike `urllib.request` in a thread, its asyncio
request can really be cancelled at the bound.
"""

from __future__ import annotations

import asyncio
import time
import traceback
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

import httpx
import structlog

from core.alerting.rules.alert_evaluation import Alert, Delivery
from core.alerting.rules.alert_text import alert_body, alert_subject
from core.base.config.alert_channels import (
    CONSOLE,
    Channel,
    channel_label,
    channel_secrets,
    parse_channel,
    scrub_secrets,
)
from core.base.rules.camel_json import to_json
from core.base.rules.secrets import MAX_FOREIGN_TEXT_CHARS

log = structlog.get_logger(__name__)

#: One webhook attempt, connect to last response byte (s). Receivers (chat relays, incident
#: tools) answer in well under a second; 5 s rides out a slow TLS handshake without letting a
#: dead endpoint hold a delivery slot for long. Enforced as a deadline around the whole
#: request: httpx's own timeouts apply per socket operation and could add up past it.
WEBHOOK_ATTEMPT_TIMEOUT_S: Final = 5.0
#: Tries per webhook alert. A restarting receiver or a dropped connection is usually back
#: within a second or two; past three tries the next pass (`alertingIntervalMs` later) is the
#: better retry, and an undelivered alert does not start its cooldown, so it will come again.
WEBHOOK_ATTEMPTS: Final = 3
#: Wait before the second try (s); doubled before each later one (0.5 s, then 1 s). Short,
#: because the failures worth retrying at once are blips; longer outages are the next pass's.
WEBHOOK_BACKOFF_S: Final = 0.5
#: Alerts delivered at the same time. Enough that one hanging endpoint (or a few) cannot
#: delay the rest; few enough that a burst of alerts is not a burst of connections.
DELIVERY_CONCURRENCY: Final = 8
#: The whole delivery phase of one pass (s); what is not done by then is cancelled and
#: recorded as failed. Above one alert's worst case (3 x 5 s + 0.5 s + 1 s = 16.5 s) so a
#: lone alert always gets all its tries, and short enough that a daemon shutting down waits
#: at most this long for the pass in flight.
DELIVERY_BUDGET_S: Final = 30.0
#: Retried responses: the receiver is overloaded or restarting. Any other non-2xx (a 4xx
#: says the request itself is wrong, a 3xx that the URL moved) fails at once.
RETRIED_STATUS: Final = frozenset({408, 425, 429, 500, 502, 503, 504})
#: How much of an error response's body goes into the log and the record (after scrubbing).
ERROR_BODY_CHARS: Final = MAX_FOREIGN_TEXT_CHARS
#: How much of a failed delivery's error text (its reason plus the receiver's words) is
#: logged and recorded, after scrubbing.
ERROR_CHARS: Final = 2 * MAX_FOREIGN_TEXT_CHARS
USER_AGENT: Final = "kb-daemons-alerting"


@dataclass(frozen=True, slots=True)
class DeliveryPolicy:
    """How hard delivery tries and how long it may take; the defaults are the constants
    above, and tests pass tighter ones to keep their runtime down."""

    attempt_timeout_s: float = WEBHOOK_ATTEMPT_TIMEOUT_S
    attempts: int = WEBHOOK_ATTEMPTS
    backoff_s: float = WEBHOOK_BACKOFF_S
    concurrency: int = DELIVERY_CONCURRENCY
    budget_s: float = DELIVERY_BUDGET_S

    def __post_init__(self) -> None:
        # Zero tries would report an alert delivered that was never sent; zero slots or a
        # zero bound would fail every alert without trying.
        if self.attempts < 1 or self.concurrency < 1:
            raise ValueError("attempts and concurrency must be at least 1")
        if self.attempt_timeout_s <= 0 or self.budget_s <= 0 or self.backoff_s < 0:
            raise ValueError("timeouts must be positive and the backoff not negative")

    def backoff_before(self, attempt: int) -> float:
        """The wait before try number `attempt` (2, 3, …): `backoff_s` doubling each time."""
        return float(self.backoff_s * 2 ** (attempt - 2))


DEFAULT_DELIVERY_POLICY: Final = DeliveryPolicy()


class _Retryable(Exception):
    """An attempt failed in a way the next attempt may not (connection, timeout, 5xx)."""


class _Permanent(Exception):
    """An attempt failed in a way retrying will not change (a 4xx, a redirect)."""


def webhook_payload(alert: Alert) -> dict[str, Any]:
    """The JSON a webhook receives: subject, body and every field of the alert."""
    return {"subject": alert_subject(alert), "body": alert_body(alert), **to_json(alert)}


def deliver_to_console(alert: Alert) -> None:
    """Log the alert: error level for `critical`, warning otherwise, so
    a log shipper's level filter already separates pages from notices."""
    emit = log.error if alert.severity == "critical" else log.warning
    emit("alert.fired", subject=alert_subject(alert), **to_json(alert))


async def deliver_alerts(
    alerts: Sequence[Alert], *, policy: DeliveryPolicy = DEFAULT_DELIVERY_POLICY
) -> list[Delivery]:
    """Deliver every alert on its channel; one Delivery per alert, in the input's order
    (bounds and failures: see the module docstring). An alert still pending at
    `policy.budget_s` is cancelled and reported as timed out.
    """
    if not alerts:
        return []
    deadline = asyncio.get_running_loop().time() + policy.budget_s
    slots = asyncio.Semaphore(policy.concurrency)
    needs_http = any(a.channel != CONSOLE for a in alerts)
    # One client (one connection pool) per pass: nothing is kept open between passes, which
    # are minutes apart.
    client = httpx.AsyncClient(follow_redirects=False, headers={"User-Agent": USER_AGENT}) \
        if needs_http else None
    try:
        async with asyncio.TaskGroup() as group:
            tasks = [
                group.create_task(_deliver_within(a, client=client, slots=slots,
                                                  deadline=deadline, policy=policy))
                for a in alerts
            ]
    finally:
        if client is not None:
            await client.aclose()
    return [t.result() for t in tasks]


async def _deliver_within(
    alert: Alert,
    *,
    client: httpx.AsyncClient | None,
    slots: asyncio.Semaphore,
    deadline: float,
    policy: DeliveryPolicy,
) -> Delivery:
    """One alert, bounded by the phase's deadline; turns every failure into a Delivery."""
    label = channel_label(alert.channel)
    tries = _Tries()
    bound = asyncio.timeout_at(deadline)
    try:
        async with bound:
            channel = parse_channel(alert.channel)
            if channel.kind == "console":
                # Local and instant: it takes no HTTP slot, so hanging webhooks never delay it.
                tries.count = 1
                deliver_to_console(alert)
            else:
                if client is None:
                    raise RuntimeError("no HTTP client for a webhook alert")
                async with slots:
                    await _post_with_retries(client, alert, channel, policy=policy,
                                             tries=tries)
    except TimeoutError:
        if not bound.expired():
            raise  # not our deadline: a bug worth a traceback, not a quiet failure
        return _failed(alert, label, f"delivery budget of {policy.budget_s:g} s used up",
                       tries.count)
    except (_Retryable, _Permanent) as exc:
        return _failed(alert, label, str(exc), tries.count)
    except Exception as exc:
        # A bug (or a channel that slipped past validation): still one alert's failure only.
        return _failed(alert, label, f"{type(exc).__name__}: {exc}", tries.count, exc=exc)
    return Delivery(alert, alert_subject(alert), True, None, tries.count)


@dataclass(slots=True)
class _Tries:
    """Tries made so far for one alert; kept outside the retry loop so that an alert cut
    off by the deadline still reports how far it got."""

    count: int = 0


def _failed(
    alert: Alert, label: str, error: str, tries: int, *, exc: BaseException | None = None
) -> Delivery:
    """Log and return a failed delivery, its error and traceback scrubbed of the channel's
    secrets (a message may quote the URL or the Basic credentials), then cut to ERROR_CHARS."""
    error = channel_secrets(alert.channel).scrub_foreign(error, limit=ERROR_CHARS)
    trace = None
    if exc is not None:
        trace = scrub_secrets("".join(traceback.format_exception(exc)), alert.channel)
    log.error(
        "alert.delivery_failed", channel=label, error=error, attempts=tries,
        tenantId=alert.tenant_id, repoSlug=alert.repo_slug, metric=alert.metric,
        severity=alert.severity, subject=alert_subject(alert), traceback=trace,
    )
    return Delivery(alert, alert_subject(alert), False, error, tries)


async def _post_with_retries(
    client: httpx.AsyncClient,
    alert: Alert,
    channel: Channel,
    *,
    policy: DeliveryPolicy,
    tries: _Tries,
) -> None:
    """POST until a 2xx, a permanent failure, or `policy.attempts` tries; raises the last
    failure."""
    payload = webhook_payload(alert)
    for attempt in range(1, policy.attempts + 1):
        if attempt > 1:
            await asyncio.sleep(policy.backoff_before(attempt))
        tries.count = attempt
        started = time.monotonic()
        try:
            status = await _post_once(client, channel, payload,
                                      timeout_s=policy.attempt_timeout_s)
        except _Retryable as exc:
            if attempt == policy.attempts:
                raise _Retryable(f"{exc} (after {attempt} tries)") from exc
            log.info("alert.webhook_retry", channel=channel.label, attempt=attempt,
                     error=scrub_secrets(str(exc), channel.spec))
            continue
        log.info("alert.webhook_delivered", channel=channel.label, status=status,
                 attempt=attempt, durationMs=int((time.monotonic() - started) * 1000),
                 subject=payload["subject"])
        return


async def _post_once(
    client: httpx.AsyncClient, channel: Channel, payload: dict[str, Any], *, timeout_s: float
) -> int:
    """One POST; returns the status of a 2xx, raises _Retryable or _Permanent otherwise."""
    try:
        async with asyncio.timeout(timeout_s):
            response = await client.post(channel.url, json=payload, timeout=timeout_s)
    except TimeoutError as exc:
        raise _Retryable(f"no answer within {timeout_s:g} s") from exc
    except httpx.TransportError as exc:
        raise _Retryable(f"{type(exc).__name__}: {str(exc) or 'transport error'}") from exc
    if response.is_success:
        return response.status_code
    detail = f"HTTP {response.status_code}"
    if response.text:
        # Scrubbed whole, then cut: a cut first could leave half a credential behind.
        body = channel_secrets(channel.spec).scrub_foreign(response.text, limit=ERROR_BODY_CHARS)
        detail += f": {body}"
    if response.status_code in RETRIED_STATUS:
        raise _Retryable(detail)
    raise _Permanent(detail)
