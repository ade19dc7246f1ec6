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
])
def test_a_password_or_a_url_that_names_no_database_is_refused(url: str) -> None:
    with pytest.raises(InvalidStateUrl):
        parse_state_url(url)


def test_a_config_with_a_password_in_state_url_is_an_error_that_never_shows_it(
    tmp_path: Path
) -> None:
    table = {"dataDir": str(tmp_path), "stateUrl": "postgresql://kb:s3cret@db:5432/kb"}
    with pytest.raises(ConfigError) as raised:
        resolve_config({"knowledgeBase": table}, base_dir=tmp_path)
    assert "stateUrl" in str(raised.value) and "s3cret" not in str(raised.value)
