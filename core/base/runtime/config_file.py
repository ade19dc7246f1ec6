"""Finding and reading the configuration file: `--config F`, else `$KB_CONFIG`, else
`config/kb.toml` when it exists, else all defaults (CONTRACT's order).

The parsed document goes to `core.base.config.config.resolve_config`, which defaults and warns
defensively, except for the keys that say where data lives (those are errors when invalid). A
file that exists but cannot be read or parsed is an error: exit 2 with the file, and for a
syntax error its line and column.

In server mode the files the connection needs are read here, before any store opens, so a
missing or unreadable one is exit 2 naming its key and path rather than a failure half-way
through a command: the token (`chromaAuthTokenFile`; when that is empty, `$KB_CHROMA_TOKEN`; the
file wins because it is what the config names, and an inherited environment variable must not
silently redirect a configured deployment) and the CA bundle (`chromaCaFile`). The token is
held as a `Secret` and no message here quotes it. One token and one CA bundle serve both
servers when `memoryCoreChromaUrl` names a second one (the original reaches both alike), and a
memory server without `chromaUrl` is exit 2 here too (`memory_core_problem`).
"""

from __future__ import annotations

import dataclasses
import os
import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from core.base.config.chroma_server import TOKEN_ENV_VAR, token_problem
from core.base.config.config import (
    TABLE,
    ConfigWarning,
    LoadedConfig,
    Secret,
    memory_core_problem,
    resolve_config,
)
from core.base.rules.errors import ConfigError
from core.base.state.neo_layout import with_graph_layout

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
    """Find, read and resolve the configuration per CONTRACT; raises ConfigError on a file that
    cannot be read or parsed, and on a named file (`--config F`, `$KB_CONFIG`) that does not
    exist: running on defaults instead would put the data in a folder nobody named (the
    defaults resolve against the missing file's folder)."""
    environ = os.environ if environ is None else environ
    path = choose_config_file(explicit, environ)
    if path is None:
        return with_graph_layout(resolve_config({}, base_dir=Path.cwd()), environ)
    document = parse_toml_file(path)
    if document is None:
        named_by = "--config" if explicit else f"${CONFIG_ENV_VAR}"
        raise ConfigError(f"{path}: config file not found (named by {named_by}); create it, "
                          f"or name no file for the built-in defaults")
    base_dir = path.resolve().parent
    loaded = resolve_config(document, base_dir=base_dir, source=path.resolve())
    return with_server_credentials(with_graph_layout(loaded, environ), environ)


#: The most a token file may hold: a token is a line, not a document (a wrong path that
#: names a large file is refused instead of read into memory).
MAX_TOKEN_FILE_BYTES = 64 * 1024


def with_server_credentials(loaded: LoadedConfig, environ: Mapping[str, str]) -> LoadedConfig:
    """`loaded` with the server-mode token read and the CA bundle checked (ConfigError naming
    the key and file when either cannot be used); in embedded mode, a warning for each of
    those keys that is set, since nothing uses it."""
    settings = loaded.settings
    where = str(settings.source) if settings.source is not None else "configuration"
    problem = memory_core_problem(settings)
    if problem is not None:
        raise ConfigError(f"{where}: {problem}")
    if not settings.chroma.server_mode:
        unused = [ConfigWarning(name, f"{TABLE}.{name} is set but unused: there is no chromaUrl")
                  for name, value in (("chromaAuthTokenFile", settings.chroma.auth_token_file),
                                      ("chromaCaFile", settings.chroma.ca_file))
                  if value is not None]
        return LoadedConfig(settings, (*loaded.warnings, *unused))
    token: str | None = None
    if settings.chroma.auth_token_file is not None:
        token = _read_token_file(settings.chroma.auth_token_file, where=where)
    elif environ.get(TOKEN_ENV_VAR):
        token = environ[TOKEN_ENV_VAR]
        problem = token_problem(token)
        if problem is not None:
            raise ConfigError(f"${TOKEN_ENV_VAR}: cannot be used as a Chroma token: {problem}")
    warnings = loaded.warnings
    if settings.chroma.ca_file is not None:
        _check_ca_file(settings.chroma.ca_file, where=where)
        if not any(url.startswith("https://")
                   for url in (settings.chroma.url, settings.chroma.memory_core_url)):
            warnings = (*warnings, ConfigWarning(
                "chromaCaFile", f"{TABLE}.chromaCaFile is unused: chromaUrl is not https"))
    secret = Secret(token) if token is not None else None
    chroma = dataclasses.replace(settings.chroma, token=secret)
    return LoadedConfig(dataclasses.replace(settings, chroma=chroma), warnings)


def _read_token_file(path: Path, *, where: str) -> str:
    """The token in `path`, its final line ending removed; ConfigError naming the key and the
    file (never the content) when it is missing, unreadable, empty or not a token."""
    head = f"{where}: {TABLE}.chromaAuthTokenFile: {path}"
    try:
        with path.open("rb") as handle:
            raw = handle.read(MAX_TOKEN_FILE_BYTES + 1)
    except OSError as exc:
        raise ConfigError(f"{head}: cannot read it: {exc.strerror or type(exc).__name__}"
                          ) from None
    if len(raw) > MAX_TOKEN_FILE_BYTES:
        raise ConfigError(f"{head}: holds more than {MAX_TOKEN_FILE_BYTES} bytes; "
                          "a token file holds one token")
    try:
        text = raw.decode("ascii")
    except UnicodeDecodeError:
        raise ConfigError(f"{head}: cannot be used as a token: it is not ASCII") from None
    token = text.removesuffix("\n").removesuffix("\r")
    problem = token_problem(token)
    if problem is not None:
        raise ConfigError(f"{head}: cannot be used as a token: {problem}")
    return token


def _check_ca_file(path: Path, *, where: str) -> None:
    """ConfigError naming the key and file unless `path` is a readable file."""
    head = f"{where}: {TABLE}.chromaCaFile: {path}"
    try:
        with path.open("rb") as handle:
            handle.read(1)
    except OSError as exc:
        raise ConfigError(f"{head}: cannot read it: {exc.strerror or type(exc).__name__}"
                          ) from None
