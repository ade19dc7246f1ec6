"""The alert rule engine, pure: validate `alertRules`, evaluate them over a telemetry rollup,
and word the alerts. No I/O and no clock: the caller passes `now_ms` and the cooldown state in
and stores what comes back (see `core.jobs.alerting` for the pass around it).

- **Validation** checks a rule in a fixed order and stops at the first fault, with a reason
  an operator can act on; the rules are parsed once, when the config is read.
- **One alert per cooldown key**: (tenant, repo, metric, severity, channel), so one repo's
  alert never silences another's.
- **Rules have a scope**: `"tenant"` (the default) adds up a tenant's repos; `"repo"` looks at
  each (tenant, repo) on its own. A rollup row with a `repoSlug` is a repo row, one without is
  a tenant row, and each rule reads only the rows of its scope. A tenant alert's repo is
  `ALL_REPOS`.
- **Channels** are `console` and `webhook:<http(s) URL>`; an `a2a:` channel is refused with a
  reason (this system has no agent mailbox).

Secrets: a webhook URL often carries credentials (user-info, a token in the path or query).
Wherever a channel is shown or stored it is `redact_channel`'s
`webhook:<scheme>://<host>[:port]/…`, and a cooldown is keyed by `channel_key` (that label
plus a fingerprint that tells channels on one host apart without revealing them); the full
spec lives only in the configuration and in the one request that delivers to it.
"""

from __future__ import annotations

import functools
import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal
from urllib.parse import urlsplit

from core.rules.camel_json import json_name, shown_as
from core.rules.numbers import is_real_number
from core.rules.secrets import (
    HIDDEN,
    MIN_SECRET_CHARS,
    MIN_SEGMENT_SECRET_CHARS,
    NO_SECRETS,
    Secrets,
)
from core.rules.telemetry import KNOWN_METRICS

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

CONSOLE: Final = "console"
WEBHOOK_PREFIX: Final = "webhook:"
#: An agent-mailbox channel; recognised only to be refused with a reason.
A2A_PREFIX: Final = "a2a:"
WEBHOOK_SCHEMES: Final = ("http", "https")

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


def malformed_channel_reason(spec: Any) -> str:
    """Why a channel spec that is not `console` or `webhook:<url>` is refused
    (the spec redacted: a malformed URL can still hold a password)."""
    return f'malformed channel spec "{redact_channel(spec)}"'


def webhook_url_reason(spec: str) -> str:
    """A `webhook:` channel whose target is not an http(s) URL with a host."""
    return f"{malformed_channel_reason(spec)}: a webhook needs an http(s) URL"


def a2a_channel_reason(spec: str) -> str:
    """Why an `a2a:` channel is refused."""
    return (
        f'channel "{redact_channel(spec)}" is not supported: this system has no agent mailbox '
        f'(use "{CONSOLE}" or "{WEBHOOK_PREFIX}<http(s) URL>")'
    )


# --------------------------------------------------------------------------------------------
# Secrets
# --------------------------------------------------------------------------------------------

#: A cooldown key's channel: a redacted label, then a fingerprint.
_CHANNEL_KEY = re.compile(r".* #[0-9a-f]{16}")


def redact_channel(spec: Any) -> str:
    """A channel as it may be shown or stored (pure): `console` and other specs without a URL
    as they are; anything URL-like (it has `://` or `@`) as
    `[webhook:|a2a:]<scheme>://<host>[:port]/…`, with user-info, path, query and fragment
    left out, or `[webhook:|a2a:]…` when even that cannot be parsed; a number, bool or null
    as written, any other non-string by its type only (a table may hold URLs). Idempotent: a
    label redacts to itself."""
    if spec is None or isinstance(spec, (bool, int, float)):
        return str(spec)
    if not isinstance(spec, str):
        return f"<{type(spec).__name__}>"
    if "://" not in spec and "@" not in spec:
        return spec
    head = next((p for p in (WEBHOOK_PREFIX, A2A_PREFIX) if spec.startswith(p)), "")
    try:
        parts = urlsplit(spec[len(head):])
        host, port = parts.hostname, parts.port
    except ValueError:
        return f"{head}{HIDDEN}"
    if not parts.scheme.isalpha() or not host or "@" in host:
        return f"{head}{HIDDEN}"
    shown = f"[{host}]" if ":" in host else host
    return f"{head}{parts.scheme}://{shown}{'' if port is None else f':{port}'}/{HIDDEN}"


@functools.lru_cache(maxsize=256)
def channel_secrets(spec: str, *, min_segment: int = MIN_SECRET_CHARS) -> Secrets:
    """Every secret of a channel spec in every form it may come back in (`Secrets.of_url`):
    the spec, its URL's user-info (and the Basic credentials httpx makes of it), path and its
    segments, query and its values, fragment; raw, percent-encoded and decoded. `console`
    and other specs without a URL have none."""
    if "://" not in spec and "@" not in spec:
        return NO_SECRETS
    target = spec.partition(":")[2] if spec.startswith((WEBHOOK_PREFIX, A2A_PREFIX)) else spec
    return Secrets.of_url(target, min_segment=min_segment) | Secrets.of_text(spec)


