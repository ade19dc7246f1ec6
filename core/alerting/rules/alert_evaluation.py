"""Alert evaluation, pure: every alert the parsed rules raise over a telemetry rollup, minus
those still cooling down. No I/O and no clock: the caller passes `now_ms` and the cooldown
state in and stores what comes back (see `core.alerting.alerting_pass` for the pass around it).

- **One alert per cooldown key**: (tenant, repo, metric, severity, channel), so one repo's
  alert never silences another's; the channel part is `channel_key`, never the spec.
- Each rule reads only the rollup rows of its scope: a row with a `repoSlug` is a repo row,
  one without is a tenant row.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from core.base.config.alert_channels import channel_key, redact_channel
from core.base.config.alert_rules import ALL_REPOS, AlertRule, DeliveryMode, Scope
from core.base.rules.camel_json import json_name, shown_as

# --------------------------------------------------------------------------------------------
# Evaluation
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CooldownKey:
    """What one cooldown covers: one alert per key per `alertingCooldownMs`."""

    tenant_id: str
    repo_slug: str
    metric: str
    severity: str
    #: `channel_key` of the channel: never the spec itself (it is stored).
    channel: str


CooldownState = Mapping[CooldownKey, int]


@dataclass(frozen=True, slots=True)
class Alert:
    """One alert on one channel: what fired, where it goes, when. Its JSON (logs, `--json`,
    webhook payloads) shows the channel redacted."""

    tenant_id: str
    repo_slug: str
    metric: str
    value: float
    threshold: float
    severity: str
    #: The channel spec as configured (a recorded alert: its stored, redacted label).
    channel: str = field(metadata=shown_as(redact_channel))
    #: The rule's delivery mode; None for an alert read back from `alerts_fired`, which does
    #: not record it.
    delivery_mode: DeliveryMode | None
    scope: Scope
    fired_at_ms: int = field(metadata=json_name("firedAt"))

    @property
    def key(self) -> CooldownKey:
        """The cooldown this alert starts."""
        return CooldownKey(self.tenant_id, self.repo_slug, self.metric, self.severity,
                           channel_key(self.channel))

    def __repr__(self) -> str:
        return (f"Alert(tenant_id={self.tenant_id!r}, repo_slug={self.repo_slug!r}, "
                f"metric={self.metric!r}, value={self.value!r}, threshold={self.threshold!r}, "
                f"severity={self.severity!r}, channel={redact_channel(self.channel)!r}, "
                f"delivery_mode={self.delivery_mode!r}, scope={self.scope!r}, "
                f"fired_at_ms={self.fired_at_ms!r})")


@dataclass(frozen=True, slots=True)
class Delivery:
    """An alert and what became of it on its channel: as delivered by this pass, or as
    recorded in `alerts_fired` (one row per delivery)."""

    alert: Alert
    #: The alert's subject as it was sent (`alert_subject`), or as an earlier version stored it.
    subject: str
    delivered: bool
    error: str | None = None
    attempts: int = 0


def scope_of(repo_slug: str) -> Scope:
    """The scope of an alert by its repo: a tenant-scope alert's repo is ALL_REPOS, which is
    not a valid repo slug (so this is exact for recorded alerts too)."""
    return "tenant" if repo_slug == ALL_REPOS else "repo"


@dataclass(frozen=True, slots=True)
class Evaluation:
    """What one evaluation decided. `cooldown_state` is a new mapping (the input is never
    changed) holding the input's stamps plus `now_ms` for every alert in `alerts`."""

    alerts: tuple[Alert, ...] = ()
    cooldown_state: dict[CooldownKey, int] = field(default_factory=dict)
    #: Breaches not alerted because their key was still cooling down.
    suppressed: int = 0


def breaches(value: Any, threshold: float) -> bool:
    """A breach is a real number strictly above the threshold; missing, bool, text and NaN
    never breach (an alert on a value nobody can read would be noise)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value > threshold


def _row_target(row: Any, scope: Scope) -> tuple[str, str] | None:
    """(tenant, repo) of a rollup row that belongs to `scope`, else None."""
    if not isinstance(row, Mapping) or not isinstance(row.get("tenantId"), str):
        return None
    repo = row.get("repoSlug")
    if scope == "repo":
        return (row["tenantId"], repo) if isinstance(repo, str) else None
    return (row["tenantId"], ALL_REPOS) if "repoSlug" not in row else None


def evaluate_alert_rules(
    rules: Sequence[AlertRule],
    rollup: Any,
    *,
    cooldown_state: CooldownState | None,
    now_ms: int,
    cooldown_ms: int,
) -> Evaluation:
    """Every alert the parsed rules raise over the rollup (a list or tuple of rows, else
    nothing), minus those still cooling down.

    A breach fires unless its key fired less than `cooldown_ms` ago; firing stamps the key
    with `now_ms`, so a second rule on the same key in the same evaluation is suppressed too.
    """
    state = dict(cooldown_state) if isinstance(cooldown_state, Mapping) else {}
    if not isinstance(rollup, (list, tuple)):
        return Evaluation(cooldown_state=state)
    alerts: list[Alert] = []
    suppressed = 0
    for rule in rules:
        for row in rollup:
            target = _row_target(row, rule.scope)
            if target is None or not breaches(row.get(rule.metric), rule.threshold):
                continue
            for channel in rule.channels:
                alert = _fire(rule, row, target, channel, state, now_ms=now_ms,
                              cooldown_ms=cooldown_ms)
                if alert is None:
                    suppressed += 1
                else:
                    alerts.append(alert)
    return Evaluation(tuple(alerts), state, suppressed)


def _fire(rule: AlertRule, row: Mapping[str, Any], target: tuple[str, str], channel: str,
          state: dict[CooldownKey, int], *, now_ms: int, cooldown_ms: int) -> Alert | None:
    """The alert of one breach on one channel, stamping its cooldown; None while the key is
    still cooling down."""
    tenant_id, repo_slug = target
    key = CooldownKey(tenant_id, repo_slug, rule.metric, rule.severity, channel_key(channel))
    last = state.get(key)
    if last is not None and now_ms - last < cooldown_ms:
        return None
    state[key] = now_ms
    return Alert(tenant_id=tenant_id, repo_slug=repo_slug, metric=rule.metric,
                 value=row[rule.metric], threshold=rule.threshold, severity=rule.severity,
                 channel=channel, delivery_mode=rule.delivery_mode, scope=rule.scope,
                 fired_at_ms=now_ms)
