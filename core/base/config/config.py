"""Reading the `[knowledgeBase]` table: a parsed TOML document resolved, defensively, into
`Settings` (the keys and their rules are `core.base.config.config_schema`'s; the README table and
the example file are rendered by `core.base.config.config_docs`).

Reading is defensive because the file is shared with other programs and outlives releases: a
missing file, table or key takes its default; a wrong type or an out-of-range value takes its
default with one warning naming the key, the expected type and the value seen; an unknown key
is warned about (it is usually a typo). Destructive switches are on only for a TOML `true`, and
the destructive guards fail closed (`Key.closed_value`, listed in `Settings.invalid_guards`).
A key that names where data lives never falls back: an invalid value is a ConfigError.

The schema's public names are importable from here too (`Settings`, `KEYS`, ...).
"""


from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core.base.config.alert_rules import parse_alert_rules
from core.base.config.chroma_server import (
    InvalidChromaUrl,
    parse_chroma_url,
)

# The schema, importable from here (explicit re-exports).
from core.base.config.config_schema import (
    KEYS as KEYS,
)
from core.base.config.config_schema import (
    KEYS_BY_NAME as KEYS_BY_NAME,
)
from core.base.config.config_schema import (
    LOG_FORMATS as LOG_FORMATS,
)
from core.base.config.config_schema import (
    TABLE as TABLE,
)
from core.base.config.config_schema import (
    Key as Key,
)
from core.base.config.config_schema import (
    toml_literal as toml_literal,
)
from core.base.config.config_schema import (
    url_without_user_info as url_without_user_info,
)
from core.base.config.config_settings import (
    Settings as Settings,
)
from core.base.config.config_settings import settings_from
from core.base.config.secret import Secret as Secret
from core.base.config.state_url import InvalidStateUrl, parse_state_url
from core.base.rules.errors import ConfigError
from core.base.rules.numbers import is_real_number, is_whole_number

#: Chroma 1.x's collection names.
_COLLECTION_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{1,510}[A-Za-z0-9]$")
_IPV4 = re.compile(r"^\d{1,3}(\.\d{1,3}){3}$")
#: A Chroma tenant or database name: it becomes a segment of the server's URL paths.
_SERVER_NAME = re.compile(r"^[A-Za-z0-9._~-]{1,512}$")


@dataclass(frozen=True, slots=True)
class ConfigWarning:
    """A key that was ignored or defaulted, and why; the caller logs it."""

    key: str
    message: str


@dataclass(frozen=True, slots=True)
class LoadedConfig:
    """Settings plus the warnings found while reading them."""

    settings: Settings
    warnings: tuple[ConfigWarning, ...]
    #: The keys the file set (a default that depends on others, `neoRoot`'s, yields to them).
    given: frozenset[str] = frozenset()


def _type_ok(key: Key, value: Any) -> bool:
    """Whether `value` has the TOML type `key` expects; bool is never a number here."""
    match key.type:
        case ("string" | "path" | "file" | "folder" | "url" | "stateurl" | "name"
              | "collection" | "enum"):
            return isinstance(value, str)
        case "integer":
            return is_whole_number(value)
        case "number":
            return is_real_number(value)
        case "boolean":
            return isinstance(value, bool)
        case "rules":
            return isinstance(value, list)
        case "retention":
            return isinstance(value, Mapping)
    return False  # pragma: no cover - Literal is exhaustive


def _value_ok(key: Key, value: Any) -> bool:
    """Whether a value of the right type is also in range."""
    return value_problem(key, value) is None


def value_problem(key: Key, value: Any) -> str | None:
    """What is wrong with a value of the right type for `key`, or None when it is valid."""
    match key.type:
        case "path" | "file" | "folder":
            if value == "":
                return None if key.type != "path" else "it is empty"
            if value != value.strip():
                return "it has leading or trailing whitespace; remove it"
            if any(ord(c) < 0x20 or ord(c) == 0x7F for c in value):
                return "it contains a control character"  # NUL included: no file has one
            return None
        case "url":
            if value == "":
                return None
            try:
                parse_chroma_url(value)
            except InvalidChromaUrl as exc:
                return str(exc)
            return None
        case "stateurl":
            if value == "":
                return None
            try:
                parse_state_url(value)
            except InvalidStateUrl as exc:
                return str(exc)
            return None
        case "name":
            return None if value == "" or _SERVER_NAME.match(value) else \
                "only letters, digits, '.', '_', '~' and '-' (at most 512)"
        case "collection":
            return None if _collection_name_ok(value) else \
                ("3-512 letters, digits, '.', '_' or '-', starting and ending with a letter or "
                 "digit, no '..', not an IPv4 address")
        case "enum":
            return None if value in key.choices else "not one of the choices"
    return None if key.valid is None or key.valid(value) else "out of range"


