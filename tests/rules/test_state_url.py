"""`stateUrl`: a PostgreSQL URL without a password, or the configuration is refused (exit 2)."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.rules.config import resolve_config
from core.rules.errors import ConfigError
from core.rules.state_url import InvalidStateUrl, parse_state_url


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
