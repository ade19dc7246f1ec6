"""The `[knowledgeBase]` configuration: one table of keys, read defensively into one frozen object.

`KEYS` is the single source of truth for every key: its TOML name, type, default, valid range and
the reason for the default. `Settings`, the README's configuration table and
`config/kb.example.toml` are all derived from it (`make docs`: `python -m daemons.docs`).

Reading is defensive because the file is shared with other programs and outlives releases: a
missing file, table or key takes its default; a wrong type or an out-of-range value takes its
default with one warning naming the key, the expected type and the value seen; an unknown key
is warned about (it is usually a typo). Destructive switches are on only for a TOML `true`, and
the two destructive guards fail closed: an invalid `reconciliationMaxDeletesPerTick` or
`reconciliationMaxStaleFraction` takes a value that deletes nothing (`Key.closed_value`) and
is listed in `Settings.invalid_guards`, never a looser default.
Only a file that cannot be parsed at all is an error (exit 2 with file, line and column); the
file is found and read by `core.stores.config_file`, which hands the parsed document here.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit, urlunsplit

from core.rules.alert_rules import AlertRules, parse_alert_rules
from core.rules.chroma_server import (
    AUTH_HEADERS,
    ChromaServer,
    InvalidChromaUrl,
    parse_chroma_url,
)
from core.rules.errors import ConfigError
from core.rules.state_url import InvalidStateUrl, parse_state_url
from core.rules.values import is_real_number, is_whole_number

TABLE = "knowledgeBase"

KeyType = Literal[
    "string", "path", "file", "url", "stateurl", "name", "collection", "integer", "number",
    "boolean", "enum", "rules"
]

_COLLECTION_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{1,510}[A-Za-z0-9]$")
_IPV4 = re.compile(r"^\d{1,3}(\.\d{1,3}){3}$")
#: A Chroma tenant or database name: it becomes a segment of the server's URL paths.
_SERVER_NAME = re.compile(r"^[A-Za-z0-9._~-]{1,512}$")
LOG_FORMATS = ("auto", "json", "console")


@dataclass(frozen=True, slots=True)
class Key:
    """One configuration key: how it is spelled, checked and defaulted, and why."""

    name: str
    type: KeyType
    default: Any
    reason: str
    #: Extra validity test beyond the type, with the wording used in warnings and docs.
    valid: Callable[[Any], bool] | None = None
    valid_text: str = ""
    #: For path keys whose default lives under `dataDir`: the relative path below it.
    under_data_dir: str | None = None
    #: For a destructive guard: the value an invalid setting resolves to instead of the
    #: default, one that deletes nothing (a looser default is never a safe guess).
    closed_value: Any = None
    #: How the docs say what the closed value does (the guards' default wording when empty).
    closed_note: str = ""
    #: What the warning says the closed value does.
    closed_effect: str = "deleting nothing"
    #: The allowed values of an "enum" key.
    choices: tuple[str, ...] = ()
    #: A key that names where data lives or what is acted on: an invalid value is a
    #: configuration error (exit 2), never a default, since a default would read or write
    #: another store, folder or collection than the operator named.
    locating: bool = False

    @property
    def fails_closed(self) -> bool:
        """Whether an invalid value of this key shuts the destructive work off."""
        return self.closed_value is not None

    @property
    def field_name(self) -> str:
        """The snake_case attribute of `Settings` that holds this key's value."""
        return re.sub(r"(?<!^)(?=[A-Z])", "_", self.name).lower()

    @property
    def type_text(self) -> str:
        """The expected type as a reader of the TOML file would name it."""
        base = {
            "string": "string",
            "path": "string (path)",
            "file": 'string (path to a file; "" for none)',
            "url": 'string ("" or http(s)://host[:port][/prefix])',
            "stateurl": 'string ("" or postgresql://host[:port]/database, no password)',
            "name": 'string ("" for Chroma\'s default, else letters, digits, ".", "_", "~", "-")',
            "collection": "string (Chroma collection name)",
            "integer": "integer",
            "number": "number",
            "boolean": "boolean",
            "enum": " | ".join(f'"{v}"' for v in self.choices),
            "rules": "array of tables",
        }[self.type]
        return f"{base} {self.valid_text}".strip()

    @property
    def default_text(self) -> str:
        """The default as it would be written in TOML (path defaults shown under dataDir)."""
        if self.under_data_dir is not None:
            return f'"<dataDir>/{self.under_data_dir}"'
        return toml_literal(self.default)