def _collection_name_ok(name: str) -> bool:
    """Chroma 1.x's collection name rules, so a name it would refuse fails at load time."""
    return (_COLLECTION_NAME.match(name) is not None and ".." not in name
            and _IPV4.match(name) is None)


def resolve_config(
    document: Mapping[str, Any], *, base_dir: Path, source: Path | None = None
) -> LoadedConfig:
    """Turn a parsed TOML document into Settings, defaulting and warning defensively (pure).

    `base_dir` anchors relative paths. Raises ConfigError (one line) for an invalid locating
    key (`Key.locating`) or a near miss of `[knowledgeBase]` without the real table: running
    on defaults would act on other data.
    """
    where = str(source) if source is not None else "configuration"
    warnings: list[ConfigWarning] = []
    table = _knowledge_base_table(document, warnings, where=where)
    _refuse_invalid_locating_keys(table, where=where)
    values, invalid_guards = _checked_values(table, warnings)
    resolved = _resolved(values, base_dir=base_dir, warnings=warnings)
    return LoadedConfig(
        settings_from(resolved, source=source, invalid_guards=tuple(invalid_guards)),
        tuple(warnings),
        frozenset(k for k in table if k in KEYS_BY_NAME),
    )


def _knowledge_base_table(
    document: Mapping[str, Any], warnings: list[ConfigWarning], *, where: str
) -> Mapping[str, Any]:
    """The `[knowledgeBase]` table ({} when absent), warning about every key it should not
    have. A near-miss table without the real one, a `knowledgeBase` that is not a table, and
    one of its keys at the file's top level are errors: unread, they would run on defaults."""
    near_misses = [name for name in document
                   if name != TABLE and _folded(name) == _folded(TABLE)]
    if near_misses and TABLE not in document:
        raise ConfigError(f"{where}: table [{near_misses[0]}] is not read: the table must be "
                          f"spelled [{TABLE}] (table names are case-sensitive)")
    stray = [name for name in document if name in KEYS_BY_NAME]
    if stray:
        raise ConfigError(f"{where}: {', '.join(stray)} at the top level of the file, not read: "
                          f"put {'it' if len(stray) == 1 else 'them'} under [{TABLE}] (a key "
                          f"above the [{TABLE}] line is outside it)")
    warnings.extend(
        ConfigWarning(name, f"table [{name}] ignored: did you mean [{TABLE}]? "
                            "(table names are case-sensitive)")
        for name in near_misses
    )
    table = document.get(TABLE, {})
    if not isinstance(table, Mapping):
        raise ConfigError(f"{where}: {TABLE} must be a table ([{TABLE}]), got "
                          f"{type(table).__name__}")
    for name in table:
        if name not in KEYS_BY_NAME:
            hint = _closest_key(name)
            warnings.append(
                ConfigWarning(name, f"unknown key {TABLE}.{name} ignored"
                                    + (f" (did you mean {hint}?)" if hint else ""))
            )
    return table


def _refuse_invalid_locating_keys(table: Mapping[str, Any], *, where: str) -> None:
    """ConfigError for the first invalid locating key (the rest counted): these never default."""
    invalid = [(key, table[key.name]) for key in KEYS
               if key.locating and key.name in table
               and not (_type_ok(key, table[key.name]) and _value_ok(key, table[key.name]))]
    if not invalid:
        return
    key, seen = invalid[0]
    more = f" (and {len(invalid) - 1} more invalid key(s))" if len(invalid) > 1 else ""
    raise ConfigError(f"{where}: {locating_value_message(key, seen)}{more}")


def locating_value_message(key: Key, seen: Any) -> str:
    """What is wrong with an invalid locating key's value, as a message may quote it."""
    problem = value_problem(key, seen) if _type_ok(key, seen) else None
    return (f"{TABLE}.{key.name}: expected {key.type_text}, got {_shown_value(key, seen)}"
            + (f": {problem}" if problem else ""))


