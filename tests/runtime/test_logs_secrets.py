"""Log lines carry no traceback locals and no form of a configured secret, in JSON and on the
console alike (`core.base.runtime.logs`)."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path

import pytest
import structlog

from core.base.rules.secrets import NO_SECRETS, Secrets
from core.base.runtime.logs import configure_logging, scrub_shown

PASSWORD = "S3cr3t-P@ss"
URL = f"http://alice:{PASSWORD}@127.0.0.1:9/hooks/PATHTOKEN123"


@pytest.fixture(autouse=True)
def _reset_logging() -> Iterator[None]:
    yield
    configure_logging("auto", secrets=NO_SECRETS)


def _fail_with_a_secret_in_a_local() -> None:
    webhook_url = URL  # noqa: F841 (a local, as the settings are in a real tick's frames)
    raise RuntimeError("could not reach 127.0.0.1:9/hooks/PATHTOKEN123")


@pytest.mark.parametrize("log_format", ["json", "console"])
def test_a_logged_traceback_has_frames_but_no_local_variables(
    log_format: str, capsys: pytest.CaptureFixture[str]
) -> None:
    configure_logging(log_format)
    try:
        _fail_with_a_secret_in_a_local()
    except RuntimeError:
        structlog.get_logger("test").error("tick.failed", exc_info=True)
    err = capsys.readouterr().err
    assert "_fail_with_a_secret_in_a_local" in err, "the traceback's frames are logged"
    assert "could not reach 127.0.0.1:9/hooks/PATHTOKEN123" in err
    assert PASSWORD not in err and "webhook_url" not in err and '"locals"' not in err


@pytest.mark.parametrize("log_format", ["json", "console"])
def test_every_form_of_a_registered_secret_is_scrubbed_from_log_lines(
    log_format: str, capsys: pytest.CaptureFixture[str]
) -> None:
    configure_logging(log_format, secrets=Secrets.of_url(URL))
    basic = base64.b64encode(f"alice:{PASSWORD}".encode()).decode()
    structlog.get_logger("test").warning("echo", body=f"Basic {basic}", url=URL,
                                         nested={"k": [PASSWORD.replace("@", "%40")]})
    try:
        raise ValueError(f"refused {URL}")
    except ValueError:
        structlog.get_logger("test").error("failed", exc_info=True)
    err = capsys.readouterr().err
    for leaked in (PASSWORD, "S3cr3t-P%40ss", basic, "PATHTOKEN123"):
        assert leaked not in err
    assert "echo" in err and "ValueError" in err
    assert PASSWORD not in scrub_shown({"error": f"pw {PASSWORD}"})["error"]


def test_the_state_databases_password_from_its_environment_is_a_secret_in_every_form(
    tmp_path: Path,
) -> None:
    from core.base.runtime.settings import settings_secrets
    from tests.support import make_settings
    from tests.token_proxy import secret_encodings_in

    password = "pg-Sup3r/s3cret"
    shared = make_settings(tmp_path, stateUrl="postgresql://kb@db:5432/kb")
    secrets = settings_secrets(shared, {"PGPASSWORD": password})
    echoed = " ".join(base64.b64encode(b"x" * shift + f"password={password}".encode()).decode()
                      for shift in range(3)) + f" {password.encode().hex()} {password}"
    assert secret_encodings_in(echoed, password) != []
    assert secret_encodings_in(secrets.scrub(echoed), password) == []
    local = make_settings(tmp_path)  # SQLite: no database password to know
    assert settings_secrets(local, {"PGPASSWORD": password}) == settings_secrets(local, {})
