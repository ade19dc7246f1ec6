"""The pure alert rule engine: the original KbAlertRuleEngine's cases, plus scope, the repo in
the cooldown key, the refused `a2a:` channel and the example rules of the example config."""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from core.alerting.rules.alert_evaluation import Alert, CooldownKey, evaluate_alert_rules
from core.alerting.rules.alert_text import alert_body, alert_subject
from core.base.config.alert_channels import (
    channel_key,
    channel_label,
    is_channel_key,
    malformed_channel_reason,
    redact_channel,
    scrub_secrets,
)
from core.base.config.alert_rules import (
    ALL_REPOS,
    REASON_CHANNELS,
    REASON_DELIVERY_MODE,
    REASON_NOT_A_TABLE,
    REASON_SCOPE,
    REASON_SEVERITY,
    REASON_THRESHOLD,
    SkippedRule,
    parse_alert_rules,
    validate_alert_rule,
)
from core.base.config.config import resolve_config
from core.base.config.config_docs import EXAMPLE_ALERT_RULES_TOML
from core.base.rules.camel_json import to_json
from core.base.rules.telemetry import KNOWN_METRICS

HOUR_MS = 3_600_000
NOW = 1_700_000_000_000


def rule(**overrides: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "metric": "reconcileEvents", "threshold": 0, "severity": "warning",
        "channels": ["console"],
    }
    return {**base, **overrides}


def tenant_row(tenant: str = "t1", **figures: Any) -> dict[str, Any]:
    return {"tenantId": tenant, **figures}


@dataclass(frozen=True)
class Evaluated:
    """Raw rules parsed as the config loader does, then evaluated: what fired, and the rules
    the parse skipped."""

    alerts: tuple[Alert, ...]
    cooldown_state: dict[CooldownKey, int]
    suppressed: int
    skipped_rules: tuple[SkippedRule, ...]


def evaluate(rules: Any, rollup: Any, state: dict[CooldownKey, int] | None = None,
             *, now: int = NOW, cooldown: int = HOUR_MS) -> Evaluated:
    parsed = parse_alert_rules(rules)
    result = evaluate_alert_rules(parsed.valid, rollup, cooldown_state=state, now_ms=now,
                                  cooldown_ms=cooldown)
    return Evaluated(result.alerts, result.cooldown_state, result.suppressed, parsed.skipped)


# --- validation ---------------------------------------------------------------------------


def test_a_complete_rule_is_valid_with_an_empty_reason() -> None:
    check = validate_alert_rule(rule(deliveryMode="audit", channels=[
        "console", "webhook:https://hooks.example.com/kb"]))
    assert (check.valid, check.reason) == (True, "")
    assert check.rule is not None
    assert check.rule.delivery_mode == "audit" and check.rule.scope == "tenant"


ALL_METRICS = ", ".join(KNOWN_METRICS)


@pytest.mark.parametrize(("raw", "reason"), [
    ("not a table", REASON_NOT_A_TABLE),
    (["metric", "reconcileEvents"], REASON_NOT_A_TABLE),
    (None, REASON_NOT_A_TABLE),
    (rule(metric="driftEvents"),
     f'unknown metric "driftEvents" (expected one of: {ALL_METRICS})'),
    ({"threshold": 1}, f'unknown metric "None" (expected one of: {ALL_METRICS})'),
    (rule(threshold="5"), REASON_THRESHOLD),
    (rule(threshold=float("inf")), REASON_THRESHOLD),
    (rule(threshold=float("nan")), REASON_THRESHOLD),
    (rule(threshold=True), REASON_THRESHOLD),
    (rule(severity="info"), REASON_SEVERITY),
    (rule(channels=[]), REASON_CHANNELS),
    (rule(channels="console"), REASON_CHANNELS),
    ({k: v for k, v in rule().items() if k != "channels"}, REASON_CHANNELS),
    (rule(channels=["console", "sms:+155501"]), 'malformed channel spec "sms:+155501"'),
    (rule(channels=["webhook:"]),
     'malformed channel spec "webhook:": a webhook needs an http(s) URL'),
    # The original's wording, with the URL redacted (a malformed URL can hold a password).
    (rule(channels=["webhook:ftp://example.com/x"]),
     'malformed channel spec "webhook:ftp://example.com/…": a webhook needs an http(s) URL'),
    (rule(channels=["webhook:http://:80/x"]),
     'malformed channel spec "webhook:…": a webhook needs an http(s) URL'),
    (rule(channels=[{"url": "http://u:pw@h/x"}]), 'malformed channel spec "<dict>"'),
    (rule(channels=[3]), 'malformed channel spec "3"'),
    (rule(deliveryMode="page"), REASON_DELIVERY_MODE),
    (rule(scope="global"), REASON_SCOPE),
])
def test_each_invalid_form_is_named_by_its_reason(raw: Any, reason: str) -> None:
    check = validate_alert_rule(raw)
    assert (check.valid, check.reason, check.rule) == (False, reason, None)


