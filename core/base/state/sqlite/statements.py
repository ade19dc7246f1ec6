"""Every SQL statement of the state, in SQLite's dialect (see `core.base.state.statements`)."""

from __future__ import annotations

from core.base.rules.nodes import (
    MAX_WEIGHT,
    MEMORY_LABEL,
    MIN_WEIGHT,
    REINFORCE_FACTOR,
    SESSION_LABEL,
    WEIGHT_LIMIT,
)
from core.base.rules.telemetry import EVENT_ERROR, EVENT_INGEST, EVENT_RECONCILE, EVENT_TOMBSTONE
from core.base.state.statements import Statements

# A stored `properties` that is not valid JSON (written by an earlier version: `Infinity`) would
# make json_patch fail on every later write to the row; it is replaced instead of merged.
_UPSERT_NODE = """
INSERT INTO nodes(id, label, properties) VALUES (?, ?, ?)
ON CONFLICT(id) DO UPDATE SET
    label = excluded.label,
    properties = json_patch(json_patch(CASE WHEN json_valid(nodes.properties)
                                            THEN nodes.properties ELSE '{}' END,
                                       excluded.properties), ?)
"""
# A zero (or NULL) stored weight counts as 1.0 before reinforcing. The new weight is held
# within ±WEIGHT_LIMIT and the reinforced sum within [MIN_WEIGHT, MAX_WEIGHT]: never ±Inf
# (an -Inf left by an earlier version becomes MIN_WEIGHT on its next link).
_LINK_EDGE = f"""
INSERT INTO edges(source, target, relationship, weight, properties)
VALUES (?, ?, ?, MAX(MIN(?, {WEIGHT_LIMIT!r}), {MIN_WEIGHT!r}), ?)
ON CONFLICT(source, target, relationship) DO UPDATE SET
    weight = MAX(MIN(COALESCE(NULLIF(edges.weight, 0), 1.0)
                     + excluded.weight * {REINFORCE_FACTOR}, {MAX_WEIGHT}), {MIN_WEIGHT!r}),
    properties = CASE WHEN json_valid(edges.properties)
                      THEN json_patch(edges.properties, excluded.properties)
                      ELSE excluded.properties END
"""
_PROVENANCE_COUNTS = f"""
SELECT label,
       COUNT(*),
       SUM(CASE WHEN json_valid(properties) THEN json_extract(properties, '$.backfilled') = 1 END),
       SUM(CASE WHEN json_valid(properties) THEN json_extract(properties, '$.liveIngested') = 1
           END),
       SUM(CASE WHEN json_valid(properties) THEN json_extract(properties, '$.minimal') = 1 END)
FROM nodes WHERE label IN ('{MEMORY_LABEL}', '{SESSION_LABEL}') GROUP BY label
"""
# The figures in KNOWN_METRICS order except errorRate, which is computed from two of them.
_ROLLUP_COLUMNS = f"""
    COUNT(*),
    SUM(event_type = '{EVENT_INGEST}'),
    SUM(event_type = '{EVENT_TOMBSTONE}'),
    SUM(event_type = '{EVENT_RECONCILE}'),
    SUM(event_type = '{EVENT_ERROR}'),
    COALESCE(SUM(chunks_embedded), 0),
    COALESCE(SUM(chunks_deleted), 0),
    COALESCE(SUM(chunks_total), 0),
    COALESCE(MAX(CASE WHEN event_type = '{EVENT_RECONCILE}' AND json_valid(detail)
                      THEN CAST(json_extract(detail, '$.missingPathCount') AS INTEGER) END), 0)
"""
_ROLLUP_WINDOW = "timestamp >= ? AND timestamp < ? AND (? IS NULL OR tenant_id = ?)"


_HOLD_COLUMNS = ("tenant_id, chunk_id, archive, restored_at, config_version, evidence, "
                 "evidence_at")
_HELD = "chunk_id, archive, restored_at, config_version, evidence, evidence_at"
_DRAINER_TICK_COLUMNS = ("drainer, host, started_at, finished_at, duration_ms, ok, figures, "
                         "queue_lines, draining, dead_letters")


def _rollup(group: str) -> str:
    return (f"SELECT {group}, {_ROLLUP_COLUMNS} FROM kb_ingestion_metrics "
            f"WHERE {_ROLLUP_WINDOW} GROUP BY {group} ORDER BY {group}")


