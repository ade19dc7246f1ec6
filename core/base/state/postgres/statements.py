"""Every SQL statement of the state, in PostgreSQL's dialect (see `core.base.state.statements`).

The parameters are SQLite's, in the same order (`$n` for `?`). Ordering by text uses
`COLLATE "C"`, the byte order SQLite uses, whatever the database's locale.
"""

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

# Unreadable stored JSON (kb_jsonb gives NULL) is replaced instead of merged, as in SQLite.
_UPSERT_NODE = """
INSERT INTO nodes(id, label, properties) VALUES ($1, $2, $3)
ON CONFLICT(id) DO UPDATE SET
    label = excluded.label,
    properties = kb_json_patch(kb_json_patch(COALESCE(kb_jsonb(nodes.properties), '{}'::jsonb),
                                             excluded.properties::jsonb), $4::jsonb)::text
"""
# As SQLite's: a zero stored weight counts as 1.0, the result is held within
# [MIN_WEIGHT, MAX_WEIGHT]. The set-based form (`unnest … ON CONFLICT`) refuses to affect a
# row twice, so `core.base.state.graph` sends it rounds of distinct keys, in order: repeated keys
# in a batch still apply in order.
_REINFORCE = f"""
ON CONFLICT(source, target, relationship) DO UPDATE SET
    weight = GREATEST(LEAST(COALESCE(NULLIF(edges.weight, 0), 1.0)
                            + excluded.weight * {REINFORCE_FACTOR}, {MAX_WEIGHT}), {MIN_WEIGHT!r}),
    properties = CASE WHEN kb_jsonb(edges.properties) IS NOT NULL
                      THEN kb_json_patch(kb_jsonb(edges.properties),
                                         excluded.properties::jsonb)::text
                      ELSE excluded.properties END
"""
_LINK_EDGE = f"""
INSERT INTO edges(source, target, relationship, weight, properties)
VALUES ($1, $2, $3, GREATEST(LEAST($4::float8, {WEIGHT_LIMIT!r}), {MIN_WEIGHT!r}), $5)
{_REINFORCE}"""
_LINK_EDGES_COLUMNS = f"""
INSERT INTO edges(source, target, relationship, weight, properties)
SELECT s, t, r, GREATEST(LEAST(w, {WEIGHT_LIMIT!r}), {MIN_WEIGHT!r}), p
FROM unnest($1::text[], $2::text[], $3::text[], $4::float8[], $5::text[]) AS u(s, t, r, w, p)
{_REINFORCE}"""


def _flag(key: str) -> str:
    return (f"SUM(CASE WHEN kb_jsonb(properties) -> '{key}' IN ('true'::jsonb, '1'::jsonb) "
            "THEN 1 ELSE 0 END)::bigint")


_PROVENANCE_COUNTS = (
    f"SELECT label, COUNT(*), {_flag('backfilled')}, {_flag('liveIngested')}, "
    f"{_flag('minimal')} FROM nodes WHERE label IN ('{MEMORY_LABEL}', '{SESSION_LABEL}') "
    "GROUP BY label"
)


def _count(event: str) -> str:
    return f"SUM(CASE WHEN event_type = '{event}' THEN 1 ELSE 0 END)::bigint"


_ROLLUP_COLUMNS = f"""
    COUNT(*),
    {_count(EVENT_INGEST)},
    {_count(EVENT_TOMBSTONE)},
    {_count(EVENT_RECONCILE)},
    {_count(EVENT_ERROR)},
    COALESCE(SUM(chunks_embedded), 0)::bigint,
    COALESCE(SUM(chunks_deleted), 0)::bigint,
    COALESCE(SUM(chunks_total), 0)::bigint,
    COALESCE(MAX(CASE WHEN event_type = '{EVENT_RECONCILE}'
                      THEN kb_bigint(kb_jsonb(detail) ->> 'missingPathCount') END), 0)
"""
_ROLLUP_WINDOW = "timestamp >= $1 AND timestamp < $2 AND ($3::text IS NULL OR tenant_id = $4)"