def test_the_checks_run_in_the_originals_order() -> None:
    # Every field is wrong: the first check in the original's order is the one reported.
    everything_wrong: dict[str, Any] = {
        "metric": "x", "threshold": "y", "severity": "z", "channels": [], "deliveryMode": "w"}
    reasons = []
    fixes: list[tuple[str, Any]] = [
        ("metric", "chunksTotal"), ("threshold", 1), ("severity", "critical"),
        ("channels", ["nope"]), ("channels", ["console"]), ("deliveryMode", "wake")]
    for key, good in fixes:
        reasons.append(validate_alert_rule(everything_wrong).reason.split(" ")[0])
        everything_wrong[key] = good
    assert reasons == ["unknown", "threshold", "severity", "channels", "malformed",
                       "deliveryMode"]
    assert validate_alert_rule(everything_wrong).valid


def test_an_a2a_channel_is_refused_because_there_is_no_agent_mailbox() -> None:
    check = validate_alert_rule(rule(channels=["a2a:ops-agent"]))
    assert not check.valid
    assert "a2a:ops-agent" in check.reason and "no agent mailbox" in check.reason


def test_unknown_keys_are_reported_without_making_a_rule_invalid() -> None:
    check = validate_alert_rule(rule(scop="repo"))
    assert check.valid and check.unknown_keys == ("scop",)


def test_a_webhook_label_hides_the_path_that_may_hold_a_token() -> None:
    assert channel_label("webhook:https://hooks.example.com:8443/T0/B1/secret") == \
        "webhook:https://hooks.example.com:8443/…"
    assert channel_label("console") == "console"


@pytest.mark.parametrize(("spec", "shown"), [
    ("webhook:http://alice:PASSWORD@hooks.example:8080/a/SECRET?token=Q#F",
     "webhook:http://hooks.example:8080/…"),
    ("webhook:https://alice@hooks.example/x", "webhook:https://hooks.example/…"),
    ("webhook:http://[::1]:9000/x", "webhook:http://[::1]:9000/…"),
    ("webhook:ftp://alice:PASSWORD@host/x", "webhook:ftp://host/…"),
    ("webhook:http://alice:PASSWORD@:80/x", "webhook:…"),
    ("webhook:http://alice:PASSWORD@host:99999/x", "webhook:…"),
    ("alice:PASSWORD@host", "…"),
    ("a2a:ops-agent", "a2a:ops-agent"),
])
def test_user_info_path_and_query_never_show_and_a_label_redacts_to_itself(
    spec: str, shown: str
) -> None:
    assert redact_channel(spec) == shown
    assert redact_channel(shown) == shown
    assert "PASSWORD" not in malformed_channel_reason(spec)


def test_secret_parts_are_scrubbed_from_free_text_raw_and_percent_decoded() -> None:
    spec = "webhook:http://alice:PASS%40word@hooks.example/a/TOKEN?key=QUERYSECRET"
    text = ("ConnectError for http://alice:PASS%40word@hooks.example/a/TOKEN?key=QUERYSECRET; "
            "auth PASS@word; token TOKEN; QUERYSECRET")
    scrubbed = scrub_secrets(text, spec)
    for secret in ("PASS%40word", "PASS@word", "TOKEN", "QUERYSECRET", "alice"):
        assert secret not in scrubbed


