"""The `[knowledgeBase]` configuration's schema: one table of keys and the frozen `Settings`.

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
file is found and read by `core.base.runtime.config_file`, which hands the parsed document here.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from core.base.config.alert_rules import AlertRules
from core.base.config.chroma_server import (
    AUTH_HEADERS,
    ChromaServer,
    parse_chroma_url,
)
from core.base.config.chroma_server import (
    url_without_user_info as url_without_user_info,
)
from core.base.config.secret import Secret as Secret
from core.base.config.toml_text import toml_literal as toml_literal
from core.base.rules.graph_schema import GRAPH_SCHEMAS, SCHEMA_AUTO
from core.base.rules.numbers import valid_max_age, valid_max_count

TABLE = "knowledgeBase"

KeyType = Literal[
    "string", "path", "file", "folder", "url", "stateurl", "name", "collection", "integer",
    "number", "boolean", "enum", "rules", "retention"
]

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
    #: The key whose resolved value this one takes when it is not set (its default is None).
    inherits: str | None = None
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
        under_data_dir="chroma", locating=True),
    Key("chromaUrl", "url", "", "embedded mode needs no server; set a URL to share one store",
        locating=True),
    Key("memoryCoreChromaUrl", "url", "", "\"\": memories and summaries on `chromaUrl`; a URL "
        "when they have a server of their own (the original's older layout: 8001 beside the "
        "knowledge base's 8000); needs `chromaUrl`", locating=True),
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
    Key("neoRoot", "folder", "", "a neo.mjs checkout: graph, queue and Chroma server default "
        "to its layout and NEO_* variables (a key set here wins)", locating=True),
    Key("graphSchema", "enum", SCHEMA_AUTO, "`auto` reads the graph file's schema (a new "
        "file is `kb`, except with neoRoot); `kb` or `neo` refuses a file of the other",
        choices=GRAPH_SCHEMAS, locating=True),
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
    Key("gcEnabled", "boolean", False,
        "retention deletes by age or count, which no drift justifies: opt-in (#11641)"),
    Key("gcIntervalMs", "integer", 86_400_000,
        "a day, as the original: retention is coarse, one pass a day keeps it", _at_least(1),
        ">= 1"),
    Key("gcRetention", "retention", {},
        "no rule, nothing expires; an invalid table expires nothing (warned)", _retention_ok),
    Key("gcAutoDelete", "boolean", False,
        "destructive, so a retention pass only reports what expired unless switched on"),
    Key("gcDefragThreshold", "number", 0.10,
        "a pass deleting over a tenth of the collection leaves the index worth compacting",
        _at_least(0), ">= 0"),
    Key("archiveMaxAgeMs", "integer", 0,
        "0 keeps every archive (the only way back for what a pass deleted); an age lets the "
        "retention job prune older ones, never a tenant's newest", _at_least(0), ">= 0"),
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
    Key("drainMetricsPort", "integer", None, "the drain daemon alone (its own unit) serves here; "
        "`python -m daemons` serves on `metricsPort`", _port, "in [0, 65535]",
        inherits="metricsPort"),
    Key("reconcileMetricsPort", "integer", None, "the reconcile daemon alone serves here",
        _port, "in [0, 65535]", inherits="metricsPort"),
    Key("drainerGoneIntervals", "integer", 3, "a drainer with no tick for this many "
        "`remIntervalMs` is shown gone and may be forgotten (`kb-drain forget`)",
        _at_least(1), ">= 1"),
)

KEYS_BY_NAME: Mapping[str, Key] = {k.name: k for k in KEYS}


@dataclass(frozen=True, slots=True)
class Settings:
    """The resolved `[knowledgeBase]` table: every path absolute, every value checked."""

    data_dir: Path
    chroma_path: Path
    #: The canonical form of a valid `chromaUrl` (`ChromaServer.url`); "" for embedded mode.
    chroma_url: str
    #: A valid `memoryCoreChromaUrl`, canonical; "" for `chroma_url`'s (`memory_core_url`).
    memory_core_chroma_url: str
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
    #: The neo.mjs checkout whose layout the paths default to; None when not set.
    neo_root: Path | None
    #: `auto`, `kb` or `neo` (`core.base.rules.graph_schema`).
    graph_schema: str
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
    gc_enabled: bool
    gc_interval_ms: int
    #: The `gcRetention` table as configured (valid, or {}): the reconcile's retention reads it.
    gc_retention: Mapping[str, Any]
    gc_auto_delete: bool
    gc_defrag_threshold: float
    #: Archives older than this (ms) are pruned by the retention job, a tenant's newest
    #: never; 0 keeps every archive.
    archive_max_age_ms: int
    alerting_enabled: bool
    alerting_interval_ms: int
    alerting_cooldown_ms: int
    alert_window_ms: int
    #: The rules, parsed once here; the invalid ones were warned about once, at load.
    alert_rules: AlertRules
    log_format: str
    metrics_port: int
    #: A daemon run alone serves here (`drainMetricsPort`, ...; unset: `metricsPort`'s).
    drain_metrics_port: int
    reconcile_metrics_port: int
    drainer_gone_intervals: int
    #: The file these settings came from; None when every key took its default.
    source: Path | None = field(default=None, compare=False)
    #: Keys that fail closed whose configured value was invalid (TOML names): each is at its
    #: closed value. While a pass-wide guard (`reconciliation.PASS_GUARDS`) is listed a pass
    #: deletes nothing; an invalid gap or grace shuts off only what it governs.
    invalid_guards: tuple[str, ...] = ()
    #: The server-mode token (from `chromaAuthTokenFile` or `$KB_CHROMA_TOKEN`), read by
    #: `core.base.runtime.config_file` before any store opens; never shown (see `Secret`).
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
        (see core.base.state.telemetry_spool)."""
        return self.data_dir / "telemetry-spool.jsonl"

    @property
    def chroma_url_shown(self) -> str:
        """`chromaUrl` as status, logs and errors may show it: without user-info."""
        return url_without_user_info(self.chroma_url)

    @property
    def server_mode(self) -> bool:
        """True when a Chroma server is used instead of the embedded store."""
        return self.chroma_url != ""

    @property
    def memory_core_url(self) -> str:
        """The memory and summary collections' server: `memoryCoreChromaUrl`, else `chromaUrl`."""
        return self.memory_core_chroma_url or self.chroma_url

    @property
    def memory_core_apart(self) -> bool:
        """True when the memory core has a server of its own, not the knowledge base's."""
        return self.memory_core_url != self.chroma_url

    @property
    def memory_core_collections(self) -> frozenset[str]:
        """The collections that live on the memory core's server (`memory_core_url`)."""
        return frozenset((self.memory_collection, self.summary_collection))