def memory_core_problem(settings: Settings) -> str | None:
    """Why the settings cannot place the memory and summary collections, or None (pure).

    `memoryCoreChromaUrl` without `chromaUrl` is refused: the knowledge base's server was most
    likely forgotten, and a pass over an empty embedded store would report it clean. With two
    servers, a collection name they share could not say which one it is on. Called once the
    settings are final (a `neoRoot` may supply `chromaUrl`)."""
    chroma = settings.chroma
    if not chroma.memory_core_chroma_url:
        return None
    key = f"{TABLE}.memoryCoreChromaUrl"
    if not chroma.server_mode:
        return (f"{key}: {chroma.memory_core_chroma_url} is set but chromaUrl is empty; "
                "set chromaUrl to the knowledge base's server too (memories on a server "
                "beside a knowledge base in the embedded store is not a layout this reads)")
    if chroma.memory_core_apart and (chroma.knowledge_base_collection
                                     in chroma.memory_core_collections):
        return (f"{key}: the knowledge base and the memory core are on different servers, "
                f"so knowledgeBaseCollection {chroma.knowledge_base_collection!r} must not "
                "also be memoryCollection or summaryCollection")
    return None


def _checked_values(
    table: Mapping[str, Any], warnings: list[ConfigWarning]
) -> tuple[dict[str, Any], list[str]]:
    """Each key's value as configured when valid, else its default (a destructive guard's
    closed value, its name in the second list), with a warning."""
    values: dict[str, Any] = {}
    invalid_guards: list[str] = []
    for key in KEYS:
        if key.name not in table:
            values[key.name] = key.default
            continue
        seen = table[key.name]
        if _type_ok(key, seen) and _value_ok(key, seen):
            values[key.name] = tuple(seen) if key.type == "rules" else seen
            continue
        warnings.append(ConfigWarning(key.name, invalid_value_message(key, seen)))
        if key.fails_closed:
            values[key.name] = key.closed_value
            invalid_guards.append(key.name)
        else:
            values[key.name] = key.default
    return values, invalid_guards


def _resolved(
    values: Mapping[str, Any], *, base_dir: Path, warnings: list[ConfigWarning]
) -> dict[str, Any]:
    """Each key's value as `Settings` holds it, by TOML name: paths absolute (under `dataDir`
    by default), URLs without a trailing slash, alert rules parsed (each one that will not run
    warned about)."""
    data_dir = _absolute(base_dir, values["dataDir"])
    resolved: dict[str, Any] = {}
    for key in KEYS:
        value = values[key.name]
        if key.type == "path":
            if value is None and key.under_data_dir is not None:
                value = data_dir / key.under_data_dir
            else:
                value = _absolute(base_dir, value)
        elif key.type in ("file", "folder"):
            value = _absolute(base_dir, value) if value else None
        elif key.type == "url":
            value = parse_chroma_url(value).url if value else ""
        elif key.type == "rules":
            value = parse_alert_rules(value)
            warnings.extend(ConfigWarning(key.name, f"{TABLE}.{where} {problem}")
                            for where, problem in value.problems())
        elif value is None and key.inherits is not None:
            value = resolved[key.inherits]
        resolved[key.name] = value
    return resolved


def invalid_value_message(key: Key, seen: Any) -> str:
    """The warning for a value of the wrong type or out of range: what was expected, what was
    seen (`_shown_value`), and what is used instead."""
    head = f"{TABLE}.{key.name}: expected {key.type_text}, got {_shown_value(key, seen)}"
    if key.fails_closed:
        return f"{head}; {key.closed_effect} until it is fixed (a destructive guard fails closed)"
    return f"{head}; using default {key.default_text}"


def _shown_value(key: Key, seen: Any) -> str:
    """A configured value as a message may quote it: `alertRules` described by type only (it
    may hold webhook URLs with credentials), a URL without its user-info."""
    if key.type == "rules":
        return f"a {type(seen).__name__}"
    if key.type in ("url", "stateurl") and isinstance(seen, str):
        hidden = url_without_user_info(seen)
        query_at = min((i for i in (hidden.find("?"), hidden.find("#")) if i >= 0), default=-1)
        if query_at >= 0:  # a query may be a token (?token=...): never quoted
            hidden = hidden[:query_at] + "?…"
        return repr(hidden) + (" (its credentials hidden)" if hidden != seen else "")
    return repr(seen)


def _folded(name: str) -> str:
    """A table name with case and separators removed (`knowledge_base` -> `knowledgebase`)."""
    return re.sub(r"[^a-z0-9]", "", name.lower())


def _absolute(base_dir: Path, value: str | Path) -> Path:
    path = Path(value).expanduser() if str(value).startswith("~") else Path(value)
    return path if path.is_absolute() else (base_dir / path).resolve()


def _closest_key(name: str) -> str | None:
    """Suggest the real key an unknown one was probably meant to be (case or typo)."""
    lowered = {k.lower(): k for k in KEYS_BY_NAME}
    if name.lower() in lowered:
        return lowered[name.lower()]
    match = difflib.get_close_matches(name, list(KEYS_BY_NAME), n=1, cutoff=0.8)
    return match[0] if match else None


#: How the docs say that a guard fails closed.
