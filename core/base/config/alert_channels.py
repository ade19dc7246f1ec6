"""Alert channels, pure: what a channel spec may be (`console`, `webhook:<http(s) URL>`; an
`a2a:` channel is refused with a reason, this system has no agent mailbox), and how a channel
is shown, stored and keyed without revealing its secrets.

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
from dataclasses import dataclass
from typing import Any, Final, Literal
from urllib.parse import urlsplit

from core.base.rules.secrets import HIDDEN, MIN_SECRET_CHARS, NO_SECRETS, Secrets

CONSOLE: Final = "console"
WEBHOOK_PREFIX: Final = "webhook:"
#: An agent-mailbox channel; recognised only to be refused with a reason.
A2A_PREFIX: Final = "a2a:"
WEBHOOK_SCHEMES: Final = ("http", "https")


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
    """A channel as it may be shown or stored (pure): a spec without a URL as it is, anything
    URL-like as `[webhook:|a2a:]<scheme>://<host>[:port]/…` (or `…` when unparseable), a
    non-string scalar as written, anything else by its type only. Idempotent."""
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
    """Every secret of a channel spec in every form it may come back in (`Secrets.of_url`);
    a spec without a URL has none."""
    if "://" not in spec and "@" not in spec:
        return NO_SECRETS
    target = spec.partition(":")[2] if spec.startswith((WEBHOOK_PREFIX, A2A_PREFIX)) else spec
    return Secrets.of_url(target, min_segment=min_segment) | Secrets.of_text(spec)


def scrub_secrets(text: str, spec: str) -> str:
    """`text` (an error message, a traceback) with every secret of `spec` in every form
    replaced by HIDDEN, so it can be logged and stored."""
    return channel_secrets(spec).scrub(text)



@functools.lru_cache(maxsize=256)
def channel_key(spec: str) -> str:
    """The channel part of a cooldown key (pure, deterministic): `console`, or the redacted
    label plus a fingerprint, so two webhooks on one host cool down apart. The fingerprint is
    64 bits of scrypt of the spec (cached): enough to tell channels apart, and slow to test
    guesses of a weak password against should the state leak."""
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

