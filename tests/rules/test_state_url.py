"""`stateUrl`: a PostgreSQL URL without a password, or the configuration is refused (exit 2)."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.base.config.config import resolve_config
from core.base.config.state_url import InvalidStateUrl, parse_state_url
from core.base.rules.errors import ConfigError


def test_a_url_naming_host_port_and_database_is_taken_as_given() -> None:
    url = "postgresql://kb@db.internal:5432/kb?sslmode=verify-full"
    assert parse_state_url(url) == url


@pytest.mark.parametrize("url", [
    "postgresql://kb:s3cret@db:5432/kb", "mysql://db/kb", "postgresql://db:5432/",
    "postgresql:///kb", "postgresql://db:99999/kb",
    "postgresql://db/kb?password=s3cret", "postgresql://db/kb?sslmode=require&PassWord=s3cret",
    "postgresql://db/kb?pass%77ord=s3cret", "postgresql://db/kb?sslpassword=s3cret",
    "postgresql://db/kb?password=",
])
def test_a_password_or_a_url_that_names_no_database_is_refused(url: str) -> None:
    with pytest.raises(InvalidStateUrl):
        parse_state_url(url)


@pytest.mark.parametrize("url", ["postgresql://kb:s3cret@db:5432/kb",
                                 "postgresql://kb@db:5432/kb?password=s3cret"])
def test_a_config_with_a_password_in_state_url_is_an_error_that_never_shows_it(
    tmp_path: Path, url: str
) -> None:
    table = {"dataDir": str(tmp_path), "stateUrl": url}
    with pytest.raises(ConfigError) as raised:
        resolve_config({"knowledgeBase": table}, base_dir=tmp_path)
    assert "stateUrl" in str(raised.value) and "s3cret" not in str(raised.value)


@pytest.mark.parametrize("query", [
    "password =s3cret", " password=s3cret", "PASSWORD=s3cret", "Password=s3cret",
    "pass%77ord=s3cret", "pass%20word=s3cret", "passwd=s3cret", "pwd=s3cret", "pass=s3cret",
    "secret=s3cret", "token=s3cret", "SSLPassword=s3cret", "ssl_password=s3cret",
    "sslmode=require&api_key=s3cret", "sslmode=require&auth=s3cret",
])
def test_any_spelling_of_a_credential_in_the_query_is_refused_without_its_value(
    query: str,
) -> None:
    with pytest.raises(InvalidStateUrl) as raised:
        parse_state_url(f"postgresql://kb@db:5432/kb?{query}")
    assert "s3cret" not in str(raised.value)
    assert "PGPASSFILE or PGPASSWORD" in str(raised.value)


@pytest.mark.parametrize("query", [
    "sslmode=verify-full&sslrootcert=/etc/kb/ca.pem", "application_name=kb-drain",
    "target_session_attrs=read-write", "passfile=/etc/kb/pgpass", "host=/run/postgresql",
    "sslcert=/etc/kb/c.pem&sslkey=/etc/kb/c.key", "ssl_min_protocol_version=TLSv1.3",
    "sslmod%65=require",
])
def test_the_libpq_parameters_that_carry_no_secret_are_kept_as_given(query: str) -> None:
    url = f"postgresql://kb@db:5432/kb?{query}"
    assert parse_state_url(url) == url


def test_any_other_parameter_is_refused_naming_it_and_the_allowed_ones() -> None:
    with pytest.raises(InvalidStateUrl) as raised:
        parse_state_url("postgresql://db/kb?sslmod=require")
    assert "'sslmod', which is not one of the libpq connection parameters" in str(raised.value)
    assert "sslmode" in str(raised.value) and "require" not in str(raised.value)
    with pytest.raises(InvalidStateUrl, match="lower-case"):
        parse_state_url("postgresql://db/kb?SSLMODE=require")
    with pytest.raises(InvalidStateUrl, match="not key=value pairs"):
        parse_state_url("postgresql://db/kb?sslmode")


def test_a_key_shaped_like_a_value_is_never_quoted() -> None:
    blob = "Zm9vYmFyMTIzNDU2Nzg5MDEyMzQ1Njc4OTAxMjM0NTY3ODkwMTIz"
    with pytest.raises(InvalidStateUrl) as raised:
        parse_state_url(f"postgresql://db/kb?{blob}=")
    assert blob not in str(raised.value) and "names a parameter" in str(raised.value)
