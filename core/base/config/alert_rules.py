"""Alert rules, pure: the words of a rule (severity, delivery mode, scope) and the validation
and parsing of `alertRules`, done once when the config is read.

- **Validation** checks a rule in a fixed order and stops at the first fault, with a reason
  an operator can act on (the wording other tools of the platform match on).
- **Rules have a scope**: `"tenant"` (the default) adds up a tenant's repos; `"repo"` looks at
  each (tenant, repo) on its own; a tenant alert's repo is `ALL_REPOS`.
- A rule's channels are checked by `core.base.config.alert_channels`; what a rule raises over a
  rollup is `core.alerting.rules.alert_evaluation`'s; how an alert reads is
  `core.alerting.rules.alert_text`'s.
- An invalid rule may hold a webhook URL in any key: it is never shown, and its strings count
  as secrets (`AlertRules.secrets`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal

from core.base.config.alert_channels import channel_problem, channel_secrets, redact_channel
from core.base.rules.numbers import is_real_number
from core.base.rules.secrets import MIN_SEGMENT_SECRET_CHARS, NO_SECRETS, Secrets
from core.base.rules.telemetry import KNOWN_METRICS

Severity = Literal["warning", "critical"]
DeliveryMode = Literal["wake", "audit"]
Scope = Literal["tenant", "repo"]

SEVERITIES: Final[tuple[Severity, ...]] = ("warning", "critical")
DELIVERY_MODES: Final[tuple[DeliveryMode, ...]] = ("wake", "audit")
#: The delivery mode of a rule that names none.
DEFAULT_DELIVERY_MODE: Final[DeliveryMode] = "wake"
SCOPES: Final[tuple[Scope, ...]] = ("tenant", "repo")
#: Per tenant unless asked: drift in any of a tenant's repos is the tenant's drift.
DEFAULT_SCOPE: Final[Scope] = "tenant"
#: The repo of a tenant-scope alert (in its cooldown key and in `alerts_fired.repo_slug`):
#: not a valid repo slug, so it cannot collide with a repo-scope alert of the same tenant.
ALL_REPOS: Final = "*"


#: Every key a rule may have; any other is reported (usually a typo, e.g. `scop`).
RULE_KEYS: Final = ("metric", "threshold", "severity", "channels", "deliveryMode", "scope")

# The reasons a rule is refused (the wording other tools of the platform match on).
REASON_NOT_A_TABLE: Final = "rule is not an object"
REASON_THRESHOLD: Final = "threshold must be a finite number"
REASON_SEVERITY: Final = f"severity must be one of: {', '.join(SEVERITIES)}"
REASON_CHANNELS: Final = "channels must be a non-empty array (no implicit default)"
REASON_DELIVERY_MODE: Final = f"deliveryMode must be one of: {', '.join(DELIVERY_MODES)}"
REASON_SCOPE: Final = f"scope must be one of: {', '.join(SCOPES)}"


def unknown_metric_reason(metric: Any) -> str:
    """Why a rule's metric is refused, listing the metrics a rule may name."""
    return f'unknown metric "{metric}" (expected one of: {", ".join(KNOWN_METRICS)})'



