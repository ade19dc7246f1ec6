"""The SQL statements the table-group modules run, named: one `Statements` per backend.

The table-group modules (`graph`, `telemetry`, `drain_state`, `daemon_state`, `alert_records`,
`tenants`, `tenant_manifests`) decide which statement runs with which parameters; the text of
each statement is the backend's (`core.base.state.sqlite.statements`), reached through
`GraphDB.sql`. A second backend is a second `Statements`, not edits across the modules.

Every backend takes the same parameters, in the same order, for a statement of the same name
(a list of ids travels as one JSON array text), and returns the same columns.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Statements:
    """One backend's statement texts. Parameters are listed per field, in order."""

    # ------------------------------------------------------------------------- graph
    #: (id, label, properties): create a node unless one exists.
    insert_node_if_absent: str
    #: (id, label, properties, removal): create a node or merge `properties` into it
    #: (RFC 7396: a null in `removal` deletes the key); unreadable stored JSON is replaced.
    upsert_node: str
    #: (source, target, relationship, weight, properties): create an edge unless one exists.
    insert_edge_if_absent: str
    #: (source, target, relationship, weight, properties): create an edge or reinforce it.
    link_edge: str
    #: (ids as JSON array) -> id
    existing_ids: str
    #: (ids as JSON array) -> id, label, properties
    nodes_by_id: str
    #: () -> label, total, backfilled, liveIngested, minimal (MEMORY and SESSION)
    provenance_counts: str
    #: () -> count
    count_nodes: str
    #: () -> count
    count_edges: str
    #: (id, label) -> id, properties
    node_by_id_and_label: str
    #: (id) -> properties
    node_properties: str
    #: (label, prefix length, prefix) -> id, properties, by id
    nodes_by_label_and_prefix: str
    #: (after id or None, limit) -> id, label, properties, document: the next page of every
    #: node by id (byte order), the first page for None; `document` is the stored row's own
    #: text where it holds more than label and properties (the original's `data`), else ''
    node_page: str
    #: (after key's 3 parts or None x3, limit) -> the key's 3 parts, then the edge's content
    #: columns: the next page of every edge by a unique key of 3 texts (byte order; this
    #: project's (source, target, relationship), the original's (source, target, id))
    edge_page: str
    #: () -> table name, every table of the state
    table_names: str
    #: (table name) -> a row when the table exists
    table_exists: str
    # --------------------------------------------------------------------- telemetry
    #: (id, timestamp, tenant, repo, origin, event, total, embedded, deleted, duration,
    #: error code, detail): insert unless the id exists.
    insert_metric: str
    #: (since, until, tenant or None, tenant or None) -> tenant, repo, KNOWN_METRICS figures
    rollup_by_repo: str
    #: (since, until, tenant or None, tenant or None) -> tenant, KNOWN_METRICS figures
    rollup_by_tenant: str
    #: (since) -> tenant, repo, KNOWN_METRICS figures: every event at or after `since`, no
    #: upper bound (the original's health view), by tenant then repo
    health_by_repo: str
    #: () -> tenant, the smallest non-empty repo of its events: the repo the original's
    #: reconciler names a tenant's telemetry by (the first row of its rollup, all-time,
    #: `ORDER BY tenant_id, repo_slug`)
    first_repo_by_tenant: str
    #: (event, event) -> tenant, repo, timestamp, total, deleted, detail: each tenant's latest
    last_reconcile: str
    # ------------------------------------------------------------------- drain state
    #: (segment, offset, dead letters size, now); a queue segment's row in
    #: `drain_generations` (the table and its `generation` column keep their names)
    commit_offset: str
    #: (segment, drainer): tag the segment with its drainer, forget its other ones
    forget_other_segments: str
    #: (segment) -> committed offset, dead letters size
    progress: str
    #: (line id)
    use_token: str
    #: (line id, attempts, now)
    issue_token: str
    #: (line ids as JSON array) -> line id, attempts, requeued at
    outstanding_tokens: str
    # ------------------------------------------------------------------ daemon state
    #: (key) -> value
    get_value: str
    #: (key, value, now)
    put_value: str
    #: (daemon, started, finished, duration, ok, figures)
    record_tick: str
    #: () -> daemon, started, finished, duration, ok, figures
    last_ticks: str
    #: (suffix length, suffix) -> key, value
    values_by_suffix: str
    #: (drainer, host, started, finished, duration, ok, figures, queue lines, draining,
    #: dead letters): replace the drainer's last tick
    record_drainer_tick: str
    #: () -> drainer, host, started, finished, duration, ok, figures, queue lines, draining,
    #: dead letters; by drainer
    drainer_ticks: str
    #: (drainer, finished at) -> drainer: remove its row if its last tick is still that one
    forget_drainer: str
    # ------------------------------------------------------------------------ alerts
    #: (fired at, tenant, repo, metric, value, threshold, severity, channel, subject,
    #: delivered, error)
    insert_fired: str
    #: (tenant, repo, metric, severity, channel, fired at)
    stamp_cooldown: str
    #: (since) -> tenant, repo, metric, severity, channel, fired at
    cooldowns: str
    #: (limit) -> fired at, tenant, repo, metric, value, threshold, severity, channel,
    #: subject, delivered, error; the latest first
    recent_alerts: str
    #: () -> channel
    fired_channels: str
    #: () -> channel
    cooling_channels: str
    #: (channel) -> id, error
    fired_by_channel: str
    #: (channel, error, id)
    redact_fired: str
    #: (new channel, old channel): move stamps to the new channel, the later one kept
    rekey_cooldowns: str
    #: (channel)
    drop_cooldowns: str
    # ------------------------------------------------------------------ restore holds
    #: (tenant, archive, restored at, config version, evidence, evidence at, chunk ids as
    #: JSON array): hold each chunk, replacing an earlier hold of it
    hold_chunks: str
    #: (tenant, chunk ids as JSON array) -> chunk, archive, restored at, config version,
    #: evidence, evidence at: the holds of these chunks of the tenant
    holds_of_chunks: str
    #: (tenant) -> the same columns: every hold of the tenant, by chunk
    tenant_holds: str
    #: (tenant, archive or None) -> chunk: release the tenant's holds (of that archive only)
    release_holds: str
    #: (tenant, JSON array of [chunk, restored at]): drop exactly these holds (lapsed ones;
    #: a chunk held again since, by a later restore, keeps its new hold)
    drop_holds: str
    #: () -> tenant, holds, archives, the latest restored at; by tenant
    hold_counts: str
    #: (tenant ids as JSON array) -> tenant: those of these tenants that hold any chunk
    held_tenants: str
    # -------------------------------------------------------- graph, set-based forms
    #: `insert_node_if_absent`, `insert_edge_if_absent` and `link_edge` as ONE statement over
    #: many rows, each parameter an array (a column), for a backend that pays per statement
    #: (PostgreSQL). The rows of one call have distinct keys (`core.base.rules.state.write_rounds`);
    #: empty: the backend runs the row statement once per row (SQLite, in-process).
    insert_nodes_columns: str = ""
    insert_edges_columns: str = ""
    link_edges_columns: str = ""