def _at_least(low: float) -> Callable[[Any], bool]:
    return lambda v: v >= low


def _port(v: int) -> bool:
    return 0 <= v <= 65535


def _fraction(v: float) -> bool:
    return 0 < v <= 1


def url_without_user_info(url: str) -> str:
    """`url` as it may be shown or logged (pure): any `user:password@` left out, so
    `http://alice:pw@host:8000` shows as `http://host:8000`; a URL that cannot be parsed shows
    as everything after its last `@` (or as written when it has none)."""
    try:
        parts = urlsplit(url)
        if "@" not in parts.netloc:
            return url
        return urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))
    except ValueError:
        return url.rpartition("@")[2]


# Every key, in the order the README and the example file list them. Each default is written
# here once; nothing else in the project spells a default out.
KEYS: tuple[Key, ...] = (
    Key("dataDir", "path", ".kb-data", "one folder for all local state; easy to back up or wipe",
        locating=True),
    Key("chromaPath", "path", None, "embedded store beside the rest of the state",
        under_data_dir="chroma", locating=True),
    Key("chromaUrl", "url", "", "embedded mode needs no server; set a URL to share one store",
        locating=True),
    Key("chromaTenant", "name", "", "Chroma's own default tenant (`default_tenant`) unless a "
        "hosted or shared server gives you one", locating=True),
    Key("chromaDatabase", "name", "", "Chroma's own default database (`default_database`) "
        "unless a hosted or shared server gives you one", locating=True),
    Key("chromaAuthTokenFile", "file", "", "server mode: a file holding the token a secured "
        "server or proxy expects (else `$KB_CHROMA_TOKEN`); a file keeps it out of the config",
        locating=True),
    Key("chromaAuthHeader", "enum", "Authorization", "`Authorization: Bearer <token>` is what "
        "proxies expect; `X-Chroma-Token: <token>` is Chroma's own header",
        choices=AUTH_HEADERS, locating=True),
    Key("chromaCaFile", "file", "", "server mode over https: a CA bundle for a server whose "
        "certificate a private CA signed (the system's CAs otherwise)", locating=True),
    Key("stateUrl", "stateurl", "", "SQLite at graphDbPath is the embedded default; a "
        "PostgreSQL URL lets several hosts share the state (password from PGPASSFILE or "
        "PGPASSWORD, never the URL)", locating=True),
    Key("graphDbPath", "path", None, "graph, telemetry and daemon state share one SQLite file",
        under_data_dir="graph.sqlite", locating=True),
    Key("lazyEdgesQueuePath", "path", None, "the path producers already write to",
        under_data_dir="memory-core/lazy-edges.jsonl", locating=True),
    Key("memoryCollection", "collection", "neo-agent-memory", "the platform's memory collection",
        locating=True),
    Key("summaryCollection", "collection", "neo-agent-sessions",
        "the platform's session-summary collection", locating=True),
    Key("knowledgeBaseCollection", "collection", "neo-knowledge-base",
        "the platform's knowledge-base collection", locating=True),
    Key("remIntervalMs", "integer", 3_600_000, "one REM cycle an hour, as the platform dreams",
        _at_least(1), ">= 1"),
    Key("remLiveIngestOverlapMs", "integer", 86_400_000,
        "a day of overlap re-reads late-arriving summaries; re-ingesting is a no-op",
        _at_least(0), ">= 0"),
    Key("lazyEdgeMaxAttempts", "integer", 10,
        "ten hourly tries give a late row half a day to appear before the line is parked",
        _at_least(1), ">= 1"),
    Key("reconciliationEnabled", "boolean", False, "opt-in: the daemon idles until asked"),
    Key("reconciliationIntervalMs", "integer", 3_600_000,
        "hourly: drift is found within the hour it appears", _at_least(1), ">= 1"),
    Key("reconciliationAutoTombstone", "boolean", False,
        "destructive, so detect-and-report only unless switched on"),
    Key("reconciliationOrphanVersionGap", "number", 2,
        "one version of grace lets a re-ingest in progress finish before anything is deleted",
        _at_least(1), ">= 1", closed_value=math.inf,
        closed_note="**an invalid value makes nothing actionable by version** (fails closed)",
        closed_effect="nothing is actionable by version"),
    Key("reconciliationManifestGraceMs", "integer", 86_400_000,
        "a day lets a push that is still arriving land before a manifest judges its chunks",
        _at_least(0), ">= 0", closed_value=math.inf,
        closed_note="**an invalid value makes no manifest orphan actionable** (fails closed)",
        closed_effect="no manifest orphan is actionable"),
    Key("reconciliationMaxDeletesPerTick", "integer", 10_000,
        "bounds the damage of a mistake to one pass's worth; later passes continue",
        _at_least(0), ">= 0", closed_value=0),
    Key("reconciliationMaxStaleFraction", "number", 0.5,
        "losing most of a tenant at once is more likely an operator error than drift",
        _fraction, "in (0, 1]", closed_value=0.0),
    Key("alertingEnabled", "boolean", False, "no alerts until rules are written"),
    Key("alertingIntervalMs", "integer", 900_000,
        "four looks an hour notice drift within one reconcile interval",
        _at_least(1), ">= 1"),
    Key("alertingCooldownMs", "integer", 3_600_000,
        "one reminder an hour per alert key: heard, not spammed", _at_least(0), ">= 0"),
    Key("alertWindowMs", "integer", 3_600_000, "matches one reconcile interval of telemetry",
        _at_least(1), ">= 1"),
    Key("alertRules", "rules", (), "no rules, no alerts; see the commented examples"),
    Key("logFormat", "enum", "auto", "readable on a terminal, JSON lines for journald and tools",
        choices=LOG_FORMATS),
    Key("metricsPort", "integer", 0, "off unless asked; loopback only when on", _port,
        "in [0, 65535]"),
)