SQLITE = Statements(
    insert_node_if_absent="INSERT OR IGNORE INTO nodes(id, label, properties) VALUES (?, ?, ?)",
    upsert_node=_UPSERT_NODE,
    insert_edge_if_absent=("INSERT OR IGNORE INTO edges(source, target, relationship, weight, "
                           "properties) VALUES (?, ?, ?, ?, ?)"),
    link_edge=_LINK_EDGE,
    existing_ids="SELECT id FROM nodes WHERE id IN (SELECT value FROM json_each(?))",
    nodes_by_id=("SELECT id, label, properties FROM nodes "
                 "WHERE id IN (SELECT value FROM json_each(?))"),
    provenance_counts=_PROVENANCE_COUNTS,
    count_nodes="SELECT COUNT(*) FROM nodes",
    count_edges="SELECT COUNT(*) FROM edges",
    node_by_id_and_label="SELECT id, properties FROM nodes WHERE id = ? AND label = ?",
    node_properties="SELECT properties FROM nodes WHERE id = ?",
    # substr, not LIKE: LIKE is case-insensitive and would also list `KB-CONFIG:` nodes.
    nodes_by_label_and_prefix=("SELECT id, properties FROM nodes "
                               "WHERE label = ? AND substr(id, 1, ?) = ? ORDER BY id"),
    node_page=("SELECT id, label, properties, '' FROM nodes "
               "WHERE ?1 IS NULL OR id > ?1 ORDER BY id LIMIT ?2"),
    edge_page=("SELECT source, target, relationship, weight, properties FROM edges "
               "WHERE ?1 IS NULL OR (source, target, relationship) > (?1, ?2, ?3) "
               "ORDER BY source, target, relationship LIMIT ?4"),
    table_names="SELECT name FROM sqlite_master WHERE type = 'table'",
    table_exists="SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?",
    insert_metric="""
INSERT OR IGNORE INTO kb_ingestion_metrics(
    id, timestamp, tenant_id, repo_slug, origin_agent, event_type,
    chunks_total, chunks_embedded, chunks_deleted, duration_ms, error_code, detail
) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
""",
    rollup_by_repo=_rollup("tenant_id, repo_slug"),
    rollup_by_tenant=_rollup("tenant_id"),
    health_by_repo=(f"SELECT tenant_id, repo_slug, {_ROLLUP_COLUMNS} FROM kb_ingestion_metrics "
                    "WHERE timestamp >= ? GROUP BY tenant_id, repo_slug "
                    "ORDER BY tenant_id, repo_slug"),
    first_repo_by_tenant=("SELECT tenant_id, MIN(repo_slug) FROM kb_ingestion_metrics "
                          "WHERE repo_slug <> '' GROUP BY tenant_id"),
    last_reconcile=(
        "SELECT tenant_id, repo_slug, timestamp, chunks_total, chunks_deleted, detail "
        "FROM kb_ingestion_metrics AS m WHERE event_type = ? AND id = ("
        "  SELECT id FROM kb_ingestion_metrics WHERE event_type = ? AND tenant_id = m.tenant_id"
        "  ORDER BY timestamp DESC, rowid DESC LIMIT 1"
        ") ORDER BY tenant_id"),
    commit_offset="""
INSERT INTO drain_generations(generation, committed_offset, dead_letters_size, updated_at)
VALUES (?, ?, ?, ?)
ON CONFLICT(generation) DO UPDATE SET committed_offset = excluded.committed_offset,
    dead_letters_size = excluded.dead_letters_size, updated_at = excluded.updated_at
""",
    # A SQLite file has one drainer (its queue's lock): every other segment is its own,
    # and the drainer (?2) is not stored.
    forget_other_segments=("DELETE FROM drain_generations WHERE generation != ?1 "
                           "AND ?2 IS NOT NULL"),
    progress=("SELECT committed_offset, dead_letters_size FROM drain_generations "
              "WHERE generation = ?"),
    use_token="DELETE FROM drain_requeued WHERE line_id = ?",
    issue_token=("INSERT OR REPLACE INTO drain_requeued(line_id, attempts, requeued_at) "
                 "VALUES (?, ?, ?)"),
    outstanding_tokens=("SELECT line_id, attempts, requeued_at FROM drain_requeued "
                        "WHERE line_id IN (SELECT value FROM json_each(?))"),
    get_value="SELECT value FROM daemon_state WHERE key = ?",
    put_value=("INSERT INTO daemon_state(key, value, updated_at) VALUES (?, ?, ?) "
               "ON CONFLICT(key) DO UPDATE SET value = excluded.value, "
               "updated_at = excluded.updated_at"),
    record_tick=(
        "INSERT INTO daemon_ticks(daemon, started_at, finished_at, duration_ms, ok, figures) "
        "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT(daemon) DO UPDATE SET "
        "started_at = excluded.started_at, finished_at = excluded.finished_at, "
        "duration_ms = excluded.duration_ms, ok = excluded.ok, figures = excluded.figures"),
    last_ticks="SELECT daemon, started_at, finished_at, duration_ms, ok, figures FROM daemon_ticks",
    values_by_suffix="SELECT key, value FROM daemon_state WHERE substr(key, -?) = ?",
    record_drainer_tick=(
        f"INSERT INTO drainer_ticks({_DRAINER_TICK_COLUMNS}) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT(drainer) DO UPDATE SET "
        "started_at = excluded.started_at, finished_at = excluded.finished_at, "
        "duration_ms = excluded.duration_ms, ok = excluded.ok, figures = excluded.figures, "
        "host = excluded.host, queue_lines = excluded.queue_lines, draining = excluded.draining, "
        "dead_letters = excluded.dead_letters"),
    drainer_ticks=(f"SELECT {_DRAINER_TICK_COLUMNS} FROM drainer_ticks "
                   "ORDER BY drainer"),
    forget_drainer=("DELETE FROM drainer_ticks WHERE drainer = ? AND finished_at = ? "
                    "RETURNING drainer"),
    insert_fired="""
INSERT INTO alerts_fired(fired_at, tenant_id, repo_slug, metric, value, threshold, severity,
                         channel, subject, delivered, error)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
""",
    stamp_cooldown="""
INSERT INTO alert_cooldowns(tenant_id, repo_slug, metric, severity, channel, fired_at)
VALUES (?, ?, ?, ?, ?, ?)
ON CONFLICT(tenant_id, repo_slug, metric, severity, channel)
DO UPDATE SET fired_at = excluded.fired_at
""",
    cooldowns=("SELECT tenant_id, repo_slug, metric, severity, channel, fired_at "
               "FROM alert_cooldowns WHERE fired_at > ?"),
    recent_alerts=(
        "SELECT fired_at, tenant_id, repo_slug, metric, value, threshold, severity, channel, "
        "subject, delivered, error FROM alerts_fired ORDER BY fired_at DESC, id DESC LIMIT ?"),
    fired_channels="SELECT DISTINCT channel FROM alerts_fired",
    cooling_channels="SELECT DISTINCT channel FROM alert_cooldowns",
    fired_by_channel="SELECT id, error FROM alerts_fired WHERE channel = ?",
    redact_fired="UPDATE alerts_fired SET channel = ?, error = ? WHERE id = ?",
    rekey_cooldowns=(
        "INSERT INTO alert_cooldowns(tenant_id, repo_slug, metric, severity, channel, fired_at) "
        "SELECT tenant_id, repo_slug, metric, severity, ?, fired_at "
        "FROM alert_cooldowns WHERE channel = ? "
        "ON CONFLICT(tenant_id, repo_slug, metric, severity, channel) "
        "DO UPDATE SET fired_at = MAX(fired_at, excluded.fired_at)"),
    drop_cooldowns="DELETE FROM alert_cooldowns WHERE channel = ?",
    # `WHERE true`: an upsert's SELECT needs one (SQLite's parser, "Parsing Ambiguity").
    hold_chunks=(f"INSERT INTO restore_holds({_HOLD_COLUMNS}) "
                 "SELECT ?1, value, ?2, ?3, ?4, ?5, ?6 FROM json_each(?7) WHERE true "
                 "ON CONFLICT(tenant_id, chunk_id) DO UPDATE SET archive = excluded.archive, "
                 "restored_at = excluded.restored_at, "
                 "config_version = excluded.config_version, evidence = excluded.evidence, "
                 "evidence_at = excluded.evidence_at"),
    holds_of_chunks=(f"SELECT {_HELD} FROM restore_holds WHERE tenant_id = ? "
                     "AND chunk_id IN (SELECT value FROM json_each(?))"),
    tenant_holds=f"SELECT {_HELD} FROM restore_holds WHERE tenant_id = ? ORDER BY chunk_id",
    release_holds=("DELETE FROM restore_holds WHERE tenant_id = ?1 "
                   "AND (?2 IS NULL OR archive = ?2) RETURNING chunk_id"),
    drop_holds=("DELETE FROM restore_holds WHERE tenant_id = ? AND (chunk_id, restored_at) IN "
                "(SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]') "
                "FROM json_each(?))"),
    hold_counts=("SELECT tenant_id, COUNT(*), COUNT(DISTINCT archive), MAX(restored_at) "
                 "FROM restore_holds GROUP BY tenant_id ORDER BY tenant_id"),
    held_tenants=("SELECT DISTINCT tenant_id FROM restore_holds "
                  "WHERE tenant_id IN (SELECT value FROM json_each(?))"),
)
