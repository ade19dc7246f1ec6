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
from typing import TYPE_CHECKING, Any

import structlog

from core.rules.alert_rules import (
    SCOPES,
    Delivery,
    Evaluation,
    Scope,
    alert_subject,
    evaluate_alert_rules,
    scrub_secrets,
    validate_alert_rule,
)
from core.rules.figures import to_json
from core.rules.telemetry import MetricWindow
from core.stores.alert_delivery import DEFAULT_DELIVERY_POLICY, DeliveryPolicy, deliver_alerts
from core.stores.alert_records import load_cooldowns, record_deliveries, scrub_stored_channels
from core.stores.clock import now_ms
from core.stores.telemetry import ingestion_rollup

if TYPE_CHECKING:
    from core.jobs.context import TickContext

log = structlog.get_logger(__name__)

async def alerting_tick(
    context: TickContext,
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
    settings = context.settings
    if not settings.alerting_enabled and not dry_run:
        log.info("alerting.disabled", message="alerting disabled "
                 "(set alertingEnabled = true to run passes)")
        return {"enabled": False, "fired": 0}
    rules = settings.alert_rules
    if not dry_run:
        await scrub_stored_channels(context.graph)
    scopes = _scopes_needed(rules)
    now = clock()
    window = MetricWindow.ending_at(now, length_ms=settings.alert_window_ms)
    rollup: list[dict[str, Any]] = []
    for scope in scopes:
        rollup.extend(await ingestion_rollup(context.graph, window, per=scope))
    cooldowns = await load_cooldowns(context.graph, since_ms=now - settings.alerting_cooldown_ms)
    evaluation = evaluate_alert_rules(
        list(rules), rollup, cooldown_state=cooldowns, now_ms=now,
        cooldown_ms=settings.alerting_cooldown_ms,
    )
    _warn_about_rules(rules, evaluation)
    deliveries: list[Delivery] = []
    if not dry_run and evaluation.alerts:
        deliveries = await deliver_alerts(evaluation.alerts, policy=delivery)
        await record_deliveries(context.graph, deliveries)
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
    listed = [{**to_json(alert), "subject": alert_subject(alert)}
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