def test_two_webhooks_on_one_host_cool_down_apart_without_their_paths_in_the_key() -> None:
    room_a = "webhook:https://hooks.example/services/T0/ROOM-A-TOKEN"
    room_b = "webhook:https://hooks.example/services/T0/ROOM-B-TOKEN"
    first = evaluate([rule(channels=[room_a, room_b])], [tenant_row(reconcileEvents=2)], None)
    assert [a.channel for a in first.alerts] == [room_a, room_b]
    keys = [a.key.channel for a in first.alerts]
    assert keys[0] != keys[1]
    assert all(k.startswith("webhook:https://hooks.example/… #") and "TOKEN" not in k
               for k in keys)
    assert channel_key(room_a) == keys[0], "the same spec always gets the same key"
    assert is_channel_key(keys[0]) and is_channel_key("console")
    assert not is_channel_key(room_a)
    again = evaluate([rule(channels=[room_a, room_b])], [tenant_row(reconcileEvents=2)],
                     first.cooldown_state)
    assert (again.alerts, again.suppressed) == ((), 2)


def uncommented_example() -> str:
    """The example rules with their `# ` removed, keeping only TOML (headers and keys)."""
    lines = [line.removeprefix("#").strip() for line in EXAMPLE_ALERT_RULES_TOML]
    return "\n".join(line for line in lines
                     if line.startswith("[[") or re.match(r"^\w+\s*=", line))


def test_every_example_rule_passes_validation_once_uncommented() -> None:
    document = tomllib.loads("[knowledgeBase]\n" + uncommented_example())
    loaded = resolve_config(document, base_dir=Path("/"))
    assert loaded.warnings == ()
    rules = loaded.settings.alerting.rules
    assert [r.metric for r in rules.valid] == ["reconcileEvents", "chunksTotal"]
    assert (rules.skipped, rules.unknown_keys) == ((), ())


# --- evaluation ---------------------------------------------------------------------------


def test_a_value_over_the_threshold_fires_once_per_channel() -> None:
    result = evaluate([rule(channels=["console", "webhook:http://127.0.0.1:9/x"])],
                      [tenant_row(reconcileEvents=3)])
    assert [a.channel for a in result.alerts] == ["console", "webhook:http://127.0.0.1:9/x"]
    first = result.alerts[0]
    assert to_json(first) == {
        "tenantId": "t1", "repoSlug": ALL_REPOS, "metric": "reconcileEvents", "value": 3,
        "threshold": 0, "severity": "warning", "channel": "console", "deliveryMode": "wake",
        "scope": "tenant", "firedAt": NOW,
    }
    assert result.cooldown_state[first.key] == NOW
    assert result.skipped_rules == ()


def test_a_value_equal_to_the_threshold_does_not_fire() -> None:
    assert evaluate([rule(threshold=3)], [tenant_row(reconcileEvents=3)]).alerts == ()


@pytest.mark.parametrize("value", [None, "7", True, float("nan"), [7]])
def test_a_missing_or_non_numeric_value_never_breaches(value: Any) -> None:
    row = tenant_row() if value is None else tenant_row(reconcileEvents=value)
    assert evaluate([rule(threshold=-1)], [row]).alerts == ()


def test_the_cooldown_suppresses_then_releases_at_exactly_the_cooldown() -> None:
    rules, rollup = [rule()], [tenant_row(reconcileEvents=1)]
    first = evaluate(rules, rollup, now=NOW)
    assert len(first.alerts) == 1
    just_before = evaluate(rules, rollup, first.cooldown_state, now=NOW + HOUR_MS - 1)
    assert just_before.alerts == () and just_before.suppressed == 1
    assert just_before.cooldown_state == first.cooldown_state
    at_cooldown = evaluate(rules, rollup, first.cooldown_state, now=NOW + HOUR_MS)
    assert len(at_cooldown.alerts) == 1
    assert at_cooldown.cooldown_state[at_cooldown.alerts[0].key] == NOW + HOUR_MS


def test_a_seeded_cooldown_for_one_channel_lets_the_other_fire() -> None:
    hook = "webhook:http://127.0.0.1:9/x"
    seeded = {CooldownKey("t1", ALL_REPOS, "reconcileEvents", "warning", "console"): NOW - 1}
    result = evaluate([rule(channels=["console", hook])], [tenant_row(reconcileEvents=2)],
                      seeded)
    assert [a.channel for a in result.alerts] == [hook]
    assert seeded == {CooldownKey("t1", ALL_REPOS, "reconcileEvents", "warning", "console"):
                      NOW - 1}, "the input state is never changed"


