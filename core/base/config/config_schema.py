"""The `[knowledgeBase]` configuration's schema: one table of keys, each in its concern's group.

`KEYS` is the single source of truth for every key: its TOML name, type, default, valid range,
the reason for the default and the group of `Settings` that holds it (`Key.group` and
`Key.field_name`: `reconciliationOrphanVersionGap` is `settings.reconcile.orphan_version_gap`).
`Settings` (`core.base.config.config_settings`), the README's configuration table and
`config/kb.example.toml` are all derived from it (`make docs`: `python -m daemons.docs`).

Reading is defensive because the file is shared with other programs and outlives releases: a
missing file, table or key takes its default; a wrong type or an out-of-range value takes its
default with one warning naming the key, the expected type and the value seen; an unknown key
is warned about (it is usually a typo). Destructive switches are on only for a TOML `true`, and
the two destructive guards fail closed: an invalid `reconciliationMaxDeletesPerTick` or
`reconciliationMaxStaleFraction` takes a value that deletes nothing (`Key.closed_value`) and
is listed in `Settings.invalid_guards`, never a looser default.
Only a file that cannot be parsed at all is an error (exit 2 with file, line and column); the
file is found and read by `core.base.runtime.config_file`, which hands the parsed document here.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal

from core.base.config.chroma_server import AUTH_HEADERS
from core.base.config.chroma_server import (
    url_without_user_info as url_without_user_info,
)
from core.base.config.toml_text import toml_literal as toml_literal
from core.base.rules.graph_schema import GRAPH_SCHEMAS, SCHEMA_AUTO
from core.base.rules.numbers import valid_max_age, valid_max_count

TABLE = "knowledgeBase"

KeyType = Literal[
    "string", "path", "file", "folder", "url", "stateurl", "name", "collection", "integer",
    "number", "boolean", "enum", "rules", "retention"
]

LOG_FORMATS = ("auto", "json", "console")

# The concerns `Settings` groups the keys by: each is an attribute of `Settings` holding its
# keys (a key of no group is at the top level: what every wing shares).
CHROMA: Final = "chroma"
STATE: Final = "state"
DRAIN: Final = "drain"
RECONCILE: Final = "reconcile"
GC: Final = "gc"
ALERTING: Final = "alerting"

#: The prefixes a group's TOML names start with, which its attributes drop (`chromaUrl` is
#: `settings.chroma.url`, `alertWindowMs` `settings.alerting.window_ms`).
GROUP_PREFIXES: Mapping[str, tuple[str, ...]] = {
    CHROMA: ("chroma",), STATE: ("state",), DRAIN: ("drain",),
    RECONCILE: ("reconciliation", "reconcile"), GC: ("gc",), ALERTING: ("alerting", "alert"),
}


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
    #: The key whose resolved value this one takes when it is not set (its default is None).
    inherits: str | None = None
    #: A key that names where data lives or what is acted on: an invalid value is a
    #: configuration error (exit 2), never a default, since a default would read or write
    #: another store, folder or collection than the operator named.
    locating: bool = False
    #: The group of `Settings` that holds this key's value (`GROUP_PREFIXES`); "" for the top
    #: level.
    group: str = ""

    @property
    def fails_closed(self) -> bool:
        """Whether an invalid value of this key shuts the destructive work off."""
        return self.closed_value is not None

    @property
    def field_name(self) -> str:
        """The snake_case attribute of its group (`Key.group`) that holds this key's value:
        the TOML name without the group's prefix (`reconciliationOrphanVersionGap` ->
        `orphan_version_gap`; `drainerGoneIntervals` keeps its word, `drainer`)."""
        name = self.name
        for prefix in GROUP_PREFIXES.get(self.group, ()):
            rest = name[len(prefix):]
            if name.startswith(prefix) and rest[:1].isupper():
                name = rest
                break
        return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()

    @property
    def type_text(self) -> str:
        """The expected type as a reader of the TOML file would name it."""
        base = {
            "string": "string",
            "path": "string (path)",
            "file": 'string (path to a file; "" for none)',
            "folder": 'string (path to a folder; "" for none)',
            "url": 'string ("" or http(s)://host[:port][/prefix])',
            "stateurl": 'string ("" or postgresql://host[:port]/database, no password)',
            "name": 'string ("" for Chroma\'s default, else letters, digits, ".", "_", "~", "-")',
            "collection": "string (Chroma collection name)",
            "integer": "integer",
            "number": "number",
            "boolean": "boolean",
            "enum": " | ".join(f'"{v}"' for v in self.choices),
            "rules": "array of tables",
            "retention": "table {maxAgeMs? (number > 0), maxCount? (integer >= 0)}",
        }[self.type]
        return f"{base} {self.valid_text}".strip()

    @property
    def default_text(self) -> str:
        """The default as it would be written in TOML (path defaults shown under dataDir)."""
        if self.under_data_dir is not None:
            return f'"<dataDir>/{self.under_data_dir}"'
        if self.inherits is not None:
            return f"<{self.inherits}'s value>"
        return toml_literal(self.default)


def _at_least(low: float) -> Callable[[Any], bool]:
    return lambda v: v >= low


def _port(v: int) -> bool:
    return 0 <= v <= 65535


def _retention_ok(v: Mapping[str, Any]) -> bool:
    """`gcRetention`: only `maxAgeMs` and `maxCount`, each valid (the reconcile's retention)."""
    return (set(v) <= {"maxAgeMs", "maxCount"}
            and ("maxAgeMs" not in v or valid_max_age(v["maxAgeMs"]))
            and ("maxCount" not in v or valid_max_count(v["maxCount"])))


def _fraction(v: float) -> bool:
    return 0 < v <= 1


# Every key, in the order the README and the example file list them. Each default is written
# here once; nothing else in the project spells a default out.
KEYS: tuple[Key, ...] = (
    Key("dataDir", "path", ".kb-data", "one folder for all local state; easy to back up or wipe",
        locating=True),
    Key("chromaPath", "path", None, "embedded store beside the rest of the state",
        under_data_dir="chroma", locating=True, group=CHROMA),
    Key("chromaUrl", "url", "", "embedded mode needs no server; set a URL to share one store",
        locating=True, group=CHROMA),
    Key("memoryCoreChromaUrl", "url", "", "\"\": memories and summaries on `chromaUrl`; a URL "
        "when they have a server of their own (the original's older layout: 8001 beside the "
        "knowledge base's 8000); needs `chromaUrl`", locating=True, group=CHROMA),
    Key("chromaTenant", "name", "", "Chroma's own default tenant (`default_tenant`) unless a "
        "hosted or shared server gives you one", locating=True, group=CHROMA),
    Key("chromaDatabase", "name", "", "Chroma's own default database (`default_database`) "
        "unless a hosted or shared server gives you one", locating=True, group=CHROMA),
    Key("chromaAuthTokenFile", "file", "", "server mode: a file holding the token a secured "
        "server or proxy expects (else `$KB_CHROMA_TOKEN`); a file keeps it out of the config",
        locating=True, group=CHROMA),
    Key("chromaAuthHeader", "enum", "Authorization", "`Authorization: Bearer <token>` is what "
        "proxies expect; `X-Chroma-Token: <token>` is Chroma's own header",
        choices=AUTH_HEADERS, locating=True, group=CHROMA),
    Key("chromaCaFile", "file", "", "server mode over https: a CA bundle for a server whose "
        "certificate a private CA signed (the system's CAs otherwise)", locating=True,
        group=CHROMA),
    Key("stateUrl", "stateurl", "", "SQLite at graphDbPath is the embedded default; a "
        "PostgreSQL URL lets several hosts share the state (password from PGPASSFILE or "
        "PGPASSWORD, never the URL)", locating=True, group=STATE),
    Key("graphDbPath", "path", None, "graph, telemetry and daemon state share one SQLite file",
        under_data_dir="graph.sqlite", locating=True, group=STATE),
    Key("lazyEdgesQueuePath", "path", None, "the path producers already write to",
        under_data_dir="memory-core/lazy-edges.jsonl", locating=True, group=DRAIN),
    Key("neoRoot", "folder", "", "a neo.mjs checkout: graph, queue and Chroma server default "
        "to its layout and NEO_* variables (a key set here wins)", locating=True, group=STATE),
    Key("graphSchema", "enum", SCHEMA_AUTO, "`auto` reads the graph file's schema (a new "
        "file is `kb`, except with neoRoot); `kb` or `neo` refuses a file of the other",
        choices=GRAPH_SCHEMAS, locating=True, group=STATE),
    Key("memoryCollection", "collection", "neo-agent-memory", "the platform's memory collection",
        locating=True, group=CHROMA),
    Key("summaryCollection", "collection", "neo-agent-sessions",
        "the platform's session-summary collection", locating=True, group=CHROMA),
    Key("knowledgeBaseCollection", "collection", "neo-knowledge-base",
        "the platform's knowledge-base collection", locating=True, group=CHROMA),
    Key("remIntervalMs", "integer", 3_600_000, "one REM cycle an hour, as the platform dreams",
        _at_least(1), ">= 1", group=DRAIN),
    Key("remLiveIngestOverlapMs", "integer", 86_400_000,
        "a day of overlap re-reads late-arriving summaries; re-ingesting is a no-op",
        _at_least(0), ">= 0", group=DRAIN),
    Key("lazyEdgeMaxAttempts", "integer", 10,
        "ten hourly tries give a late row half a day to appear before the line is parked",
        _at_least(1), ">= 1", group=DRAIN),
    Key("reconciliationEnabled", "boolean", False, "opt-in: the daemon idles until asked",
        group=RECONCILE),
    Key("reconciliationIntervalMs", "integer", 3_600_000,
        "hourly: drift is found within the hour it appears", _at_least(1), ">= 1",
        group=RECONCILE),
    Key("reconciliationAutoTombstone", "boolean", False,
        "destructive, so detect-and-report only unless switched on", group=RECONCILE),
    Key("reconciliationOrphanVersionGap", "number", 2,
        "one version of grace lets a re-ingest in progress finish before anything is deleted",
        _at_least(1), ">= 1", closed_value=math.inf,
        closed_note="**an invalid value makes nothing actionable by version** (fails closed)",
        closed_effect="nothing is actionable by version", group=RECONCILE),
    Key("reconciliationManifestGraceMs", "integer", 86_400_000,
        "a day lets a push that is still arriving land before a manifest judges its chunks",
        _at_least(0), ">= 0", closed_value=math.inf,
        closed_note="**an invalid value makes no manifest orphan actionable** (fails closed)",
        closed_effect="no manifest orphan is actionable", group=RECONCILE),
    Key("reconciliationMaxDeletesPerTick", "integer", 10_000,
        "bounds the damage of a mistake to one pass's worth; later passes continue",
        _at_least(0), ">= 0", closed_value=0, group=RECONCILE),
    Key("reconciliationMaxStaleFraction", "number", 0.5,
        "losing most of a tenant at once is more likely an operator error than drift",
        _fraction, "in (0, 1]", closed_value=0.0, group=RECONCILE),
    Key("gcEnabled", "boolean", False,
        "retention deletes by age or count, which no drift justifies: opt-in (#11641)",
        group=GC),
    Key("gcIntervalMs", "integer", 86_400_000,
        "a day, as the original: retention is coarse, one pass a day keeps it", _at_least(1),
        ">= 1", group=GC),
    Key("gcRetention", "retention", {},
        "no rule, nothing expires; an invalid table expires nothing (warned)", _retention_ok,
        group=GC),
    Key("gcAutoDelete", "boolean", False,
        "destructive, so a retention pass only reports what expired unless switched on",
        group=GC),
    Key("gcDefragThreshold", "number", 0.10,
        "a pass deleting over a tenth of the collection leaves the index worth compacting",
        _at_least(0), ">= 0", group=GC),
    Key("archiveMaxAgeMs", "integer", 0,
        "0 keeps every archive (the only way back for what a pass deleted); an age lets the "
        "retention job prune older ones, never a tenant's newest", _at_least(0), ">= 0",
        group=GC),
    Key("alertingEnabled", "boolean", False, "no alerts until rules are written",
        group=ALERTING),
    Key("alertingIntervalMs", "integer", 900_000,
        "four looks an hour notice drift within one reconcile interval",
        _at_least(1), ">= 1", group=ALERTING),
    Key("alertingCooldownMs", "integer", 3_600_000,
        "one reminder an hour per alert key: heard, not spammed", _at_least(0), ">= 0",
        group=ALERTING),
    Key("alertWindowMs", "integer", 3_600_000, "matches one reconcile interval of telemetry",
        _at_least(1), ">= 1", group=ALERTING),
    Key("alertRules", "rules", (), "no rules, no alerts; see the commented examples",
        group=ALERTING),
    Key("logFormat", "enum", "auto", "readable on a terminal, JSON lines for journald and tools",
        choices=LOG_FORMATS),
    Key("metricsPort", "integer", 0, "off unless asked; loopback only when on", _port,
        "in [0, 65535]"),
    Key("drainMetricsPort", "integer", None, "the drain daemon alone (its own unit) serves here; "
        "`python -m daemons` serves on `metricsPort`", _port, "in [0, 65535]",
        inherits="metricsPort", group=DRAIN),
    Key("reconcileMetricsPort", "integer", None, "the reconcile daemon alone serves here",
        _port, "in [0, 65535]", inherits="metricsPort", group=RECONCILE),
    Key("drainerGoneIntervals", "integer", 3, "a drainer with no tick for this many "
        "`remIntervalMs` is shown gone and may be forgotten (`kb-drain forget`)",
        _at_least(1), ">= 1", group=DRAIN),
)

KEYS_BY_NAME: Mapping[str, Key] = {k.name: k for k in KEYS}
