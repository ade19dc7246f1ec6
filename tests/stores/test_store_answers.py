"""What Chroma (or a proxy in front of it) answers to a refused request is read in one place,
`failure_text`: whatever encoding of the request, the token in it, the answer quotes, nothing
of the token survives, in the text nor in the exception that carried it."""

from __future__ import annotations

import base64
import json

import chromadb.errors
import pytest

from core.base.chroma.errors import failure_text
from core.base.rules.secrets import WITHHELD, Secrets
from tests.token_proxy import request_echo, secret_encodings_in

TOKEN = "kb-tok_7Qp/x+Z9w=Lm3vR8sT2yU4"
SECRETS = Secrets.of_token(TOKEN)


def request(prefix: int) -> bytes:
    return (b"#" * prefix + b"POST /api/v2/collections HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            + f"Authorization: Bearer {TOKEN}\r\n\r\n".encode())


def test_the_detector_sees_the_token_in_every_encoding_of_the_echo() -> None:
    """The test's own detector (decoding every run at every offset), before any scrubbing."""
    for prefix in range(3):
        echo = request_echo(request(prefix))
        assert secret_encodings_in(echo, TOKEN) == [
            "base64, as written", "base64, json-unescaped", "base64, percent-decoded",
            "hex, as written", "hex, json-unescaped", "hex, percent-decoded",
            "raw, as written", "raw, json-unescaped", "raw, percent-decoded"]


@pytest.mark.parametrize("prefix", range(6))
@pytest.mark.parametrize("shape", ["plain", "chroma-json", "mime-wrapped"])
def test_an_answer_quoting_the_request_in_any_encoding_keeps_no_trace_of_the_token(
    prefix: int, shape: str,
) -> None:
    raw = request(prefix)
    if shape == "plain":
        error: Exception = Exception(request_echo(raw))
    elif shape == "chroma-json":  # the client parsed the JSON body: its message
        error = chromadb.errors.AuthorizationError(
            json.loads(json.dumps({"message": request_echo(raw)}))["message"])
    else:
        error = Exception("denied:\n" + base64.encodebytes(b"x" * prefix * 7 + raw).decode())
    shown = failure_text(error, SECRETS)
    assert secret_encodings_in(shown, TOKEN) == []
    assert secret_encodings_in("".join(shown.split()), TOKEN) == []
    assert str(error) == shown, "the exception says no more than the text"


def test_an_answer_that_spreads_the_token_over_whitespace_is_withheld() -> None:
    spaced = " ".join(f"{b:02X}" for b in request(0))
    assert failure_text(Exception(f"refused: {spaced}"), SECRETS) == WITHHELD


def test_an_answer_that_leaves_nothing_is_named_by_its_type() -> None:
    assert failure_text(TimeoutError(), SECRETS) == "TimeoutError"
