"""Where a Chroma server is and how to authenticate to it, decided from text alone (pure).

`chromaUrl` names the store every command reads and writes; a misread URL would silently act
on another store, so the grammar here is strict and each refusal says what is wrong:

- the scheme is `http` or `https`, in any case (`HTTP://` is `http://`);
- the host is a name (letters, digits, `-`, `_`, dots), an IPv4 address, or an IPv6 address in
  brackets (`[::1]`); an unbracketed IPv6 address is ambiguous with a port and refused;
- an optional port (1-65535; without one, the scheme's own: 80 or 443);
- an optional path prefix for a server behind a reverse proxy (`/chroma`): segments of URL
  characters, no empty, `.` or `..` segment, no percent-escape (the client would escape it
  again), a trailing `/` is dropped;
- no user-info and no query or fragment: credentials go in `chromaAuthTokenFile`, and a URL
  that carried them would end up in logs and `status`;
- no whitespace or control character anywhere, leading and trailing included: `" http://h"`
  is refused rather than trimmed, since the operator did not type what they meant.

A token (from `chromaAuthTokenFile` or `$KB_CHROMA_TOKEN`) must be visible ASCII: it travels in
an HTTP header, where anything else is either refused by the client or means a damaged file.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

#: The two ways `chromaAuthHeader` may send the token; `Authorization` sends `Bearer <token>`.
AUTH_HEADERS = ("Authorization", "X-Chroma-Token")
#: The environment variable that holds a token when `chromaAuthTokenFile` is empty.
TOKEN_ENV_VAR = "KB_CHROMA_TOKEN"

_DEFAULT_PORTS = {"http": 80, "https": 443}
_HOST_NAME = re.compile(
    r"^(?=.{1,253}$)[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?"
    r"(?:\.[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?)*\.?$"
)
_PATH_SEGMENT = re.compile(r"^[A-Za-z0-9._~!$&'()*+,;=:@-]+$")
_TOKEN = re.compile(r"^[\x21-\x7e]+$")


class InvalidChromaUrl(ValueError):
    """`chromaUrl` is not an ordinary server URL; the message says what is wrong with it."""


@dataclass(frozen=True, slots=True)
class ChromaServer:
    """A parsed `chromaUrl`: scheme lowercased, host as written (IPv6 without brackets), the
    port when one was given, and the path prefix without a trailing slash ("" for none)."""

    scheme: str
    host: str
    port: int | None
    path_prefix: str

    @property
    def effective_port(self) -> int:
        """The port connected to: the URL's, else the scheme's default (80 or 443)."""
        return self.port if self.port is not None else _DEFAULT_PORTS[self.scheme]

    @property
    def tls(self) -> bool:
        """Whether the connection uses TLS (and so verifies the server's certificate)."""
        return self.scheme == "https"

    @property
    def url(self) -> str:
        """The canonical form: what the client is given, and what status and logs show (it
        holds no secret: user-info and queries are refused)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        port = f":{self.port}" if self.port is not None else ""
        return f"{self.scheme}://{host}{port}{self.path_prefix}"


def parse_chroma_url(text: str) -> ChromaServer:
    """`text` as a server location; InvalidChromaUrl naming the problem when it is not one."""
    if text != text.strip():
        raise InvalidChromaUrl("it has leading or trailing whitespace; remove it")
    if any(c.isspace() or ord(c) < 0x20 or ord(c) == 0x7F for c in text):
        raise InvalidChromaUrl("it contains whitespace or a control character")
    scheme, sep, _ = text.partition("://")
    if not sep or scheme.lower() not in _DEFAULT_PORTS:
        raise InvalidChromaUrl("it must start with http:// or https://")
    try:
        parts = urlsplit(text)
    except ValueError as exc:  # an unbalanced bracket, for one
        raise InvalidChromaUrl(f"it cannot be parsed ({exc})") from None
    if "@" in parts.netloc:
        raise InvalidChromaUrl("it carries user-info (user:password@); put the credential in "
                               "a file named by chromaAuthTokenFile instead")
    if "?" in text or "#" in text:
        raise InvalidChromaUrl("it has a query or fragment; a credential goes in a file named "
                               "by chromaAuthTokenFile, anything else has no place here")
    host = _host(parts.netloc)
    port = _port(parts.netloc, host)
    return ChromaServer(scheme.lower(), host, port, _path_prefix(parts.path))


def _host(netloc: str) -> str:
    if not netloc:
        raise InvalidChromaUrl("it names no host")
    if netloc.startswith("["):
        inside, closed, _ = netloc[1:].partition("]")
        if not closed:
            raise InvalidChromaUrl("its IPv6 address has no closing bracket")
        try:
            ipaddress.IPv6Address(inside)
        except ValueError:
            raise InvalidChromaUrl(f"[{inside}] is not an IPv6 address") from None
        return inside
    host = netloc.rpartition(":")[0] if netloc.count(":") == 1 else netloc
    if ":" in host:
        raise InvalidChromaUrl("an IPv6 address must be in brackets, e.g. http://[::1]:8000")
    if not _HOST_NAME.match(host):
        raise InvalidChromaUrl(f"{host!r} is not a host name or IP address")
    return host


def _port(netloc: str, host: str) -> int | None:
    after_host = netloc[netloc.index("]") + 1:] if netloc.startswith("[") else \
        netloc[len(host):]
    if after_host == "":
        return None
    digits = after_host.removeprefix(":")
    if not after_host.startswith(":") or not digits.isascii() or not digits.isdigit():
        raise InvalidChromaUrl(f"{after_host!r} after the host is not a :port")
    port = int(digits)
    if not 1 <= port <= 65535:
        raise InvalidChromaUrl(f"port {port} is not in 1-65535")
    return port


def _path_prefix(path: str) -> str:
    trimmed = path.rstrip("/") if path.endswith("/") and path != "/" else path
    if trimmed in ("", "/"):
        return ""
    if "%" in trimmed:
        raise InvalidChromaUrl("its path has a percent-escape; write the path prefix plainly")
    for segment in trimmed[1:].split("/"):
        if segment in ("", ".", ".."):
            raise InvalidChromaUrl(f"its path {path!r} has an empty, '.' or '..' segment")
        if not _PATH_SEGMENT.match(segment):
            raise InvalidChromaUrl(f"its path segment {segment!r} has a character a URL path "
                                   "cannot carry")
    return trimmed


def token_problem(token: str) -> str | None:
    """Why `token` (with its file's final line ending already removed) cannot be sent, or None.
    The token itself is never part of the answer."""
    if token == "":
        return "it is empty"
    if not _TOKEN.match(token):
        return ("it has a character other than visible ASCII (a space, a control character, "
                "a second line?)")
    return None


def auth_header(header: str, token: str) -> dict[str, str]:
    """The request header that carries `token` as `chromaAuthHeader` says."""
    if header == "Authorization":
        return {"Authorization": f"Bearer {token}"}
    return {header: token}


def url_without_user_info(url: str) -> str:
    """`url` as it may be shown or logged (pure): any `user:password@` left out, so
    `http://alice:pw@host:8000` shows as `http://host:8000`; a URL that cannot be parsed shows
    as everything after its last `@` (or as written when it has none)."""
    try:
        parts = urlsplit(url)
        if "@" not in parts.netloc:
            return url
        return urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))
    except ValueError:
        return url.rpartition("@")[2]
