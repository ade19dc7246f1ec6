"""`core.base.rules.secrets`: every form a credential comes back in is known and scrubbed, and a
receiver's text is scrubbed before it is cut; the alert rules' reprs show no URL."""

from __future__ import annotations

import base64
import contextlib
import json
from urllib.parse import quote

from core.base.config.alert_channels import Channel, parse_channel, scrub_secrets
from core.base.config.alert_rules import AlertRule, SkippedRule, parse_alert_rules
from core.base.rules.secrets import (
    HIDDEN,
    MAX_FOREIGN_TEXT_CHARS,
    MAX_OPAQUE_RUN,
    MIN_SEGMENT_SECRET_CHARS,
    WITHHELD,
    Secrets,
    base64_fragments,
    basic_auth_forms,
    bearer_forms,
    foreign_message,
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


CHROMA_TOKEN = "kb-tok_7Qp/x+Z9w=Lm3vR8sT2yU4"


def request(prefix: int) -> bytes:
    """A request that carries the token, its bytes shifted by `prefix`."""
    return (b"#" * prefix + b"POST /api/v2/collections HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            + f"Authorization: Bearer {CHROMA_TOKEN}\r\n\r\n".encode())


def decoded_pieces(text: str) -> list[bytes]:
    """What each stretch of base64 left between the hidden marks decodes to, from each of its
    first four characters (whatever alignment it had)."""
    pieces = []
    for stretch in text.split(HIDDEN):
        normalized = stretch.replace("-", "+").replace("_", "/").rstrip("=")
        for start in range(4):
            piece = normalized[start:]
            with contextlib.suppress(ValueError):
                pieces.append(base64.b64decode(piece[: len(piece) // 4 * 4], validate=True))
    return pieces


def test_a_token_inside_a_base64_encoded_request_is_hidden_at_each_alignment() -> None:
    secrets = Secrets.of_token(CHROMA_TOKEN)
    core = CHROMA_TOKEN.encode()[2:-2]  # all but the bytes that share a character
    for prefix in range(3):
        for encode in (base64.b64encode, base64.urlsafe_b64encode):
            encoded = encode(request(prefix)).decode()
            assert any(core in piece for piece in decoded_pieces(encoded))
            scrubbed = secrets.scrub(encoded)
            assert not any(core in piece for piece in decoded_pieces(scrubbed)), prefix
            # what surrounds it is the same text, cut at the token alone
            assert scrubbed.startswith(encoded[:40]) and scrubbed.endswith(encoded[-4:])


def test_the_base64_fragments_are_made_of_the_secrets_bits_alone() -> None:
    fragments = base64_fragments("abcdef")
    for prefix in (b"", b"x", b"yz", b"\x00\xff\x10"):
        for encode in (base64.b64encode, base64.urlsafe_b64encode):
            encoded = encode(prefix + b"abcdef" + b"!").decode()
            assert any(fragment in encoded for fragment in fragments), prefix


def test_a_token_and_a_password_are_known_in_hex_percent_json_and_html() -> None:
    password = 'pg-S3cret/pw<"&>'
    secrets = Secrets.of_token(CHROMA_TOKEN) | Secrets.of_password(password)
    json_escaped = json.dumps(CHROMA_TOKEN)[1:-1].replace("/", "\\/")
    shown = [CHROMA_TOKEN.encode().hex(), CHROMA_TOKEN.encode().hex().upper(),
             quote(CHROMA_TOKEN, safe=""), json_escaped, password.encode().hex(),
             "pg-S3cret%2Fpw%3C%22%26%3E", "pg-S3cret/pw&lt;&quot;&amp;&gt;"]
    assert secrets.scrub(" ".join(shown)) == " ".join([HIDDEN] * len(shown))


def test_a_stores_answer_is_reduced_to_its_parsed_message_on_one_line() -> None:
    secrets = Secrets.of_token(CHROMA_TOKEN)
    assert foreign_message('{"error": "NotFoundError", "message": "Collection\\n x missing"}',
                           secrets) == "Collection x missing"
    assert foreign_message('{"error": "Unauthorized"}', secrets) == "Unauthorized"
    assert foreign_message("<html>502 Bad\r\nGateway</html>", secrets) == (
        "<html>502 Bad Gateway</html>")
    assert len(foreign_message("x " * 500, secrets)) == MAX_FOREIGN_TEXT_CHARS + len(HIDDEN)


def test_an_answer_with_the_token_spread_over_spaced_bytes_is_withheld() -> None:
    spaced = " ".join(f"{b:02x}" for b in request(0))
    assert foreign_message(f"denied: {spaced}", Secrets.of_token(CHROMA_TOKEN)) == WITHHELD


def test_an_opaque_run_is_dropped_and_ids_and_digests_are_kept() -> None:
    digest = "a" * 64
    uuid = "0b3e4c1e-5f8a-4b8e-9a51-3c3f0e6d2b11"
    blob = base64.b64encode(bytes(range(90))).decode()
    assert len(blob) >= MAX_OPAQUE_RUN
    shown = foreign_message(f"ids {digest} {uuid} dump {blob}", Secrets())
    assert shown == f"ids {digest} {uuid} dump {HIDDEN}"