KEYS_BY_NAME: Mapping[str, Key] = {k.name: k for k in KEYS}


@dataclass(frozen=True, slots=True)
class Secret:
    """A credential: its repr and str say only that it is there, so no log line, traceback,
    error or report that shows the object holding it can show the credential."""

    value: str = field(repr=False)

    def __repr__(self) -> str:
        return "Secret(<redacted>)"

    def __str__(self) -> str:
        return "<redacted>"

    def reveal(self) -> str:
        """The credential itself, for the one place that sends it (the Chroma client)."""
        return self.value


@dataclass(frozen=True, slots=True)
class Settings:
    """The resolved `[knowledgeBase]` table: every path absolute, every value checked."""

    data_dir: Path
    chroma_path: Path
    #: The canonical form of a valid `chromaUrl` (`ChromaServer.url`); "" for embedded mode.
    chroma_url: str
    #: "" for Chroma's default tenant / database.
    chroma_tenant: str
    chroma_database: str
    #: None when no token file is configured.
    chroma_auth_token_file: Path | None
    chroma_auth_header: str
    #: None for the system's CA certificates.
    chroma_ca_file: Path | None
    #: "" for SQLite at `graph_db_path`; else a PostgreSQL URL without a password.
    state_url: str
    graph_db_path: Path
    lazy_edges_queue_path: Path
    memory_collection: str
    summary_collection: str
    knowledge_base_collection: str
    rem_interval_ms: int
    rem_live_ingest_overlap_ms: int
    lazy_edge_max_attempts: int
    reconciliation_enabled: bool
    reconciliation_interval_ms: int
    reconciliation_auto_tombstone: bool
    #: math.inf when configured with an invalid value: nothing is actionable by version.
    reconciliation_orphan_version_gap: float
    #: math.inf when configured with an invalid value: no manifest orphan is actionable.
    reconciliation_manifest_grace_ms: int | float
    reconciliation_max_deletes_per_tick: int
    reconciliation_max_stale_fraction: float
    alerting_enabled: bool
    alerting_interval_ms: int
    alerting_cooldown_ms: int
    alert_window_ms: int
    #: The rules, parsed once here; the invalid ones were warned about once, at load.
    alert_rules: AlertRules
    log_format: str
    metrics_port: int
    #: The file these settings came from; None when every key took its default.
    source: Path | None = field(default=None, compare=False)
    #: Keys that fail closed whose configured value was invalid (TOML names): each is at its
    #: closed value. While a pass-wide guard (`reconciliation.PASS_GUARDS`) is listed a pass
    #: deletes nothing; an invalid gap or grace shuts off only what it governs.
    invalid_guards: tuple[str, ...] = ()
    #: The server-mode token (from `chromaAuthTokenFile` or `$KB_CHROMA_TOKEN`), read by
    #: `core.stores.config_file` before any store opens; never shown (see `Secret`).
    chroma_token: Secret | None = field(default=None, compare=False)

    def __repr__(self) -> str:
        """Every field but what could hold a secret: the alert rules (webhook URLs carry
        user-info, paths and queries that are credentials) are counted, and the token is
        only said to be present. Tracebacks and debuggers show this."""
        shown = []
        for name in self.__dataclass_fields__:
            value = getattr(self, name)
            if name == "alert_rules":
                text = f"<{len(value.valid)} valid, {len(value.skipped)} skipped rules>"
            else:
                text = repr(value)
            shown.append(f"{name}={text}")
        return f"Settings({', '.join(shown)})"

    @property
    def chroma_server(self) -> ChromaServer | None:
        """The server `chromaUrl` names (valid by construction), or None in embedded mode."""
        return parse_chroma_url(self.chroma_url) if self.chroma_url else None

    @property
    def draining_path(self) -> Path:
        """The in-flight copy of the queue (`<queue>.draining`)."""
        return self.lazy_edges_queue_path.with_name(self.lazy_edges_queue_path.name + ".draining")

    @property
    def dead_letter_path(self) -> Path:
        """Lines that will never apply, with their reasons (`<queue>.dead.jsonl`)."""
        return self.lazy_edges_queue_path.with_name(self.lazy_edges_queue_path.name + ".dead.jsonl")

    @property
    def tombstones_dir(self) -> Path:
        """Where chunk archives are written before a delete."""
        return self.data_dir / "tombstones"

    @property
    def telemetry_spool_path(self) -> Path:
        """Telemetry rows SQLite refused, kept for the next pass
        (see core.stores.telemetry_spool)."""
        return self.data_dir / "telemetry-spool.jsonl"

    @property
    def chroma_url_shown(self) -> str:
        """`chromaUrl` as status, logs and errors may show it: without user-info."""
        return url_without_user_info(self.chroma_url)

    @property
    def server_mode(self) -> bool:
        """True when a Chroma server is used instead of the embedded store."""
        return self.chroma_url != ""


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