def scrub_secrets(text: str, spec: str) -> str:
    """`text` (an error message, a traceback) with every secret of `spec` in every form
    replaced by HIDDEN, so it can be logged and stored."""
    return channel_secrets(spec).scrub(text)


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


@functools.lru_cache(maxsize=256)
def channel_key(spec: str) -> str:
    """The channel part of a cooldown key (pure, deterministic): `console`, or the redacted
    label plus a fingerprint, so that two webhooks on one host (one chat relay, two rooms)
    cool down apart. The fingerprint is scrypt of the spec (16 MiB, ~50 ms, cached), 64 bits
    of it: enough to tell a few channels apart, and slow to test guesses of a weak password
    against should the SQLite file leak."""
    if spec == CONSOLE:
        return spec
    digest = hashlib.scrypt(spec.encode("utf-8"), salt=b"kb-daemons alert channel",
                            n=2**14, r=8, p=1, dklen=8)
    return f"{redact_channel(spec)} #{digest.hex()}"


def is_channel_key(value: str) -> bool:
    """Whether a stored cooldown channel is already a `channel_key` (not a raw spec)."""
    return value == CONSOLE or _CHANNEL_KEY.fullmatch(value) is not None


# --------------------------------------------------------------------------------------------
# Channels
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Channel:
    """A parsed channel spec: where one alert goes."""

    kind: Literal["console", "webhook"]
    #: The spec exactly as configured (part of the cooldown key).
    spec: str
    #: The URL of a webhook; "" for the console.
    url: str = ""

    @property
    def label(self) -> str:
        """The spec as it may be logged (`redact_channel`): webhook URLs often carry
        credentials, and log lines travel further than the config."""
        return redact_channel(self.spec)

    def __repr__(self) -> str:
        # A repr ends up in tracebacks and debug output: the label only, never the URL.
        return f"Channel(kind={self.kind!r}, spec={self.label!r})"


def channel_problem(spec: Any) -> str:
    """Why `spec` is not a usable channel, or "" when it is."""
    if not isinstance(spec, str):
        return malformed_channel_reason(spec)
    if spec == CONSOLE:
        return ""
    if spec.startswith(A2A_PREFIX):
        return a2a_channel_reason(spec)
    if spec.startswith(WEBHOOK_PREFIX):
        return "" if _is_http_url(spec[len(WEBHOOK_PREFIX):]) else webhook_url_reason(spec)
    return malformed_channel_reason(spec)


def _is_http_url(url: str) -> bool:
    """An absolute http(s) URL with a host, a valid port if any, and no whitespace."""
    if not url or any(c.isspace() for c in url):
        return False
    try:
        parts = urlsplit(url)
        _ = parts.port  # raises ValueError for a port out of range or not a number
    except ValueError:
        return False
    return parts.scheme in WEBHOOK_SCHEMES and bool(parts.hostname)


def parse_channel(spec: str) -> Channel:
    """The Channel for a spec; raises ValueError (with the validation reason) for a bad one,
    so callers that skipped validation cannot deliver to something half-understood."""
    problem = channel_problem(spec)
    if problem:
        raise ValueError(problem)
    if spec == CONSOLE:
        return Channel("console", spec)
    return Channel("webhook", spec, spec[len(WEBHOOK_PREFIX):])


def channel_label(spec: str) -> str:
    """A loggable form of a channel spec, valid or not (`redact_channel`)."""
    return redact_channel(spec)


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
    """Every alert the (valid, parsed) rules raise over the rollup, minus those still cooling
    down.

    `rollup` must be a list (or tuple) of rows; anything else gives an empty evaluation. For
    each rule, each rollup row of its scope and each of its channels: a breach fires unless
    the key fired less than `cooldown_ms` ago (so it fires again at exactly `cooldown_ms`);
    firing stamps the key with `now_ms`, so a second rule on the same key in the same
    evaluation is suppressed too.
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


# --------------------------------------------------------------------------------------------
# Wording
# --------------------------------------------------------------------------------------------


def format_number(value: float) -> str:
    """A figure as a person writes it (and JavaScript prints it): `3`, not `3.0`; `0.25`."""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def alert_subject(alert: Alert) -> str:
    """`[alert] warning: reconcileEvents 3 over threshold 0 (tenant t1)`; a repo-scope alert
    names its repo too, or two repos' alerts would read the same."""
    where = f"tenant {alert.tenant_id}"
    if alert.scope == "repo":
        where += f", repo {alert.repo_slug}"
    return (
        f"[alert] {alert.severity}: {alert.metric} {format_number(alert.value)} "
        f"over threshold {format_number(alert.threshold)} ({where})"
    )


def alert_body(alert: Alert) -> str:
    """The alert's Markdown body (what chat relays render)."""
    return "\n".join([
        f"KB ingestion alert — **{alert.severity}**",
        "",
        f"- Tenant: `{alert.tenant_id}`",
        f"- Repo: `{alert.repo_slug}`",
        f"- Metric: `{alert.metric}`",
        f"- Observed: {format_number(alert.value)} (threshold {format_number(alert.threshold)})",
        "",
        "Per-tenant KB ingestion telemetry crossed an operator-configured threshold.",
    ])