def _strings_in(value: Any) -> list[str]:
    """Every string anywhere in a raw (TOML) value: a rule that failed validation may hold a
    URL in any key."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, Mapping):
        return [s for v in value.values() for s in _strings_in(v)]
    if isinstance(value, (list, tuple)):
        return [s for v in value for s in _strings_in(v)]
    return []


# --------------------------------------------------------------------------------------------
# Rules
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AlertRule:
    """A rule that passed validation, with its defaults filled in."""

    metric: str
    threshold: float
    severity: Severity
    channels: tuple[str, ...]
    delivery_mode: DeliveryMode = DEFAULT_DELIVERY_MODE
    scope: Scope = DEFAULT_SCOPE

    def __repr__(self) -> str:
        # Channels by their labels: a rule's repr may reach a log, its webhook URLs must not.
        return (f"AlertRule(metric={self.metric!r}, threshold={self.threshold!r}, "
                f"severity={self.severity!r}, "
                f"channels={tuple(redact_channel(c) for c in self.channels)!r}, "
                f"delivery_mode={self.delivery_mode!r}, scope={self.scope!r})")


@dataclass(frozen=True, slots=True)
class RuleCheck:
    """The verdict on one raw rule: `valid` and `reason` (`{valid, reason}`),
    plus the parsed rule when valid and the keys it did not recognise (valid or not)."""

    valid: bool
    reason: str = ""
    rule: AlertRule | None = None
    unknown_keys: tuple[str, ...] = ()

    def __repr__(self) -> str:
        return (f"RuleCheck(valid={self.valid!r}, reason={self.reason!r}, rule={self.rule!r}, "
                f"unknown_keys={self.unknown_keys!r})")


def validate_alert_rule(rule: Any) -> RuleCheck:
    """Check one raw `alertRules` table, in a fixed order, stopping at the first fault.

    Order: a table; a known metric; a finite threshold; a known severity; a non-empty list of
    channels (no implicit default, so a rule never alerts somewhere nobody chose); each channel
    well-formed; then, only when present, `deliveryMode` and `scope`.
    """
    if not isinstance(rule, Mapping):
        return RuleCheck(False, REASON_NOT_A_TABLE)
    unknown = tuple(sorted(str(k) for k in rule if k not in RULE_KEYS))

    def invalid(reason: str) -> RuleCheck:
        return RuleCheck(False, reason, unknown_keys=unknown)

    metric = rule.get("metric")
    if not isinstance(metric, str) or metric not in KNOWN_METRICS:
        return invalid(unknown_metric_reason(metric))
    threshold = rule.get("threshold")
    if not is_real_number(threshold):
        return invalid(REASON_THRESHOLD)
    severity = rule.get("severity")
    if severity not in SEVERITIES:
        return invalid(REASON_SEVERITY)
    channels = rule.get("channels")
    if not isinstance(channels, (list, tuple)) or not channels:
        return invalid(REASON_CHANNELS)
    for spec in channels:
        problem = channel_problem(spec)
        if problem:
            return invalid(problem)
    delivery_mode = rule.get("deliveryMode", DEFAULT_DELIVERY_MODE)
    if delivery_mode not in DELIVERY_MODES:
        return invalid(REASON_DELIVERY_MODE)
    scope = rule.get("scope", DEFAULT_SCOPE)
    if scope not in SCOPES:
        return invalid(REASON_SCOPE)
    parsed = AlertRule(
        metric=metric,
        threshold=threshold,
        severity=severity,
        channels=tuple(channels),
        delivery_mode=delivery_mode,
        scope=scope,
    )
    return RuleCheck(True, "", parsed, unknown)


@dataclass(frozen=True, slots=True)
class SkippedRule:
    """An invalid rule, its position in `alertRules`, and why it was skipped."""

    index: int
    #: The rule as configured: may hold a webhook URL anywhere, so it is never shown.
    rule: Any
    reason: str

    def __repr__(self) -> str:
        return f"SkippedRule(index={self.index!r}, rule=<hidden>, reason={self.reason!r})"


@dataclass(frozen=True, slots=True)
class AlertRules:
    """`alertRules` as read once, at config load: the valid rules, parsed, and what was wrong
    with the others (each warned about once, at start)."""

    valid: tuple[AlertRule, ...] = ()
    skipped: tuple[SkippedRule, ...] = ()
    #: Keys a rule had that no rule knows (usually typos), by the rule's position.
    unknown_keys: tuple[tuple[int, tuple[str, ...]], ...] = ()

    def __repr__(self) -> str:
        """The rules counted, never shown: their webhook URLs carry user-info, paths and
        queries that are credentials, and tracebacks and debuggers show a repr."""
        return f"<{len(self.valid)} valid, {len(self.skipped)} skipped rules>"

    @property
    def count(self) -> int:
        """How many rules were configured, valid or not."""
        return len(self.valid) + len(self.skipped)

    def secrets(self) -> Secrets:
        """Every secret the rules hold, in every form (`channel_secrets`), for the scrubber of
        every log line and output: the channels of the valid rules, and every URL-like string
        of the skipped ones (an invalid rule's URL is as secret as a valid one's). A lone
        path segment or query value counts from MIN_SEGMENT_SECRET_CHARS (see there)."""
        found = NO_SECRETS
        specs = {c for rule in self.valid for c in rule.channels}
        specs |= {s for skipped in self.skipped for s in _strings_in(skipped.rule)}
        for spec in sorted(specs):
            found = found | channel_secrets(spec, min_segment=MIN_SEGMENT_SECRET_CHARS)
        return found

    def problems(self) -> list[tuple[str, str]]:
        """(`alertRules[i]`, what is wrong) for each rule that will not run and each unknown
        key; webhook URLs appear redacted only."""
        found = [(f"alertRules[{s.index}]", f"skipped: {s.reason}") for s in self.skipped]
        found += [(f"alertRules[{index}]", f"unknown key(s) {', '.join(keys)} ignored "
                   "(a typo?)") for index, keys in self.unknown_keys]
        return sorted(found, key=lambda item: int(item[0][11:-1]))


def parse_alert_rules(raw: Any) -> AlertRules:
    """Validate every raw rule once (`validate_alert_rule`); the invalid ones never stop the
    valid ones. Anything but a list (or tuple) of rules is no rules."""
    if not isinstance(raw, (list, tuple)):
        return AlertRules()
    valid: list[AlertRule] = []
    skipped: list[SkippedRule] = []
    unknown: list[tuple[int, tuple[str, ...]]] = []
    for index, rule in enumerate(raw):
        check = validate_alert_rule(rule)
        if check.rule is None:
            skipped.append(SkippedRule(index, rule, check.reason))
        else:
            valid.append(check.rule)
        if check.unknown_keys:
            unknown.append((index, check.unknown_keys))
    return AlertRules(tuple(valid), tuple(skipped), tuple(unknown))
