"""The alerting pass: telemetry rollup in, alerts out, cooldowns and a record kept in SQLite.

It reads only the telemetry table (and its own cooldowns): reconciliation never dispatches an
alert itself, it writes `reconcile` rows, and this pass turns them into alerts on its own
schedule. The decisions are `core.alerts`' (pure); this module is the I/O around them:

1. validate `alertRules` (one warning per invalid rule per pass; the valid ones still run);
2. roll up `alertWindowMs` of telemetry, per tenant and/or per repo as the rules' scopes need;
3. load the cooldown stamps still in force, evaluate, deliver (`core.alert_channels`);
4. in one transaction, record every alert in `alerts_fired` and stamp the cooldown of each
   one delivered.

Delivered before stamped, so a crash in between fires the alert again on the next pass
rather than losing it. A failed delivery is recorded but starts no cooldown: the next pass
tries again instead of staying silent for a whole `alertingCooldownMs`.

Nothing stored holds a webhook's secrets: `alerts_fired.channel` is the redacted label, its
`error` is scrubbed, and `alert_cooldowns.channel` is `channel_key` (label + fingerprint).
Rows an earlier version stored with the full URL are rewritten by the first pass that writes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

import structlog

from core.rules.alert_rules import (
    SCOPES,
    Alert,
    CooldownKey,
    Evaluation,
    Scope,
    alert_subject,
    channel_key,
    channel_label,
    evaluate_alert_rules,
    is_channel_key,
    redact_channel,
    scrub_secrets,
    validate_alert_rule,
)
from core.stores.alert_delivery import (
    DEFAULT_DELIVERY_POLICY,
    Delivery,
    DeliveryPolicy,
    deliver_alerts,
)
from core.stores.clock import now_ms
from core.stores.telemetry import MetricWindow, ingestion_rollup

if TYPE_CHECKING:
    from core.jobs.context import Stores
    from core.stores.sqlite import GraphDB

log = structlog.get_logger(__name__)

#: How many recent alerts `status` lists unless asked for another number: a screenful.
RECENT_ALERTS_LIMIT: Final = 20

_INSERT_FIRED = """
INSERT INTO alerts_fired(fired_at, tenant_id, repo_slug, metric, value, threshold, severity,
                         channel, subject, delivered, error)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
