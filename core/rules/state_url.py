"""`stateUrl`: which PostgreSQL database holds the state (pure).

Only `postgresql://` (or `postgres://`) URLs naming a host and a database are accepted. A
password in the URL is refused, as user-info (`user:pw@`) or as a query parameter libpq and
asyncpg read as one (`password=`, `sslpassword=`, in any case): it would sit in a config file
and in every message that names the URL; libpq's own sources (`PGPASSWORD`, `PGPASSFILE`)
supply it instead. Other query parameters are libpq's connection options (`sslmode`,
`sslrootcert`...) and are kept as given.
"""

from __future__ import annotations

from urllib.parse import parse_qsl, urlsplit

SCHEMES = ("postgresql", "postgres")
#: Query parameters that carry a secret (libpq's `password` and `sslpassword`).
SECRET_PARAMETERS = frozenset({"password", "sslpassword"})


class InvalidStateUrl(ValueError):
    """The value cannot name a state database; the message says why, without any secret."""


def parse_state_url(value: str) -> str:
    """The URL as given when it names a PostgreSQL database without a password; raises
    InvalidStateUrl otherwise."""
    try:
        parts = urlsplit(value)
        port = parts.port
    except ValueError as exc:
        raise InvalidStateUrl(f"not a URL ({exc})") from None
    if parts.scheme.lower() not in SCHEMES:
        raise InvalidStateUrl("expected postgresql://host[:port]/database")
    if parts.password is not None:
        raise InvalidStateUrl("it holds a password: put it in PGPASSFILE or PGPASSWORD")
    secrets = sorted({key.lower() for key, _ in parse_qsl(parts.query, keep_blank_values=True)}
                     & SECRET_PARAMETERS)
    if secrets:
        raise InvalidStateUrl(f"its query holds a password ({', '.join(secrets)}=): put it in "
                              "PGPASSFILE or PGPASSWORD")
    if not parts.hostname:
        raise InvalidStateUrl("it names no host")
    if port == 0:
        raise InvalidStateUrl("port 0 is not a port")
    if parts.path.strip("/") == "" or "/" in parts.path.strip("/"):
        raise InvalidStateUrl("it names no database (postgresql://host[:port]/database)")
    if parts.fragment:
        raise InvalidStateUrl("a fragment (#...) means nothing here")
    return value
