"""Every SQLite table this project uses, written once.

`nodes`, `edges` and `kb_ingestion_metrics` are CONTRACT tables: columns may be added, never
renamed. The rest is the daemons' own state. All of it lives in the one file at `graphDbPath`,
so a back-up of that file is a back-up of everything but Chroma and the queue.
"""

from __future__ import annotations

GRAPH_DDL = """
CREATE TABLE IF NOT EXISTS nodes (
    id TEXT PRIMARY KEY,
    label TEXT NOT NULL,
    properties TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS edges (
    source TEXT NOT NULL REFERENCES nodes(id),
    target TEXT NOT NULL REFERENCES nodes(id),
    relationship TEXT NOT NULL,
    weight REAL NOT NULL,
    properties TEXT NOT NULL,
    PRIMARY KEY (source, target, relationship)
);
CREATE INDEX IF NOT EXISTS edges_target ON edges(target);
CREATE INDEX IF NOT EXISTS nodes_label ON nodes(label);
"""

TELEMETRY_DDL = """
CREATE TABLE IF NOT EXISTS kb_ingestion_metrics (
    id TEXT PRIMARY KEY,
    timestamp INTEGER NOT NULL,
    tenant_id TEXT NOT NULL,
    repo_slug TEXT NOT NULL,
    origin_agent TEXT,
    event_type TEXT NOT NULL,
    chunks_total INTEGER DEFAULT 0,
    chunks_embedded INTEGER DEFAULT 0,
    chunks_deleted INTEGER DEFAULT 0,
    duration_ms INTEGER,
    error_code TEXT,
    detail TEXT
);
CREATE INDEX IF NOT EXISTS kb_ingestion_metrics_window
    ON kb_ingestion_metrics(timestamp, tenant_id, repo_slug);
"""

# Identities of queue lines that have taken effect (applied to the graph or dead-lettered),
# written in the same transaction as their effect so a replay after a crash changes nothing.
APPLIED_LINES_DDL = """
CREATE TABLE IF NOT EXISTS applied_lines (
    line_id TEXT PRIMARY KEY,
    outcome TEXT NOT NULL,
    settled_at INTEGER NOT NULL
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS applied_lines_settled ON applied_lines(settled_at);
"""

# Per-daemon bookkeeping: the last completed tick (so a restart neither skips nor doubles a
# pass) and small values such as the live-ingestion watermark.
STATE_DDL = """
CREATE TABLE IF NOT EXISTS daemon_ticks (
    daemon TEXT PRIMARY KEY,
    started_at INTEGER NOT NULL,
    finished_at INTEGER NOT NULL,
    duration_ms INTEGER NOT NULL,
    ok INTEGER NOT NULL,
    figures TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS daemon_state (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL,
    updated_at INTEGER NOT NULL
);
"""

ALERTS_DDL = """
CREATE TABLE IF NOT EXISTS alert_cooldowns (
    tenant_id TEXT NOT NULL,
    repo_slug TEXT NOT NULL,
    metric TEXT NOT NULL,
    severity TEXT NOT NULL,
    channel TEXT NOT NULL,
    fired_at INTEGER NOT NULL,
    PRIMARY KEY (tenant_id, repo_slug, metric, severity, channel)
);
CREATE TABLE IF NOT EXISTS alerts_fired (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    fired_at INTEGER NOT NULL,
    tenant_id TEXT NOT NULL,
    repo_slug TEXT NOT NULL,
    metric TEXT NOT NULL,
    value REAL NOT NULL,
    threshold REAL NOT NULL,
    severity TEXT NOT NULL,
    channel TEXT NOT NULL,
    subject TEXT NOT NULL,
    delivered INTEGER NOT NULL,
    error TEXT
);
CREATE INDEX IF NOT EXISTS alerts_fired_at ON alerts_fired(fired_at);
"""

ALL_DDL: tuple[str, ...] = (GRAPH_DDL, TELEMETRY_DDL, APPLIED_LINES_DDL, STATE_DDL, ALERTS_DDL)