"""
_STAMP_COOLDOWN = """
INSERT INTO alert_cooldowns(tenant_id, repo_slug, metric, severity, channel, fired_at)
VALUES (?, ?, ?, ?, ?, ?)
ON CONFLICT(tenant_id, repo_slug, metric, severity, channel)
DO UPDATE SET fired_at = excluded.fired_at
"""


async def alerting_tick(
    stores: Stores,
    dry_run: bool,
    *,
    clock: Callable[[], int] = now_ms,
    delivery: DeliveryPolicy = DEFAULT_DELIVERY_POLICY,
) -> dict[str, Any]:
    """One alerting pass: the tick function `core.ticks.run_tick` runs for `--tick` and for
    the scheduler. Returns the pass's figures.

    Disabled (and not a dry run): logs "alerting disabled" and touches nothing. A dry run
    works either way: it evaluates against the stored cooldowns and reports what would fire,
    and sends nothing and writes nothing. A telemetry read that fails raises (the tick fails
    visibly rather than reporting that all is quiet); a delivery that fails does not.
    """
    settings = stores.settings
    if not settings.alerting_enabled and not dry_run:
        log.info("alerting.disabled", message="alerting disabled "
                 "(set alertingEnabled = true to run passes)")
        return {"enabled": False, "fired": 0}
    rules = settings.alert_rules
    if not dry_run:
        await scrub_stored_channels(stores.graph)
    scopes = _scopes_needed(rules)
    now = clock()
    window = MetricWindow.ending_at(now, length_ms=settings.alert_window_ms)
    rollup: list[dict[str, Any]] = []
    for scope in scopes:
        rollup.extend(await ingestion_rollup(stores.graph, window, per=scope))
    cooldowns = await load_cooldowns(stores.graph, since_ms=now - settings.alerting_cooldown_ms)
    evaluation = evaluate_alert_rules(
        list(rules), rollup, cooldown_state=cooldowns, now_ms=now,
        cooldown_ms=settings.alerting_cooldown_ms,
    )
    _warn_about_rules(rules, evaluation)
    deliveries: list[Delivery] = []
    if not dry_run and evaluation.alerts:
        deliveries = await deliver_alerts(evaluation.alerts, policy=delivery)
        await record_deliveries(stores.graph, deliveries)
    return _figures(settings.alerting_enabled, rules, rollup, evaluation, deliveries,
                    window_ms=settings.alert_window_ms)


def _scopes_needed(rules: Sequence[Any]) -> list[Scope]:
    """The rollups the valid rules read, in SCOPES order; none when no rule is valid (then
    the pass reads nothing at all)."""
    wanted = {check.rule.scope for check in map(validate_alert_rule, rules) if check.rule}
    return [scope for scope in SCOPES if scope in wanted]


def _warn_about_rules(rules: Sequence[Any], evaluation: Evaluation) -> None:
    """One warning per invalid rule per pass, and one per rule with keys it does not know
    (a misspelt `scope` would otherwise quietly alert per tenant)."""
    for skipped in evaluation.skipped_rules:
        log.warning("alerting.rule_invalid", rule=f"alertRules[{skipped.index}]",
                    reason=skipped.reason)
    for index, raw in enumerate(rules):
        check = validate_alert_rule(raw)
        if check.unknown_keys:
            log.warning("alerting.rule_unknown_keys", rule=f"alertRules[{index}]",
                        keys=list(check.unknown_keys), message="ignored (a typo?)")


def _figures(
    enabled: bool,
    rules: Sequence[Any],
    rollup: Sequence[dict[str, Any]],
    evaluation: Evaluation,
    deliveries: Sequence[Delivery],
    *,
    window_ms: int,
) -> dict[str, Any]:
    """The pass's `--json` figures; in a dry run `alerts` is what would have fired.

    No `dryRun` or `durationMs`: `run_tick` adds those to its log line and figures, and a
    repeated key would be an error there.
    """
    listed = [{**alert.as_dict(), "subject": alert_subject(alert)}
              for alert in evaluation.alerts]
    # Deliveries come back in the alerts' order (none in a dry run).
    for entry, done in zip(listed, deliveries, strict=False):
        entry["delivered"] = done.delivered
        if done.error:
            entry["error"] = scrub_secrets(done.error, done.alert.channel)
    return {
        "enabled": enabled,
        "rules": len(rules),
        "invalidRules": len(evaluation.skipped_rules),
        "windowMs": window_ms,
        "rowsEvaluated": len(rollup),
        "fired": len(evaluation.alerts),
        "suppressed": evaluation.suppressed,
        "delivered": sum(d.delivered for d in deliveries),
        "failed": sum(not d.delivered for d in deliveries),
        "alerts": listed,
    }


async def load_cooldowns(graph: GraphDB, *, since_ms: int) -> dict[CooldownKey, int]:
    """The cooldown stamps later than `since_ms` (older ones suppress nothing any more)."""
    rows = await graph.fetch_all(
        "SELECT tenant_id, repo_slug, metric, severity, channel, fired_at "
        "FROM alert_cooldowns WHERE fired_at > ?",
        (since_ms,),
    )
    return {CooldownKey(r[0], r[1], r[2], r[3], r[4]): int(r[5]) for r in rows}


async def record_deliveries(graph: GraphDB, deliveries: Sequence[Delivery]) -> None:
    """Record every alert in `alerts_fired` and stamp the cooldown of each one delivered, in
    one transaction (so `status` never shows a stamp without its alert, or the reverse)."""
    fired = [_fired_row(d) for d in deliveries]
    stamps = [_stamp_row(d.alert) for d in deliveries if d.delivered]
    async with graph.write() as tx:
        await tx.conn.executemany(_INSERT_FIRED, fired)
        if stamps:
            await tx.conn.executemany(_STAMP_COOLDOWN, stamps)


def _stamp_row(alert: Alert) -> tuple[Any, ...]:
    key = alert.key
    return (key.tenant_id, key.repo_slug, key.metric, key.severity, key.channel,
            alert.fired_at_ms)


def _fired_row(delivery: Delivery) -> tuple[Any, ...]:
    a = delivery.alert
    error = scrub_secrets(delivery.error, a.channel) if delivery.error else None
    return (a.fired_at_ms, a.tenant_id, a.repo_slug, a.metric, a.value, a.threshold,
            a.severity, redact_channel(a.channel), alert_subject(a), int(delivery.delivered),
            error)


async def scrub_stored_channels(graph: GraphDB) -> None:
    """Rewrite rows stored with a full channel spec (by versions before redaction): the
    label in `alerts_fired` (its error scrubbed of that spec's secrets), `channel_key` in
    `alert_cooldowns` (the later stamp kept when two rows meet). A no-op once done."""
    fired = [str(r[0]) for r in await graph.fetch_all(
        "SELECT DISTINCT channel FROM alerts_fired")]
    cooling = [str(r[0]) for r in await graph.fetch_all(
        "SELECT DISTINCT channel FROM alert_cooldowns")]
    raw_fired = [c for c in fired if redact_channel(c) != c]
    raw_cooling = [c for c in cooling if not is_channel_key(c)]
    if not raw_fired and not raw_cooling:
        return
    async with graph.write() as tx:
        for spec in raw_fired:
            rows = await tx.conn.execute_fetchall(
                "SELECT id, error FROM alerts_fired WHERE channel = ?", (spec,))
            await tx.conn.executemany(
                "UPDATE alerts_fired SET channel = ?, error = ? WHERE id = ?",
                [(redact_channel(spec), scrub_secrets(error, spec) if error else None, row_id)
                 for row_id, error in rows])
        for spec in raw_cooling:
            await tx.conn.execute(
                "INSERT INTO alert_cooldowns(tenant_id, repo_slug, metric, severity, channel, "
                "fired_at) SELECT tenant_id, repo_slug, metric, severity, ?, fired_at "
                "FROM alert_cooldowns WHERE channel = ? "
                "ON CONFLICT(tenant_id, repo_slug, metric, severity, channel) "
                "DO UPDATE SET fired_at = MAX(fired_at, excluded.fired_at)",
                (channel_key(spec), spec))
            await tx.conn.execute("DELETE FROM alert_cooldowns WHERE channel = ?", (spec,))
    log.info("alerting.stored_channels_redacted", alerts=len(raw_fired),
             cooldowns=len(raw_cooling))


@dataclass(frozen=True, slots=True)
class RecordedAlert:
    """One row of `alerts_fired`: an alert and whether it reached its channel."""

    fired_at_ms: int
    tenant_id: str
    repo_slug: str
    metric: str
    value: float
    threshold: float
    severity: str
    channel: str
    subject: str
    delivered: bool
    error: str | None

    def as_dict(self) -> dict[str, Any]:
        """The JSON shape `status --json` shows: the channel redacted and the error scrubbed
        (again: a row stored by an older version may still hold the full URL)."""
        return {
            "firedAt": self.fired_at_ms,
            "tenantId": self.tenant_id,
            "repoSlug": self.repo_slug,
            "metric": self.metric,
            "value": self.value,
            "threshold": self.threshold,
            "severity": self.severity,
            "channel": channel_label(self.channel),
            "subject": self.subject,
            "delivered": self.delivered,
            "error": scrub_secrets(self.error, self.channel) if self.error else None,
        }


async def recent_alerts(graph: GraphDB, limit: int = RECENT_ALERTS_LIMIT) -> list[RecordedAlert]:
    """The latest `limit` recorded alerts, newest first (for the status command)."""
    rows = await graph.fetch_all(
        "SELECT fired_at, tenant_id, repo_slug, metric, value, threshold, severity, channel, "
        "subject, delivered, error FROM alerts_fired ORDER BY fired_at DESC, id DESC LIMIT ?",
        (limit,),
    )
    return [
        RecordedAlert(int(r[0]), r[1], r[2], r[3], float(r[4]), float(r[5]), r[6], r[7], r[8],
                      bool(r[9]), r[10])
        for r in rows
    ]