def toml_literal(value: Any) -> str:
    """Render a default as TOML source (for docs and the example file)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, int):
        return f"{value:_}" if abs(value) >= 10_000 else str(value)
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, (tuple, list)) and not value:
        return "[]"
    raise TypeError(f"no TOML literal for {value!r}")


def _type_ok(key: Key, value: Any) -> bool:
    """Whether `value` has the TOML type `key` expects; bool is never a number here."""
    match key.type:
        case "string" | "path" | "file" | "url" | "stateurl" | "name" | "collection" | "enum":
            return isinstance(value, str)
        case "integer":
            return is_whole_number(value)
        case "number":
            return is_real_number(value)
        case "boolean":
            return isinstance(value, bool)
        case "rules":
            return isinstance(value, list)
    return False  # pragma: no cover - Literal is exhaustive


def _value_ok(key: Key, value: Any) -> bool:
    """Whether a value of the right type is also in range."""
    return value_problem(key, value) is None


def value_problem(key: Key, value: Any) -> str | None:
    """What is wrong with a value of the right type for `key`, or None when it is valid."""
    match key.type:
        case "path" | "file":
            if value == "":
                return None if key.type == "file" else "it is empty"
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
    """Turn a parsed TOML document into Settings, defaulting and warning defensively.

    Pure: no file access, no clock. `base_dir` anchors relative paths (the config file's folder,
    or the current folder when no file is used). Raises ConfigError (one line naming the file,
    the key and what was expected) for an invalid key that names where data lives or what is
    acted on (`Key.locating`), and for a table that is a near miss of `[knowledgeBase]` when
    the file has no `[knowledgeBase]`: running on defaults would act on other data.
    """
    where = str(source) if source is not None else "configuration"
    warnings: list[ConfigWarning] = []
    table = _knowledge_base_table(document, warnings, where=where)
    _refuse_invalid_locating_keys(table, where=where)
    values, invalid_guards = _checked_values(table, warnings)
    resolved = _resolved(values, base_dir=base_dir, warnings=warnings)
    return LoadedConfig(
        Settings(**resolved, source=source, invalid_guards=tuple(invalid_guards)),
        tuple(warnings),
    )


def _knowledge_base_table(
    document: Mapping[str, Any], warnings: list[ConfigWarning], *, where: str
) -> Mapping[str, Any]:
    """The `[knowledgeBase]` table ({} when absent), warning about every key it should not
    have. A near-miss table (`[knowledgebase]`, `[knowledge_base]`...) is an error when there
    is no `[knowledgeBase]` (its keys would be silently unread and everything run on
    defaults), a warning beside a real one; a `knowledgeBase` that is not a table is an error."""
    near_misses = [name for name in document
                   if name != TABLE and _folded(name) == _folded(TABLE)]
    if near_misses and TABLE not in document:
        raise ConfigError(f"{where}: table [{near_misses[0]}] is not read: the table must be "
                          f"spelled [{TABLE}] (table names are case-sensitive)")
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
    """ConfigError for the first locating key whose value is invalid (the rest named by
    count): these keys never fall back to a default."""
    invalid = [(key, table[key.name]) for key in KEYS
               if key.locating and key.name in table
               and not (_type_ok(key, table[key.name]) and _value_ok(key, table[key.name]))]
    if not invalid:
        return
    key, seen = invalid[0]
    more = f" (and {len(invalid) - 1} more invalid key(s))" if len(invalid) > 1 else ""
    raise ConfigError(f"{where}: {locating_value_message(key, seen)}{more}")


def locating_value_message(key: Key, seen: Any) -> str:
    """What is wrong with an invalid locating key's value: the key, the expected form, the
    value seen (a URL without its user-info) and, for a value of the right type, the problem."""
    problem = value_problem(key, seen) if _type_ok(key, seen) else None
    return (f"{TABLE}.{key.name}: expected {key.type_text}, got {_shown_value(key, seen)}"
            + (f": {problem}" if problem else ""))


def _checked_values(
    table: Mapping[str, Any], warnings: list[ConfigWarning]
) -> tuple[dict[str, Any], list[str]]:
    """Each key's value as configured when valid, else its default (or, for a destructive
    guard, its closed value, and the guard's name in the second list), with a warning."""
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
    """The Settings fields: paths absolute (under `dataDir` by default), URLs without a
    trailing slash, alert rules parsed (each one that will not run warned about)."""
    data_dir = _absolute(base_dir, values["dataDir"])
    resolved: dict[str, Any] = {}
    for key in KEYS:
        value = values[key.name]
        if key.type == "path":
            if value is None and key.under_data_dir is not None:
                value = data_dir / key.under_data_dir
            else:
                value = _absolute(base_dir, value)
        elif key.type == "file":
            value = _absolute(base_dir, value) if value else None
        elif key.type == "url":
            value = parse_chroma_url(value).url if value else ""
        elif key.type == "rules":
            value = parse_alert_rules(value)
            warnings.extend(ConfigWarning(key.name, f"{TABLE}.{where} {problem}")
                            for where, problem in value.problems())
        resolved[key.field_name] = value
    return resolved


