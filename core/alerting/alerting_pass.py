"""The alerting pass: telemetry rollup in, alerts out, cooldowns and a record kept in SQLite.

It reads only the telemetry table (and its own cooldowns): reconciliation writes `reconcile`
rows and never alerts itself. The decisions are `core.alerting.rules`' (pure); this module is
the I/O around them:

1. the rules, parsed once when the settings were read (each invalid one warned about);
2. roll up `alertWindowMs` of telemetry, per tenant and/or per repo as the rules' scopes need;
3. load the cooldown stamps still in force, evaluate, deliver
(`core.alerting.stores.alert_delivery`);
4. in one transaction, record every alert in `alerts_fired` and stamp the cooldown of each
   one delivered.

Delivered before stamped, so a crash in between fires the alert again on the next pass
rather than losing it. A failed delivery is recorded but starts no cooldown: the next pass
tries again instead of staying silent for a whole `alertingCooldownMs`.

Nothing stored holds a webhook's secrets (`core.alerting.stores.alert_records`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import structlog

from core.alerting.rules.alert_evaluation import Alert, Delivery, Evaluation, evaluate_alert_rules
from core.alerting.rules.alert_text import alert_subject
from core.alerting.stores.alert_delivery import (
    DEFAULT_DELIVERY_POLICY,
    DeliveryPolicy,
    deliver_alerts,
)
from core.alerting.stores.alert_records import (
    load_cooldowns,
    record_deliveries,
    scrub_stored_channels,
)
from core.base.config.alert_channels import scrub_secrets
from core.base.config.alert_rules import SCOPES, AlertRule, Scope
from core.base.io.clock import now_ms
from core.base.rules.camel_json import flattened, omitted_when_none
from core.base.rules.telemetry import MetricWindow
from core.base.state.telemetry import ingestion_rollup

if TYPE_CHECKING:
    from core.base.runtime.context import TickContext

log = structlog.get_logger(__name__)

@dataclass(frozen=True, slots=True)
class FiredAlert:
    """An alert in the pass's figures: the alert, its subject, and (unless a dry run) whether
    it was delivered and why not."""

    alert: Alert = field(metadata=flattened())
    subject: str
    delivered: bool | None = field(default=None, metadata=omitted_when_none())
    error: str | None = field(default=None, metadata=omitted_when_none())


@dataclass(frozen=True, slots=True)
class AlertingFigures:
    """An alerting pass's figures; in a dry run `alerts` is what would have fired."""

    enabled: bool
    #: Rules configured, valid or not; `invalid_rules` of them were skipped (warned at load).
    rules: int
    invalid_rules: int
    window_ms: int
    rows_evaluated: int
    fired: int
    suppressed: int
    delivered: int
    failed: int
    alerts: tuple[FiredAlert, ...]


@dataclass(frozen=True, slots=True)
class AlertingDisabled:
    """The figures of a pass that did not run: alerting is disabled."""

    enabled: bool = False
    fired: int = 0


async def alerting_tick(
    context: TickContext,
    dry_run: bool,
    *,
    clock: Callable[[], int] = now_ms,
    delivery: DeliveryPolicy = DEFAULT_DELIVERY_POLICY,
) -> AlertingFigures | AlertingDisabled:
    """One alerting pass (the tick function of `--tick` and the scheduler); its figures.

    Disabled (and not a dry run), it touches nothing. A dry run reports what would fire
    against the stored cooldowns, and sends and writes nothing. A failed telemetry read
    raises (the tick fails visibly); a failed delivery does not.
    """
    alerting = context.settings.alerting
    if not alerting.enabled and not dry_run:
        log.info("alerting.disabled", message="alerting disabled "
                 "(set alertingEnabled = true to run passes)")
        return AlertingDisabled()
    rules = alerting.rules
    if not dry_run:
        await scrub_stored_channels(context.graph)
    now = clock()
    window = MetricWindow.ending_at(now, length_ms=alerting.window_ms)
    rollup: list[dict[str, Any]] = []
    for scope in scopes_needed(rules.valid):
        rollup.extend(await ingestion_rollup(context.graph, window, per=scope))
    cooldowns = await load_cooldowns(context.graph, since_ms=now - alerting.cooldown_ms)
    evaluation = evaluate_alert_rules(
        rules.valid, rollup, cooldown_state=cooldowns, now_ms=now,
        cooldown_ms=alerting.cooldown_ms,
    )
    deliveries: list[Delivery] = []
    if not dry_run and evaluation.alerts:
        deliveries = await deliver_alerts(evaluation.alerts, policy=delivery)
        await record_deliveries(context.graph, deliveries)
    return AlertingFigures(
        enabled=alerting.enabled, rules=rules.count, invalid_rules=len(rules.skipped),
        window_ms=alerting.window_ms, rows_evaluated=len(rollup),
        fired=len(evaluation.alerts), suppressed=evaluation.suppressed,
        delivered=sum(d.delivered for d in deliveries),
        failed=sum(not d.delivered for d in deliveries),
        alerts=_fired(evaluation, deliveries))


def scopes_needed(rules: Sequence[AlertRule]) -> list[Scope]:
    """The rollups the rules read, in SCOPES order; none without rules (then the pass reads
    nothing at all)."""
    wanted = {rule.scope for rule in rules}
    return [scope for scope in SCOPES if scope in wanted]


def _fired(evaluation: Evaluation, deliveries: Sequence[Delivery]) -> tuple[FiredAlert, ...]:
    """The alerts of the figures, with their delivery when there was one (deliveries come back
    in the alerts' order; none in a dry run); errors scrubbed of the channel's secrets."""
    outcome: list[Delivery | None] = [*deliveries, *([None] * (len(evaluation.alerts)
                                                                 - len(deliveries)))]
    return tuple(
        FiredAlert(alert, alert_subject(alert),
                   done.delivered if done is not None else None,
                   scrub_secrets(done.error, done.alert.channel)
                   if done is not None and done.error else None)
        for alert, done in zip(evaluation.alerts, outcome, strict=True))
