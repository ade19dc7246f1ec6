"""Finding and reading the configuration file: `--config F`, else `$KB_CONFIG`, else
`config/kb.toml` when it exists, else all defaults (CONTRACT's order).

The parsed document goes to `core.rules.config.resolve_config`, which defaults and warns
defensively. Only a file that exists but cannot be read or parsed is an error: exit 2 with the
file, and for a syntax error its line and column.
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from core.rules.config import ConfigWarning, LoadedConfig, resolve_config
from core.rules.errors import ConfigError

DEFAULT_CONFIG_FILE = Path("config/kb.toml")
CONFIG_ENV_VAR = "KB_CONFIG"


def choose_config_file(explicit: str | None, environ: Mapping[str, str]) -> Path | None:
    """CONTRACT's lookup order: --config, else $KB_CONFIG, else config/kb.toml if present."""
    if explicit:
        return Path(explicit)
    if environ.get(CONFIG_ENV_VAR):
        return Path(environ[CONFIG_ENV_VAR])
    if DEFAULT_CONFIG_FILE.is_file():
        return DEFAULT_CONFIG_FILE
    return None


_TOML_POSITION = re.compile(r"\s*\(at line (\d+), column (\d+)\)\s*$")


def parse_toml_file(path: Path) -> dict[str, Any] | None:
    """Read and parse a TOML file; None when it does not exist.

    Raises ConfigError with `file:line:col: message` for a syntax error, and with the file
    named for anything that stops it being read (permissions, a folder, invalid UTF-8).
    """
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read config file: {exc.strerror or exc}") from exc
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        column = exc.start - (raw.rfind(b"\n", 0, exc.start) + 1) + 1
        raise ConfigError(f"{path}:{line}:{column}: config file is not valid UTF-8") from exc
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        message = str(exc)
        position = _TOML_POSITION.search(message)
        if position:
            where = f"{path}:{position.group(1)}:{position.group(2)}"
            message = message[: position.start()]
        else:
            where = str(path)
        raise ConfigError(f"{where}: TOML syntax error: {message}") from exc


def load_config(
    explicit: str | None = None, *, environ: Mapping[str, str] | None = None
) -> LoadedConfig:
    """Find, read and resolve the configuration per CONTRACT; raises ConfigError only on a
    file that exists but cannot be parsed."""
    environ = os.environ if environ is None else environ
    path = choose_config_file(explicit, environ)
    if path is None:
        return resolve_config({}, base_dir=Path.cwd())
    document = parse_toml_file(path)
    base_dir = path.resolve().parent
    if document is None:
        loaded = resolve_config({}, base_dir=base_dir)
        missing = ConfigWarning("", f"{path}: config file not found; using all defaults")
        return LoadedConfig(loaded.settings, (missing, *loaded.warnings))
    return resolve_config(document, base_dir=base_dir, source=path.resolve())