def invalid_value_message(key: Key, seen: Any) -> str:
    """The warning for a value of the wrong type or out of range: what was expected, what was
    seen, and what is used instead. The value of `alertRules` is described, never quoted: it
    may hold webhook URLs with credentials in them; a URL is quoted without its user-info."""
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
    """A table name with case and separators removed: `knowledge_base`, `Knowledge-Base` and
    `knowledgebase` all fold to the same word as `knowledgeBase`."""
    return re.sub(r"[^a-z0-9]", "", name.lower())


def _absolute(base_dir: Path, value: str | Path) -> Path:
    path = Path(value).expanduser() if str(value).startswith("~") else Path(value)
    return path if path.is_absolute() else (base_dir / path).resolve()


def _closest_key(name: str) -> str | None:
    """Suggest the real key an unknown one was probably meant to be (case or typo)."""
    import difflib

    lowered = {k.lower(): k for k in KEYS_BY_NAME}
    if name.lower() in lowered:
        return lowered[name.lower()]
    match = difflib.get_close_matches(name, list(KEYS_BY_NAME), n=1, cutoff=0.8)
    return match[0] if match else None


#: How the docs say that a guard fails closed.
CLOSED_NOTE = "**an invalid value deletes nothing** (the guard fails closed)"


def render_markdown_table() -> str:
    """The README's configuration table, generated so it cannot drift from KEYS."""
    rows = ["| key | type | default | why this default |", "|---|---|---|---|"]
    for key in KEYS:
        type_text = key.type_text.replace("|", "\\|")
        reason = key.reason + (f"; {key.closed_note or CLOSED_NOTE}" if key.fails_closed
                               else "")
        rows.append(f"| `{key.name}` | {type_text} | `{key.default_text}` | {reason} |")
    return "\n".join(rows) + "\n"


