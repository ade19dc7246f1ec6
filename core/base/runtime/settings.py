"""Loading the settings a command runs under: the config file, logging in its format, and each
of its warnings logged once, at start."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

import structlog

from core.base.config.config import ConfigWarning, Settings
from core.base.io.data_folders import refuse_open_data_folders
from core.base.rules.secrets import Secrets
from core.base.runtime.config_file import load_config
from core.base.runtime.logs import configure_logging

log = structlog.get_logger(__name__)


def log_config_warnings(warnings: Sequence[ConfigWarning]) -> None:
    """One warning line per ignored or defaulted key (and per alert rule that will not run)."""
    for warning in warnings:
        log.warning("config.warning", key=warning.key or None, message=warning.message)


#: libpq's own source of the state database's password, which asyncpg reads (the URL never
#: holds one); the password file's entries never leave asyncpg's authentication exchange.
PG_PASSWORD_ENV = "PGPASSWORD"


def settings_secrets(settings: Settings, environ: Mapping[str, str] | None = None) -> Secrets:
    """Every secret the settings hold, in every form (see `core.base.rules.secrets`): the alert
    rules' webhook URLs (valid rules and skipped ones alike), the Chroma server token and,
    with `stateUrl`, the PostgreSQL password in `$PGPASSWORD`. A new secret-bearing key joins
    here, and so every log line and printed output hides it."""
    environ = os.environ if environ is None else environ
    found = settings.alerting.rules.secrets()
    if settings.chroma.token is not None:
        found = found | Secrets.of_token(settings.chroma.token.reveal())
    if settings.state.url and environ.get(PG_PASSWORD_ENV):
        found = found | Secrets.of_password(environ[PG_PASSWORD_ENV])
    return found


def load_settings(config: str | None) -> Settings:
    """Load the config, set up logging in its format, log its warnings (once: the settings,
    alert rules included, are read once per process), and refuse a data folder other users
    can reach (ConfigError, exit 2: `core.base.config.private_data`) before any store opens."""
    configure_logging("auto")
    loaded = load_config(config)
    configure_logging(loaded.settings.log_format, secrets=settings_secrets(loaded.settings))
    log_config_warnings(loaded.warnings)
    refuse_open_data_folders(loaded.settings)
    return loaded.settings