def _rollup(*group: str) -> str:
    columns = ", ".join(group)
    order = ", ".join(f'{c} COLLATE "C"' for c in group)
    return (f"SELECT {columns}, {_ROLLUP_COLUMNS} FROM kb_ingestion_metrics "
            f"WHERE {_ROLLUP_WINDOW} GROUP BY {columns} ORDER BY {order}")


_HOLD_COLUMNS = ("tenant_id, chunk_id, archive, restored_at, config_version, evidence, "
                 "evidence_at")
_HELD = "chunk_id, archive, restored_at, config_version, evidence, evidence_at"
_DRAINER_TICK_COLUMNS = ("drainer, host, started_at, finished_at, duration_ms, ok, figures, "
                         "queue_lines, draining, dead_letters")

_IN_JSON = "IN (SELECT jsonb_array_elements_text($1::jsonb))"
_TABLES = "SELECT tablename FROM pg_tables WHERE schemaname = current_schema()"

POSTGRES = Statements(
    insert_node_if_absent=("INSERT INTO nodes(id, label, properties) VALUES ($1, $2, $3) "
                           "ON CONFLICT DO NOTHING"),
    upsert_node=_UPSERT_NODE,
    insert_edge_if_absent=("INSERT INTO edges(source, target, relationship, weight, properties) "
                           "VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING"),
    link_edge=_LINK_EDGE,
    existing_ids=f"SELECT id FROM nodes WHERE id {_IN_JSON}",
    nodes_by_id=f"SELECT id, label, properties FROM nodes WHERE id {_IN_JSON}",
    provenance_counts=_PROVENANCE_COUNTS,
    count_nodes="SELECT COUNT(*) FROM nodes",
    count_edges="SELECT COUNT(*) FROM edges",
    node_by_id_and_label="SELECT id, properties FROM nodes WHERE id = $1 AND label = $2",
    node_properties="SELECT properties FROM nodes WHERE id = $1",
    nodes_by_label_and_prefix=('SELECT id, properties FROM nodes WHERE label = $1 AND '
                               'substr(id, 1, $2) = $3 ORDER BY id COLLATE "C"'),
    node_page=("SELECT id, label, properties, '' FROM nodes "
               'WHERE $1::text IS NULL OR id COLLATE "C" > $1 ORDER BY id COLLATE "C" LIMIT $2'),
    edge_page=("SELECT source, target, relationship, weight, properties FROM edges "
               'WHERE $1::text IS NULL OR (source COLLATE "C", target COLLATE "C", '
               'relationship COLLATE "C") > ($1::text, $2::text, $3::text) ORDER BY '
               'source COLLATE "C", target COLLATE "C", relationship COLLATE "C" LIMIT $4'),
    table_names=_TABLES,
    table_exists=_TABLES + " AND tablename = $1",
    insert_metric="""
INSERT INTO kb_ingestion_metrics(
    id, timestamp, tenant_id, repo_slug, origin_agent, event_type,
    chunks_total, chunks_embedded, chunks_deleted, duration_ms, error_code, detail
) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12) ON CONFLICT DO NOTHING
""",
    rollup_by_repo=_rollup("tenant_id", "repo_slug"),
    rollup_by_tenant=_rollup("tenant_id"),
    health_by_repo=(f"SELECT tenant_id, repo_slug, {_ROLLUP_COLUMNS} FROM kb_ingestion_metrics "
                    "WHERE timestamp >= $1 GROUP BY tenant_id, repo_slug "
                    'ORDER BY tenant_id COLLATE "C", repo_slug COLLATE "C"'),
    first_repo_by_tenant=('SELECT tenant_id, MIN(repo_slug COLLATE "C") '
                          "FROM kb_ingestion_metrics WHERE repo_slug <> '' GROUP BY tenant_id"),
    last_reconcile=(
        "SELECT DISTINCT ON (tenant_id COLLATE \"C\") tenant_id, repo_slug, timestamp, "
        "chunks_total, chunks_deleted, detail FROM kb_ingestion_metrics "
        "WHERE event_type = $1 AND event_type = $2 "
        "ORDER BY tenant_id COLLATE \"C\", timestamp DESC, seq DESC"),
    commit_offset="""
INSERT INTO drain_generations(generation, committed_offset, dead_letters_size, updated_at)
VALUES ($1, $2, $3, $4)
ON CONFLICT(generation) DO UPDATE SET committed_offset = excluded.committed_offset,
    dead_letters_size = excluded.dead_letters_size, updated_at = excluded.updated_at
""",
    # Tags the segment with its drainer, then forgets that drainer's other segments
    # (never another host's: `core.drain.stores.drainer_identity`).
    forget_other_segments=(
        "WITH tagged AS (UPDATE drain_generations SET drainer = $2 WHERE generation = $1) "
        "DELETE FROM drain_generations WHERE drainer = $2 AND generation != $1"),
    progress=("SELECT committed_offset, dead_letters_size FROM drain_generations "
              "WHERE generation = $1"),
    use_token="DELETE FROM drain_requeued WHERE line_id = $1",
    issue_token=("INSERT INTO drain_requeued(line_id, attempts, requeued_at) VALUES ($1, $2, $3) "
                 "ON CONFLICT(line_id) DO UPDATE SET attempts = excluded.attempts, "
                 "requeued_at = excluded.requeued_at"),
    outstanding_tokens=f"SELECT line_id, attempts, requeued_at FROM drain_requeued "
                       f"WHERE line_id {_IN_JSON}",
    get_value="SELECT value FROM daemon_state WHERE key = $1",
    put_value=("INSERT INTO daemon_state(key, value, updated_at) VALUES ($1, $2, $3) "
               "ON CONFLICT(key) DO UPDATE SET value = excluded.value, "
               "updated_at = excluded.updated_at"),
    record_tick=(
        "INSERT INTO daemon_ticks(daemon, started_at, finished_at, duration_ms, ok, figures) "
        "VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT(daemon) DO UPDATE SET "
        "started_at = excluded.started_at, finished_at = excluded.finished_at, "
        "duration_ms = excluded.duration_ms, ok = excluded.ok, figures = excluded.figures"),
    last_ticks="SELECT daemon, started_at, finished_at, duration_ms, ok, figures FROM daemon_ticks",
    values_by_suffix="SELECT key, value FROM daemon_state WHERE right(key, $1) = $2",
    record_drainer_tick=(
        f"INSERT INTO drainer_ticks({_DRAINER_TICK_COLUMNS}) "
        "VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) ON CONFLICT(drainer) DO UPDATE SET "
        "started_at = excluded.started_at, finished_at = excluded.finished_at, "
        "duration_ms = excluded.duration_ms, ok = excluded.ok, figures = excluded.figures, "
        "host = excluded.host, queue_lines = excluded.queue_lines, draining = excluded.draining, "
        "dead_letters = excluded.dead_letters"),
    drainer_ticks=(f"SELECT {_DRAINER_TICK_COLUMNS} FROM drainer_ticks "
                   "ORDER BY drainer COLLATE \"C\""),
    forget_drainer=("DELETE FROM drainer_ticks WHERE drainer = $1 AND finished_at = $2 "
                    "RETURNING drainer"),
    insert_fired="""
INSERT INTO alerts_fired(fired_at, tenant_id, repo_slug, metric, value, threshold, severity,
                         channel, subject, delivered, error)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)
""",
    stamp_cooldown="""
INSERT INTO alert_cooldowns(tenant_id, repo_slug, metric, severity, channel, fired_at)
VALUES ($1, $2, $3, $4, $5, $6)
ON CONFLICT(tenant_id, repo_slug, metric, severity, channel)
DO UPDATE SET fired_at = excluded.fired_at
""",
    cooldowns=("SELECT tenant_id, repo_slug, metric, severity, channel, fired_at "
               "FROM alert_cooldowns WHERE fired_at > $1"),
    recent_alerts=(
        "SELECT fired_at, tenant_id, repo_slug, metric, value, threshold, severity, channel, "
        "subject, delivered, error FROM alerts_fired ORDER BY fired_at DESC, id DESC LIMIT $1"),
    fired_channels="SELECT DISTINCT channel FROM alerts_fired",
    cooling_channels="SELECT DISTINCT channel FROM alert_cooldowns",
    fired_by_channel="SELECT id, error FROM alerts_fired WHERE channel = $1",
    redact_fired="UPDATE alerts_fired SET channel = $1, error = $2 WHERE id = $3",
    rekey_cooldowns=(
        "INSERT INTO alert_cooldowns(tenant_id, repo_slug, metric, severity, channel, fired_at) "
        "SELECT tenant_id, repo_slug, metric, severity, $1, fired_at "
        "FROM alert_cooldowns WHERE channel = $2 "
        "ON CONFLICT(tenant_id, repo_slug, metric, severity, channel) "
        "DO UPDATE SET fired_at = GREATEST(alert_cooldowns.fired_at, excluded.fired_at)"),
    drop_cooldowns="DELETE FROM alert_cooldowns WHERE channel = $1",
    hold_chunks=(f"INSERT INTO restore_holds({_HOLD_COLUMNS}) "
                 "SELECT $1, value, $2, $3, $4, $5, $6 FROM jsonb_array_elements_text($7::jsonb) "
                 "ON CONFLICT(tenant_id, chunk_id) DO UPDATE SET archive = excluded.archive, "
                 "restored_at = excluded.restored_at, "
                 "config_version = excluded.config_version, evidence = excluded.evidence, "
                 "evidence_at = excluded.evidence_at"),
    holds_of_chunks=(f"SELECT {_HELD} FROM restore_holds WHERE tenant_id = $1 "
                     "AND chunk_id IN (SELECT jsonb_array_elements_text($2::jsonb))"),
    tenant_holds=(f"SELECT {_HELD} FROM restore_holds WHERE tenant_id = $1 "
                  'ORDER BY chunk_id COLLATE "C"'),
    release_holds=("DELETE FROM restore_holds WHERE tenant_id = $1 "
                   "AND ($2::text IS NULL OR archive = $2) RETURNING chunk_id"),
    drop_holds=("DELETE FROM restore_holds WHERE tenant_id = $1 AND (chunk_id, restored_at) IN "
                "(SELECT e ->> 0, (e ->> 1)::bigint FROM jsonb_array_elements($2::jsonb) e)"),
    hold_counts=("SELECT tenant_id, COUNT(*), COUNT(DISTINCT archive), MAX(restored_at) "
                 'FROM restore_holds GROUP BY tenant_id ORDER BY tenant_id COLLATE "C"'),
    held_tenants=("SELECT DISTINCT tenant_id FROM restore_holds "
                  "WHERE tenant_id IN (SELECT jsonb_array_elements_text($1::jsonb))"),
    insert_nodes_columns=("INSERT INTO nodes(id, label, properties) "
                          "SELECT * FROM unnest($1::text[], $2::text[], $3::text[]) "
                          "ON CONFLICT DO NOTHING"),
    insert_edges_columns=("INSERT INTO edges(source, target, relationship, weight, properties) "
                          "SELECT * FROM unnest($1::text[], $2::text[], $3::text[], "
                          "$4::float8[], $5::text[]) ON CONFLICT DO NOTHING"),
    link_edges_columns=_LINK_EDGES_COLUMNS,
)
