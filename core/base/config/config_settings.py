"""The resolved `[knowledgeBase]` table, `Settings`, grouped by concern: `settings.chroma`,
`settings.state`, `settings.drain`, `settings.reconcile`, `settings.gc`, `settings.alerting`,
and at the top what every wing shares (`data_dir`, `log_format`, `metrics_port`, ...).

A setting keeps its name from TOML to use: each key's `Key.group` in `KEYS` says which record
holds it, and `Key.field_name` (the TOML name without the group's prefix, snake_cased) is its
attribute there: `reconciliationOrphanVersionGap` is `settings.reconcile.orphan_version_gap`.
`settings_from` builds the records from the key table alone, so a key without its field, or a
field without its key, fails at the first load (and in `tests/rules/test_config_schema.py`).
A wing reads its own group, and a part of the house that needs only one concern is handed
only that record (the Chroma adapter takes `settings.chroma`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from core.base.config.alert_rules import AlertRules
from core.base.config.chroma_server import ChromaServer, parse_chroma_url, url_without_user_info
from core.base.config.config_schema import KEYS, Key
from core.base.config.secret import Secret


@dataclass(frozen=True, slots=True)
class ChromaSettings:
    """Where the vector store is and how it is reached (`chroma*` keys, the collections)."""

    path: Path
    #: The canonical form of a valid `chromaUrl` (`ChromaServer.url`); "" for embedded mode.
    url: str
    #: A valid `memoryCoreChromaUrl`, canonical; "" for `url`'s (see `memory_core_url`).
    memory_core_chroma_url: str
    #: "" for Chroma's default tenant / database.
    tenant: str
    database: str
    #: None when no token file is configured.
    auth_token_file: Path | None
    auth_header: str
    #: None for the system's CA certificates.
    ca_file: Path | None
    memory_collection: str
    summary_collection: str
    knowledge_base_collection: str
    #: The server-mode token (from `chromaAuthTokenFile` or `$KB_CHROMA_TOKEN`), read by
    #: `core.base.runtime.config_file` before any store opens; never shown (see `Secret`).
    token: Secret | None = field(default=None, compare=False)

    @property
    def server(self) -> ChromaServer | None:
        """The server `chromaUrl` names (valid by construction), or None in embedded mode."""
        return parse_chroma_url(self.url) if self.url else None

    @property
    def url_shown(self) -> str:
        """`chromaUrl` as status, logs and errors may show it: without user-info."""
        return url_without_user_info(self.url)

    @property
    def server_mode(self) -> bool:
        """True when a Chroma server is used instead of the embedded store."""
        return self.url != ""

    @property
    def memory_core_url(self) -> str:
        """The memory and summary collections' server: `memoryCoreChromaUrl`, else `chromaUrl`."""
        return self.memory_core_chroma_url or self.url

    @property
    def memory_core_apart(self) -> bool:
        """True when the memory core has a server of its own, not the knowledge base's."""
        return self.memory_core_url != self.url

    @property
    def memory_core_collections(self) -> frozenset[str]:
        """The collections that live on the memory core's server (`memory_core_url`)."""
        return frozenset((self.memory_collection, self.summary_collection))


@dataclass(frozen=True, slots=True)
class StateSettings:
    """Where the graph, telemetry and daemon state live (`stateUrl`, `graphDbPath`, ...)."""

    #: "" for SQLite at `graph_db_path`; else a PostgreSQL URL without a password.
    url: str
    graph_db_path: Path
    #: The neo.mjs checkout whose layout the paths default to; None when not set.
    neo_root: Path | None
    #: `auto`, `kb` or `neo` (`core.base.rules.graph_schema`).
    graph_schema: str


@dataclass(frozen=True, slots=True)
class DrainSettings:
    """The drain daemon's: its queue, its REM tick, its metrics port, its drainers."""

    lazy_edges_queue_path: Path
    rem_interval_ms: int
    rem_live_ingest_overlap_ms: int
    lazy_edge_max_attempts: int
    #: The drain daemon run alone serves here (`drainMetricsPort`; unset: `metricsPort`'s).
    metrics_port: int
    drainer_gone_intervals: int

    @property
    def draining_path(self) -> Path:
        """The in-flight copy of the queue (`<queue>.draining`)."""
        return self.lazy_edges_queue_path.with_name(self.lazy_edges_queue_path.name + ".draining")

    @property
    def dead_letter_path(self) -> Path:
        """Lines that will never apply, with their reasons (`<queue>.dead.jsonl`)."""
        return self.lazy_edges_queue_path.with_name(self.lazy_edges_queue_path.name + ".dead.jsonl")


