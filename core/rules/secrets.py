"""Every form a credential can take in text, and the one scrubber that removes them (pure).

A secret rarely comes back the way it was configured. httpx turns a URL's `user:password@`
into `Authorization: Basic base64(user:password)`; a receiver that echoes its request quotes
the path percent-encoded or decoded; a proxy quotes the bearer token it refused. Whatever may
be shown or stored (log lines, `--json` output, `status`, `alerts_fired.error`) goes through
`Secrets.scrub`, which knows each secret in every one of those forms:

- the raw text, its percent-encoded forms (every byte escaped, or `/` kept; `+` or `%20` for a
  space; hex in upper or lower case) and its percent-decoded form (a URL's user-info and path
  are written encoded, a receiver may echo them decoded);
- for a URL's user-info, the base64 of `user:password` (standard and URL-safe alphabet, with
  and without padding), of the percent-decoded pair as well (what httpx actually sends);
- a bearer token as sent (`Bearer <token>`) and bare.

Parts shorter than MIN_SECRET_CHARS are not searched for (a one-letter user name would turn
every message to confetti, and hides nothing). Free text from outside (a receiver's or a
store's answer) is scrubbed *before* it is cut to MAX_FOREIGN_TEXT_CHARS, so the cut can never
leave the first half of a secret behind.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import parse_qsl, quote, quote_plus, unquote, unquote_plus, urlsplit

#: What stands for a hidden secret (and for a hidden part of a URL).
HIDDEN: Final = "…"
#: Secret parts shorter than this are not searched for in free text.
MIN_SECRET_CHARS: Final = 3
#: In the scrubber every log line and printed output goes through, a single path segment or
#: query value is searched for on its own only from this length: a token in a path is long,
#: while a short segment (`api`, `v1`, `alerts`) is an ordinary word that would be cut out of
#: every line. The whole path and query are searched for anyway, and the text a channel's own
#: receiver sends back is scrubbed of every segment (`Secrets.of_url`'s default).
MIN_SEGMENT_SECRET_CHARS: Final = 8
#: How much of a text an outside party sent back (a receiver's error body, a store's refusal)
#: is kept, after scrubbing: enough to read the reason, too little to carry a payload.
MAX_FOREIGN_TEXT_CHARS: Final = 200

_PERCENT_ESCAPE = re.compile(r"%[0-9A-Fa-f]{2}")


def _lower_escapes(text: str) -> str:
    return _PERCENT_ESCAPE.sub(lambda m: m.group(0).lower(), text)


def text_forms(secret: str) -> set[str]:
    """`secret` raw, percent-decoded, and percent-encoded every way a client or a receiver
    writes it (every reserved byte, or `/` kept; space as `%20` or `+`; hex in either case),
    for the raw and the decoded text alike."""
    found: set[str] = set()
    for base in {secret, unquote(secret), unquote_plus(secret)}:
        found.add(base)
        for encoded in (quote(base, safe=""), quote(base), quote_plus(base, safe=""),
                        quote_plus(base)):
            found.update({encoded, _lower_escapes(encoded)})
    return found


def _base64_forms(data: str) -> set[str]:
    raw = data.encode("utf-8")
    found = set()
    for encoded in (base64.b64encode(raw), base64.urlsafe_b64encode(raw)):
        text = encoded.decode("ascii")
        found.update({text, text.rstrip("=")})
    return found


def basic_auth_forms(user: str, password: str) -> set[str]:
    """The `Authorization: Basic` credentials of `user:password`: base64 of the pair as
    written and of its percent-decoded form (httpx decodes a URL's user-info before it
    encodes it), in the standard and the URL-safe alphabet, padded or not."""
    found: set[str] = set()
    for pair in {f"{user}:{password}", f"{unquote(user)}:{unquote(password)}"}:
        found |= _base64_forms(pair)
    return found


def bearer_forms(token: str) -> set[str]:
    """A token sent as `Authorization: Bearer <token>` (or in a header of its own): the header
    value and the token in every text form."""
    token = token.strip()
    return {f"Bearer {token}", *text_forms(token)} if token else set()


def url_secret_parts(url: str, *, min_segment: int = MIN_SECRET_CHARS) -> set[str]:
    """What of a URL must never be shown (everything but its scheme, host and port): the whole
    URL, its user-info, user name, password, the Basic credentials they make, its path and
    each path segment, query and each query value (those of at least `min_segment`
    characters), fragment. Parts only; see `Secrets.of_url` for their forms. A
    URL that cannot be parsed is secret as a whole."""
    found = {url}
    try:
        parts = urlsplit(url)
        netloc = parts.netloc
    except ValueError:
        return found
    if "@" in netloc:
        userinfo = netloc.rpartition("@")[0]
        user, _, password = userinfo.partition(":")
        found.update([userinfo, user, password])
        found |= basic_auth_forms(user, password)
    if parts.path not in ("", "/"):
        found.add(parts.path)
        found.update(p for p in parts.path.split("/") if len(p) >= min_segment)
    found.update([parts.query, parts.fragment])
    found.update(value for _, value in parse_qsl(parts.query, keep_blank_values=True)
                 if len(value) >= min_segment)
    return found


@dataclass(frozen=True, slots=True)
class Secrets:
    """The secrets of one configuration, each in every form it may take, longest first (so a
    whole URL is hidden as one, not as the pieces a shorter part leaves behind).

    Its repr shows how many forms it holds, never one of them.
    """

    forms: tuple[str, ...] = ()

    @classmethod
    def of(cls, parts: Iterable[str]) -> Secrets:
        """Secrets from parts that are already in final form (see `text_forms` and friends);
        parts shorter than MIN_SECRET_CHARS are dropped."""
        kept = {p for p in parts if len(p) >= MIN_SECRET_CHARS}
        return cls(tuple(sorted(kept, key=lambda p: (-len(p), p))))

    @classmethod
    def of_text(cls, secret: str) -> Secrets:
        """One secret (a password, a token) in every text form."""
        return cls.of(text_forms(secret))

    @classmethod
    def of_url(cls, url: str, *, min_segment: int = MIN_SECRET_CHARS) -> Secrets:
        """Every secret part of a URL (`url_secret_parts`), each in every text form; base64
        credentials as they are."""
        found: set[str] = set()
        for part in url_secret_parts(url, min_segment=min_segment):
            found |= text_forms(part)
        return cls.of(found)

    @classmethod
    def of_token(cls, token: str) -> Secrets:
        """A bearer token (`bearer_forms`)."""
        return cls.of(bearer_forms(token))

    def __or__(self, other: Secrets) -> Secrets:
        return Secrets.of((*self.forms, *other.forms))

    def __bool__(self) -> bool:
        return bool(self.forms)

    def __repr__(self) -> str:
        return f"Secrets(<{len(self.forms)} forms hidden>)"

    def scrub(self, text: str) -> str:
        """`text` with every form of every secret replaced by HIDDEN."""
        for form in self.forms:
            if form in text:
                text = text.replace(form, HIDDEN)
        return text

    def scrub_foreign(self, text: str, *, limit: int = MAX_FOREIGN_TEXT_CHARS) -> str:
        """Text an outside party sent back, as it may be logged and stored: scrubbed, then cut
        to `limit` characters (HIDDEN marks the cut). Scrubbing first means the cut never
        leaves part of a secret behind."""
        text = self.scrub(text)
        return text if len(text) <= limit else text[:limit] + HIDDEN

    def scrub_value(self, value: Any) -> Any:
        """A JSON-like value (a log event, a `--json` object) with every string in it scrubbed,
        keys included; other leaves as they are, other objects by their `str`."""
        if isinstance(value, str):
            return self.scrub(value)
        if value is None or isinstance(value, (bool, int, float)):
            return value
        if isinstance(value, Mapping):
            return {self.scrub_value(k) if isinstance(k, str) else k: self.scrub_value(v)
                    for k, v in value.items()}
        if isinstance(value, (list, tuple, set, frozenset)):
            return [self.scrub_value(v) for v in value]
        return self.scrub(str(value))


#: No secrets: scrubbing changes nothing.
NO_SECRETS: Final = Secrets()