def test_the_cooldown_key_holds_the_repo_so_one_repo_cannot_silence_another() -> None:
    seeded = {CooldownKey("t1", "repo-a", "reconcileEvents", "warning", "console"): NOW - 1}
    rows = [{"tenantId": "t1", "repoSlug": "repo-a", "reconcileEvents": 1},
            {"tenantId": "t1", "repoSlug": "repo-b", "reconcileEvents": 1}]
    result = evaluate([rule(scope="repo")], rows, seeded)
    assert [a.repo_slug for a in result.alerts] == ["repo-b"]


def test_each_rule_reads_only_the_rollup_rows_of_its_scope() -> None:
    rows = [tenant_row(reconcileEvents=2),
            {"tenantId": "t1", "repoSlug": "repo-a", "reconcileEvents": 1},
            {"tenantId": "t1", "repoSlug": "repo-b", "reconcileEvents": 1}]
    result = evaluate([rule(threshold=1), rule(threshold=0, scope="repo")], rows)
    assert [(a.scope, a.repo_slug, a.value) for a in result.alerts] == [
        ("tenant", ALL_REPOS, 2), ("repo", "repo-a", 1), ("repo", "repo-b", 1)]


@pytest.mark.parametrize(("rules", "rollup"), [
    (None, [tenant_row(reconcileEvents=5)]),
    ({"metric": "reconcileEvents"}, [tenant_row(reconcileEvents=5)]),
    ("rules", [tenant_row(reconcileEvents=5)]),
    ([rule()], None),
    ([rule()], tenant_row(reconcileEvents=5)),
    ([rule()], "rollup"),
])
def test_rules_or_rollup_of_the_wrong_type_give_no_alerts(rules: Any, rollup: Any) -> None:
    result = evaluate(rules, rollup)
    assert (result.alerts, result.skipped_rules, result.cooldown_state) == ((), (), {})


def test_rollup_rows_without_a_tenant_are_ignored() -> None:
    rows: list[Any] = [{"reconcileEvents": 9}, "row", {"tenantId": 7, "reconcileEvents": 9}]
    assert evaluate([rule()], rows).alerts == ()


def test_an_invalid_rule_is_skipped_and_never_stops_the_valid_ones() -> None:
    result = evaluate([rule(severity="loud"), rule()], [tenant_row(reconcileEvents=1)])
    assert len(result.alerts) == 1
    assert [(s.index, s.reason) for s in result.skipped_rules] == [(0, REASON_SEVERITY)]


def test_two_rules_on_one_key_fire_once_per_evaluation() -> None:
    result = evaluate([rule(threshold=0), rule(threshold=1)], [tenant_row(reconcileEvents=5)])
    assert len(result.alerts) == 1 and result.suppressed == 1


# --- wording ------------------------------------------------------------------------------


def make_alert(**overrides: Any) -> Alert:
    fields: dict[str, Any] = dict(
        tenant_id="t1", repo_slug=ALL_REPOS, metric="reconcileEvents", value=3, threshold=0,
        severity="warning", channel="console", delivery_mode="wake", scope="tenant",
        fired_at_ms=NOW)
    return Alert(**{**fields, **overrides})


def test_the_subject_reads_as_the_originals() -> None:
    assert alert_subject(make_alert()) == \
        "[alert] warning: reconcileEvents 3 over threshold 0 (tenant t1)"
    assert alert_subject(make_alert(metric="errorRate", value=0.25, threshold=0.1,
                                    severity="critical")) == \
        "[alert] critical: errorRate 0.25 over threshold 0.1 (tenant t1)"


def test_a_repo_scope_subject_names_the_repo() -> None:
    alert = make_alert(scope="repo", repo_slug="repo-a", threshold=2.0, value=3.0)
    assert alert_subject(alert) == \
        "[alert] warning: reconcileEvents 3 over threshold 2 (tenant t1, repo repo-a)"


def test_the_body_reads_as_the_originals() -> None:
    assert alert_body(make_alert(repo_slug="neo", severity="critical")).split("\n") == [
        "KB ingestion alert — **critical**",
        "",
        "- Tenant: `t1`",
        "- Repo: `neo`",
        "- Metric: `reconcileEvents`",
        "- Observed: 3 (threshold 0)",
        "",
        "Per-tenant KB ingestion telemetry crossed an operator-configured threshold.",
    ]