@dataclass(frozen=True, slots=True)
class ReconcileSettings:
    """The reconcile pass's (`reconciliation*` keys, `reconcileMetricsPort`)."""

    enabled: bool
    interval_ms: int
    auto_tombstone: bool
    #: math.inf when configured with an invalid value: nothing is actionable by version.
    orphan_version_gap: float
    #: math.inf when configured with an invalid value: no manifest orphan is actionable.
    manifest_grace_ms: int | float
    max_deletes_per_tick: int
    max_stale_fraction: float
    #: The reconcile daemon run alone serves here (`reconcileMetricsPort`; unset:
    #: `metricsPort`'s).
    metrics_port: int


@dataclass(frozen=True, slots=True)
class GcSettings:
    """The retention job's (`gc*` keys, and the archives it prunes: `archiveMaxAgeMs`)."""

    enabled: bool
    interval_ms: int
    #: The `gcRetention` table as configured (valid, or {}): the reconcile's retention reads it.
    retention: Mapping[str, Any]
    auto_delete: bool
    defrag_threshold: float
    #: Archives older than this (ms) are pruned by the retention job, a tenant's newest
    #: never; 0 keeps every archive.
    archive_max_age_ms: int


@dataclass(frozen=True, slots=True)
class AlertingSettings:
    """The alerting job's (`alerting*` and `alert*` keys)."""

    enabled: bool
    interval_ms: int
    cooldown_ms: int
    window_ms: int
    #: The rules, parsed once here; the invalid ones were warned about once, at load.
    rules: AlertRules


#: Each group's record, by the name of its `Settings` attribute (`Key.group`).
GROUP_RECORDS: Mapping[str, type] = {
    "chroma": ChromaSettings, "state": StateSettings, "drain": DrainSettings,
    "reconcile": ReconcileSettings, "gc": GcSettings, "alerting": AlertingSettings,
}


@dataclass(frozen=True, slots=True)
class Settings:
    """The resolved `[knowledgeBase]` table: every path absolute, every value checked, each
    key in its concern's record (see the module docstring). The records' reprs show no
    secret: the alert rules are counted, the token only said to be present (`Secret`)."""

    data_dir: Path
    chroma: ChromaSettings
    state: StateSettings
    drain: DrainSettings
    reconcile: ReconcileSettings
    gc: GcSettings
    alerting: AlertingSettings
    log_format: str
    metrics_port: int
    #: The file these settings came from; None when every key took its default.
    source: Path | None = field(default=None, compare=False)
    #: Keys that fail closed whose configured value was invalid (TOML names): each is at its
    #: closed value. While a pass-wide guard (`reconciliation.PASS_GUARDS`) is listed a pass
    #: deletes nothing; an invalid gap or grace shuts off only what it governs.
    invalid_guards: tuple[str, ...] = ()

    @property
    def tombstones_dir(self) -> Path:
        """Where chunk archives are written before a delete."""
        return self.data_dir / "tombstones"

    @property
    def telemetry_spool_path(self) -> Path:
        """Telemetry rows SQLite refused, kept for the next pass
        (see core.base.state.telemetry_spool)."""
        return self.data_dir / "telemetry-spool.jsonl"


def settings_from(
    values: Mapping[str, Any], *, source: Path | None = None,
    invalid_guards: tuple[str, ...] = (), token: Secret | None = None,
) -> Settings:
    """`Settings` from every key's resolved value by TOML name: each value goes to its key's
    group (`Key.group`; none: the top level) under `Key.field_name`."""
    grouped: dict[str, dict[str, Any]] = {group: {} for group in GROUP_RECORDS}
    top: dict[str, Any] = {}
    for key in KEYS:
        (grouped[key.group] if key.group else top)[key.field_name] = values[key.name]
    grouped["chroma"]["token"] = token
    records = {group: record(**grouped[group]) for group, record in GROUP_RECORDS.items()}
    return Settings(**top, **records, source=source, invalid_guards=invalid_guards)


def setting_value(settings: Settings, key: Key) -> Any:
    """The value `settings` holds for `key` (`settings.<group>.<field>`)."""
    holder: Any = getattr(settings, key.group) if key.group else settings
    return getattr(holder, key.field_name)
