"""`core.rules.secrets`: every form a credential comes back in is known and scrubbed, and a
receiver's text is scrubbed before it is cut; the alert rules' reprs show no URL."""

from __future__ import annotations

import base64
from urllib.parse import quote

from core.rules.alert_channels import Channel, parse_channel, scrub_secrets
from core.rules.alert_rules import AlertRule, SkippedRule, parse_alert_rules
from core.rules.secrets import (
    HIDDEN,
    MAX_FOREIGN_TEXT_CHARS,
    MIN_SEGMENT_SECRET_CHARS,
    Secrets,
    basic_auth_forms,
    bearer_forms,
    text_forms,
)

USER = "alice"
PASSWORD = "S3cr3t/P@ss w0rd!"
TOKEN = "TOK-9f8e7d6c5b4a"
URL = (f"http://{USER}:{quote(PASSWORD, safe='')}@relay.example:8080"
       "/hooks/PATHTOKEN123?token=QUERYTOKEN456")


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def test_a_secret_is_known_raw_percent_encoded_both_ways_and_decoded() -> None:
    forms = text_forms(PASSWORD)
    assert {PASSWORD, "S3cr3t%2FP%40ss%20w0rd%21", "S3cr3t%2fP%40ss%20w0rd%21",
            "S3cr3t/P%40ss%20w0rd%21", "S3cr3t%2FP%40ss+w0rd%21"} <= forms
    assert PASSWORD in text_forms("S3cr3t%2FP%40ss%20w0rd%21"), "decoded from its encoding"


def test_basic_credentials_are_known_as_sent_and_as_written() -> None:
    encoded_password = quote(PASSWORD, safe="")
    forms = basic_auth_forms(USER, encoded_password)
    sent = b64(f"{USER}:{PASSWORD}")  # what httpx puts in `Authorization: Basic`
    assert {sent, sent.rstrip("="), b64(f"{USER}:{encoded_password}"),
            base64.urlsafe_b64encode(f"{USER}:{PASSWORD}".encode()).decode()} <= forms


def test_a_url_hides_user_info_basic_credentials_path_and_query_but_not_its_host() -> None:
    secrets = Secrets.of_url(URL)
    text = (f"401 from {URL}: Authorization: Basic {b64(f'{USER}:{PASSWORD}')}; "
            f"user {USER} pw {PASSWORD} ({quote(PASSWORD)}); path /hooks/PATHTOKEN123 "
            "query token=QUERYTOKEN456 host relay.example:8080")
    scrubbed = secrets.scrub(text)
    for leaked in (PASSWORD, quote(PASSWORD), quote(PASSWORD, safe=""), USER,
                   b64(f"{USER}:{PASSWORD}"), "PATHTOKEN123", "QUERYTOKEN456"):
        assert leaked not in scrubbed
    assert "relay.example:8080" in scrubbed and HIDDEN in scrubbed


def test_a_bearer_token_is_scrubbed_with_its_header_and_bare() -> None:
    secrets = Secrets.of_token(f" {TOKEN}\n")
    assert f"Bearer {TOKEN}" in bearer_forms(TOKEN)
    scrubbed = secrets.scrub(f"refused Authorization: Bearer {TOKEN}; X-Chroma-Token: {TOKEN}")
    assert TOKEN not in scrubbed
    assert repr(secrets) == f"Secrets(<{len(secrets.forms)} forms hidden>)"
    assert TOKEN not in repr(secrets)


def test_foreign_text_is_scrubbed_before_it_is_cut_so_no_half_secret_survives() -> None:
    secrets = Secrets.of_token(TOKEN)
    # The token straddles the cut: cutting first would keep "TOK-9f8e".
    text = "x" * (MAX_FOREIGN_TEXT_CHARS - 8) + TOKEN + "y" * 50
    shown = secrets.scrub_foreign(text)
    assert "TOK-" not in shown and "9f8e" not in shown
    assert len(shown) <= MAX_FOREIGN_TEXT_CHARS + len(HIDDEN)


def test_json_values_are_scrubbed_at_every_depth_keys_included() -> None:
    secrets = Secrets.of_token(TOKEN)
    value = {"ok": False, "n": 3, TOKEN: [{"error": f"Bearer {TOKEN}"}, (TOKEN,)], "x": None}
    assert secrets.scrub_value(value) == {
        "ok": False, "n": 3, HIDDEN: [{"error": HIDDEN}, [HIDDEN]], "x": None}


def test_short_parts_are_not_searched_for() -> None:
    assert Secrets.of(["ab", "abc"]).forms == ("abc",)


def test_short_segments_stay_readable_in_every_line_but_not_in_the_receivers_own_text() -> None:
    url = "http://relay.example/api/alerts/PATHTOKEN123?fmt=json"
    everywhere = Secrets.of_url(url, min_segment=MIN_SEGMENT_SECRET_CHARS)
    line = "alerting.sent: 2 alerts as json via api; PATHTOKEN123"
    assert everywhere.scrub(line) == f"alerting.sent: 2 alerts as json via api; {HIDDEN}"
    assert "PATHTOKEN123" not in everywhere.scrub("POST /api/alerts/PATHTOKEN123?fmt=json")
    receiver = Secrets.of_url(url)
    assert receiver.scrub("no route alerts/json") == f"no route {HIDDEN}/{HIDDEN}"


def test_a_channel_scrubber_knows_the_basic_credentials_httpx_sends() -> None:
    spec = f"webhook:{URL}"
    echoed = f"denied: Authorization: Basic {b64(f'{USER}:{PASSWORD}')}"
    assert b64(f"{USER}:{PASSWORD}") not in scrub_secrets(echoed, spec)


def test_reprs_of_rules_channels_and_skipped_rules_show_no_secret() -> None:
    spec = f"webhook:{URL}"
    bad = {"metric": "bogus", "threshold": 0, "severity": "critical",
           "channels": ["webhook:ftp://bob:OTHERPASS@127.0.0.1/x"]}
    rules = parse_alert_rules([
        {"metric": "reconcileEvents", "threshold": 0, "severity": "warning", "channels": [spec]},
        bad,
    ])
    channel = parse_channel(spec)
    shown = " ".join(repr(x) for x in (
        rules, rules.valid[0], channel, rules.skipped[0],
        AlertRule("reconcileEvents", 0, "warning", (spec,)), Channel("webhook", spec, URL),
        SkippedRule(1, bad, "r")))
    for leaked in ("S3cr3t", "PATHTOKEN123", "QUERYTOKEN456", "OTHERPASS", USER):
        assert leaked not in shown
    assert "webhook:http://relay.example:8080/…" in shown


def test_the_rules_secrets_cover_valid_and_skipped_rules_only() -> None:
    rules = parse_alert_rules([
        {"metric": "reconcileEvents", "threshold": 0, "severity": "critical",
         "channels": [f"webhook:{URL}", "console"]},
        {"metric": "bogus", "threshold": 0, "severity": "critical",
         "channels": ["webhook:ftp://bob:OTHERPASS@127.0.0.1/x"]},
    ])
    scrubbed = rules.secrets().scrub(
        f"{PASSWORD} OTHERPASS {b64(f'{USER}:{PASSWORD}')} critical console reconcileEvents")
    assert scrubbed == f"{HIDDEN} {HIDDEN} {HIDDEN} critical console reconcileEvents"
