"""`stateUrl`: which PostgreSQL database holds the state (pure).

Only `postgresql://` (or `postgres://`) URLs naming a host and a database are accepted. A
password never sits in the URL (it would sit in a config file and in every message that names
the URL): libpq's own sources (`PGPASSWORD`, `PGPASSFILE`) supply it instead. So user-info
with a password (`user:pw@`) is refused, and so is every query parameter but the libpq
connection parameters that carry no secret and that asyncpg reads (ALLOWED_PARAMETERS).

An allowlist, not a list of the names that carry one: a denylist misses every spelling of a
secret nobody listed (`Password`, `password ` with a space, `pass%77ord`, `pwd`, `secret`,
`token`, `sslpassword`...), and asyncpg sends any query parameter it does not know to the
server as a setting, so a misspelled key is a failed connection at best. Keys are compared as
asyncpg reads them: percent-decoded, case and spaces kept. A refusal never quotes a value, and
quotes the key only when it is shaped like a parameter name.
"""

from __future__ import annotations

import re
from typing import Final
from urllib.parse import parse_qsl, urlsplit

SCHEMES = ("postgresql", "postgres")
#: libpq's connection parameters (https://www.postgresql.org/docs/current/
#: libpq-connect.html#LIBPQ-PARAMKEYWORDS) that carry no secret and that asyncpg reads from
#: a URL's query; `application_name` reaches the server as the setting of that name. Left
#: out: `password` and `sslpassword` (secrets), and the parameters asyncpg does not read
#: (`connect_timeout`, `options`, `keepalives`...), which it would send to the server as
#: settings it refuses.
ALLOWED_PARAMETERS: Final = frozenset({
    "host", "port", "dbname", "user", "passfile", "service", "application_name",
    "sslmode", "sslcert", "sslkey", "sslrootcert", "sslcrl", "sslnegotiation",
    "ssl_min_protocol_version", "ssl_max_protocol_version", "target_session_attrs",
    "krbsrvname", "gsslib",
})
#: What a key's letters hold when it names a credential (for the message only: anything not
#: allowed is refused).
_CREDENTIAL_WORDS = ("pass", "pwd", "secret", "token", "auth", "credential", "apikey")
#: A key a message may quote: a parameter name, possibly misspelled, never a value.
_QUOTABLE_KEY = re.compile(r"^[A-Za-z][A-Za-z0-9_ .-]{0,39}$")


class InvalidStateUrl(ValueError):
    """The value cannot name a state database; the message says why, without any secret."""


def _query_problem(query: str) -> str | None:
    """Why the query is refused (see the module docstring), or None."""
    try:
        pairs = parse_qsl(query, keep_blank_values=True, strict_parsing=True)
    except ValueError:
        return "its query is not key=value pairs joined by &"
    for key, _ in pairs:
        if key in ALLOWED_PARAMETERS:
            continue
        letters = re.sub(r"[^a-z]", "", key.lower())
        if any(word in letters for word in _CREDENTIAL_WORDS):
            return ("its query names a credential: put the password in PGPASSFILE or "
                    "PGPASSWORD, never in the URL")
        named = repr(key) if _QUOTABLE_KEY.match(key) else "a parameter"
        hint = (" (libpq's parameter names are lower-case)"
                if key.lower() in ALLOWED_PARAMETERS else "")
        return (f"its query names {named}, which is not one of the libpq connection "
                f"parameters that carry no secret{hint}: "
                f"{', '.join(sorted(ALLOWED_PARAMETERS))}")
    return None


def parse_state_url(value: str) -> str:
    """The URL as given when it names a PostgreSQL database without a password or any query
    parameter but ALLOWED_PARAMETERS; raises InvalidStateUrl otherwise."""
    try:
        parts = urlsplit(value)
        port = parts.port
    except ValueError as exc:
        raise InvalidStateUrl(f"not a URL ({exc})") from None
    if parts.scheme.lower() not in SCHEMES:
        raise InvalidStateUrl("expected postgresql://host[:port]/database")
    if parts.password is not None:
        raise InvalidStateUrl("it holds a password: put it in PGPASSFILE or PGPASSWORD")
    problem = _query_problem(parts.query) if parts.query else None
    if problem is not None:
        raise InvalidStateUrl(problem)
    if not parts.hostname:
        raise InvalidStateUrl("it names no host")
    if port == 0:
        raise InvalidStateUrl("port 0 is not a port")
    if parts.path.strip("/") == "" or "/" in parts.path.strip("/"):
        raise InvalidStateUrl("it names no database (postgresql://host[:port]/database)")
    if parts.fragment:
        raise InvalidStateUrl("a fragment (#...) means nothing here")
    return value