# Commented example rules shown under `alertRules` in the example file; a test checks that each
# one passes the alert rule validation once uncommented.
EXAMPLE_ALERT_RULES_TOML: tuple[str, ...] = (
    "#",
    "# Persistent drift: a tenant found stale chunks in more than two passes of the window.",
    "# [[knowledgeBase.alertRules]]",
    '# metric = "reconcileEvents"',
    "# threshold = 2",
    '# severity = "warning"',
    '# channels = ["console"]',
    "#",
    "# Drift volume: more than 5,000 stale chunks reported for one repo within the window.",
    "# [[knowledgeBase.alertRules]]",
    '# metric = "chunksTotal"',
    "# threshold = 5000",
    '# severity = "critical"',
    '# channels = ["console", "webhook:http://127.0.0.1:9000/kb-alerts"]',
    '# scope = "repo"',
)


# The example's one uncommented key. Relative paths resolve against the config file's folder,
# so a copy at config/kb.toml names the repository's .kb-data, the folder `make run-daemons`
# and `make demo` use without a config file: copying the example does not move the data.
EXAMPLE_DATA_DIR = "../.kb-data"
EXAMPLE_DATA_DIR_TOML: tuple[str, ...] = (
    "# Relative to this file's folder: config/kb.toml -> <repository>/.kb-data, the folder",
    "# used when there is no config file at all.",
    f"dataDir = {toml_literal(EXAMPLE_DATA_DIR)}",
)


def render_example_toml() -> str:
    """`config/kb.example.toml`: every key commented out at its default, with its reason."""
    lines = [
        "# Example configuration for the kb daemons, ready to copy as it is:",
        "#   cp config/kb.example.toml config/kb.toml",
        "# Every key but dataDir is shown commented out at its default; uncomment what you",
        "# change. Generated from core/rules/config.py (make docs); do not edit by hand.",
        "",
        f"[{TABLE}]",
    ]
    for key in KEYS:
        lines.append(f"# {key.reason} ({key.type_text})")
        if key.fails_closed:
            lines.append(f"# {(key.closed_note or CLOSED_NOTE).replace('**', '')}")
        if key.name == "dataDir":
            lines.extend(EXAMPLE_DATA_DIR_TOML)
        elif key.type == "rules":
            lines.append(f"# {key.name} = []")
            lines.extend(EXAMPLE_ALERT_RULES_TOML)
        else:
            lines.append(f"# {key.name} = {key.default_text}")
        lines.append("")
    return "\n".join(lines).rstrip("\n") + "\n"


README_TABLE_START = "<!-- config-table:start (generated by make docs) -->"
README_TABLE_END = "<!-- config-table:end -->"


def with_readme_table(text: str) -> str:
    """The README's text with its configuration table (between its markers) generated anew;
    ValueError when the markers are missing."""
    if README_TABLE_START not in text or README_TABLE_END not in text:
        raise ValueError("configuration table markers not found")
    head, _, rest = text.partition(README_TABLE_START)
    _, _, tail = rest.partition(README_TABLE_END)
    return f"{head}{README_TABLE_START}\n{render_markdown_table()}{README_TABLE_END}{tail}"
