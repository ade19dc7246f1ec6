"""The DDL of every table (`core.base.state.schema.STATE_TABLES`) in SQLite, written once."""

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

# The drainer's progress and its re-queue tokens (see core.drain). Identity is by position: a
# line is (segment, byte offset; a segment's id is stored as `generation`), so exactly-once
# needs only one row per file in flight, written in the same transaction as the batch's nodes
# and edges, plus one row per line waiting in the queue for another try. Nothing is kept per
# applied line.
DRAIN_DDL = """
CREATE TABLE IF NOT EXISTS drain_generations (
    generation TEXT PRIMARY KEY,
    -- Every line before this byte offset of the generation has taken effect.
    committed_offset INTEGER NOT NULL,
    -- The dead-letter file's size right after this generation's last committed batch: a
    -- record after it was written by a batch that never committed.
    dead_letters_size INTEGER NOT NULL,
    updated_at INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS drain_requeued (
    -- A re-queued line's identity and attempt count: the token it carries in `_drain`. The
    -- drainer accepts a copy of the line only while its token is here, and consumes the token
    -- in the transaction that settles the line.
    line_id TEXT PRIMARY KEY,
    attempts INTEGER NOT NULL,
    requeued_at INTEGER NOT NULL
) WITHOUT ROWID;
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

# Each drainer's last completed tick (`core.base.state.daemon_state.DrainerTick`), beside the one
# `drain` row of daemon_ticks that the scheduler reads: several drainers (one per host) may
# share a PostgreSQL state, and a person needs every one of them, with the queue figures it
# saw at the end of its tick (no host can read another host's queue file). A new table, not a
# new key for daemon_ticks: a file of an earlier version gains it at its next writable open
# (CREATE TABLE IF NOT EXISTS) and keeps its daemon_ticks rows as they were.
DRAINER_TICKS_DDL = """
CREATE TABLE IF NOT EXISTS drainer_ticks (
    -- The drainer's id (`core.drain.stores.drainer_identity`); '' for a SQLite file's one drainer.
    drainer TEXT PRIMARY KEY,
    host TEXT NOT NULL,
    started_at INTEGER NOT NULL,
    finished_at INTEGER NOT NULL,
    duration_ms INTEGER NOT NULL,
    ok INTEGER NOT NULL,
    figures TEXT NOT NULL,
    -- Its queue when the tick ended: lines waiting, a `.draining` file left (0/1), dead letters.
    queue_lines INTEGER NOT NULL,
    draining INTEGER NOT NULL,
    dead_letters INTEGER NOT NULL
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

# The chunks a restore put back (`core.reconcile.stores.restore_holds`): no pass or retention
# run deletes one while its hold is in force. One row per (tenant, chunk), written BEFORE the
# chunks (so a pass that reads a restored chunk finds its hold), with the evidence that stood
# when it was restored: the tenant's config version and a fingerprint of its manifests and
# yield snapshots (`core.reconcile.rules.restore_holds`). A new table: a file of an earlier
# version gains it at its next writable open, and a read-only open of one reads no hold.
HOLDS_DDL = """
CREATE TABLE IF NOT EXISTS restore_holds (
    tenant_id TEXT NOT NULL,
    chunk_id TEXT NOT NULL,
    -- The file name of the archive the chunk came back from.
    archive TEXT NOT NULL,
    restored_at INTEGER NOT NULL,
    -- The evidence at restore time: the config version, the manifests' fingerprint and the
    -- newest `updatedAt` among them (epoch ms, 0 when the tenant has none).
    config_version INTEGER NOT NULL,
    evidence TEXT NOT NULL,
    evidence_at INTEGER NOT NULL,
    PRIMARY KEY (tenant_id, chunk_id)
);
"""

ALL_DDL: tuple[str, ...] = (GRAPH_DDL, TELEMETRY_DDL, DRAIN_DDL, STATE_DDL, DRAINER_TICKS_DDL,
                            ALERTS_DDL, HOLDS_DDL)
