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
- a bearer token as sent (`Bearer <token>`) and bare;
- a token or a password (`encoded_forms`) also as an echo of the request that carried it
  may hold it inside a longer text: in base64 at each of the three byte alignments it can
  fall on (standard and URL-safe alphabet, each also percent-encoded), in hex (either case),
  JSON- and HTML-escaped. A proxy or server that refuses a request often quotes the request
  back, base64-encoded (an error body with a dump of the request): there the token's bytes
  start wherever the request puts them, so its base64 is one of three different strings.
  Of each, only the characters every bit of which is the secret's are searched for, so they
  match whatever bytes surround it.

What a store answers when it refuses (`foreign_message`) is reduced to its parsed message (a
JSON body's `message`, or `error`) on one line, scrubbed of every form of every secret, and
replaced whole (WITHHELD) when a secret is still there once the whitespace is taken out (a
base64 dump wrapped into lines, a hex dump with a space between bytes); then every run of
MAX_OPAQUE_RUN or more characters that could be an encoding of anything is dropped (no
message for a person is one; an echo of a request in an encoding not listed above would be),
and the rest is cut.

Parts shorter than MIN_SECRET_CHARS are not searched for (a one-letter user name would turn
every message to confetti, and hides nothing). Free text from outside (a receiver's or a
store's answer) is scrubbed *before* it is cut to MAX_FOREIGN_TEXT_CHARS, so the cut can never
leave the first half of a secret behind.
"""

from __future__ import annotations

import base64
import html
import json
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

#: Unbroken runs of at least this many characters of the base64, base64url, hex and
#: percent-escape alphabets are dropped from what a store answers: longer than a chunk id,
#: a digest or a UUID, shorter than any encoding of a request (`foreign_message`).
MAX_OPAQUE_RUN: Final = 80

#: What stands for a store's answer that quoted a secret in a form that cannot be cut out.
WITHHELD: Final = "(the store's answer is not shown: it quoted a credential)"

_PERCENT_ESCAPE = re.compile(r"%[0-9A-Fa-f]{2}")
_WHITESPACE = re.compile(r"\s+")
_OPAQUE_RUN = re.compile(r"[A-Za-z0-9+/=_%-]{" + str(MAX_OPAQUE_RUN) + ",}")
_BYTE_ALIGNMENTS = (0, 1, 2)


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


def base64_fragments(secret: str) -> set[str]:
    """The base64 of `secret` wherever it falls in a longer text that was encoded whole: for
    each of the three byte alignments, standard and URL-safe alphabet, the characters made
    of the secret's bits alone (those at either end also carry bits of its neighbours, which
    differ from one text to the next)."""
    raw = secret.encode("utf-8")
    found: set[str] = set()
    for offset in _BYTE_ALIGNMENTS:
        first = -(-8 * offset // 6)  # the first character with no bit of the bytes before
        last = 8 * (offset + len(raw)) // 6  # past the last with no bit of the bytes after
        padded = b"\0" * offset + raw
        for encode in (base64.b64encode, base64.urlsafe_b64encode):
            found.add(encode(padded).decode("ascii")[first:last])
    return found


def encoded_forms(secret: str) -> set[str]:
    """A token's or a password's every form (see the module docstring): its text forms,
    JSON- and HTML-escaped, hex, and its base64 at each alignment, raw and percent-encoded."""
    found = text_forms(secret)
    found.update({json.dumps(secret)[1:-1], json.dumps(secret)[1:-1].replace("/", "\\/"),
                  html.escape(secret), secret.encode("utf-8").hex(),
                  secret.encode("utf-8").hex().upper()})
    for fragment in base64_fragments(secret):
        found |= text_forms(fragment)
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
    return {f"Bearer {token}", *encoded_forms(token)} if token else set()


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

    @classmethod
    def of_password(cls, password: str) -> Secrets:
        """A password sent on its own (PostgreSQL's): every encoded form."""
        return cls.of(encoded_forms(password))

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


def parsed_message(body: str) -> str:
    """The message of an error body: a JSON object's `message` (else its `error`) when it
    is a string, else the body as it is."""
    try:
        parsed = json.loads(body, strict=False)  # a raw newline in a string is still text
    except ValueError:
        return body
    if isinstance(parsed, dict):
        for key in ("message", "error"):
            if isinstance(parsed.get(key), str):
                return str(parsed[key])
    return body


def foreign_message(body: str, secrets: Secrets, *, limit: int = MAX_FOREIGN_TEXT_CHARS) -> str:
    """What a store sent back when it refused a request, as it may travel on (an error line,
    a log, `--json`, a table): its parsed message on one line, scrubbed of every form of
    `secrets`, every opaque run (MAX_OPAQUE_RUN) dropped, then cut to `limit` characters."""
    text = secrets.scrub(" ".join(parsed_message(body).split()))
    compact = _WHITESPACE.sub("", text)
    if secrets.scrub(compact) != compact:
        return WITHHELD
    text = _OPAQUE_RUN.sub(HIDDEN, text)
    return text if len(text) <= limit else text[:limit] + HIDDEN
