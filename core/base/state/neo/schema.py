"""The original's graph DDL, era by era, as its boot creates it, and the daemons' own tables in a
neo.mjs graph file.

**The original's DDL** is quoted from its `ai/graph/storage/SQLite.mjs` (`initSchema`), one
block per era (`core.base.rules.graph_schema.NeoEra`); the daemons never run it on a file (they
create nothing of the original's except `kb_ingestion_metrics` when it is missing): it is here
so that tests and the demo build a graph exactly as the platform's boot would.

**The daemons' own state** on such a file (drain offsets, re-queue tokens, ticks, values,
alerts) lives in tables of their own in the same file, so that it commits in the same
transaction as the graph writes it guards (an ATTACHed second file would not commit atomically
in WAL mode). Their names carry `OWN_PREFIX`, which nothing the original creates starts with
(its tables: `Nodes`, `Edges`, `GraphLog`, `SummarizationJobs`, `SchemaVersion`, `kb_*`,
`nl_*`, `provider_activity_log`, ...), in any case; the original never reads them, and no boot
of any of its versions drops or alters them (its reset drops its own tables by name).
"""

from __future__ import annotations

import re

from core.base.rules.graph_schema import NeoEra
from core.base.state.sqlite.schema import (
    ALERTS_DDL,
    DRAIN_DDL,
    DRAINER_TICKS_DDL,
    HOLDS_DDL,
    STATE_DDL,
)

# ---------------------------------------------------------------- the original's graph, quoted

#: 2026-04-04, neomjs/neo `ai/graph/storage/SQLite.mjs` at 152d111d600d7428d210a8d92edaa49f0e7fad2c
#: (#9678): `Nodes` and `Edges` only. Its boot probes `SELECT data FROM Nodes LIMIT 1` and drops
#: both tables when that fails.
NEO_V0_DDL = """
CREATE TABLE IF NOT EXISTS Nodes (
    id TEXT PRIMARY KEY,
    data TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS Edges (
    id TEXT PRIMARY KEY,
    source TEXT NOT NULL,
    target TEXT NOT NULL,
    type TEXT NOT NULL,
    data TEXT NOT NULL,
    FOREIGN KEY (source) REFERENCES Nodes(id) ON DELETE CASCADE,
    FOREIGN KEY (target) REFERENCES Nodes(id) ON DELETE CASCADE
);
"""

_TRIGGERS = """
CREATE TRIGGER IF NOT EXISTS node_insert AFTER INSERT ON Nodes BEGIN INSERT INTO GraphLog(entity_id, entity_type) VALUES (NEW.id, 'nodes'); END;
CREATE TRIGGER IF NOT EXISTS node_update AFTER UPDATE ON Nodes BEGIN INSERT INTO GraphLog(entity_id, entity_type) VALUES (NEW.id, 'nodes'); END;
CREATE TRIGGER IF NOT EXISTS node_delete AFTER DELETE ON Nodes BEGIN INSERT INTO GraphLog(entity_id, entity_type) VALUES (OLD.id, 'nodes'); END;
CREATE TRIGGER IF NOT EXISTS edge_insert AFTER INSERT ON Edges BEGIN INSERT INTO GraphLog(entity_id, entity_type) VALUES (NEW.id, 'edges'); END;
CREATE TRIGGER IF NOT EXISTS edge_update AFTER UPDATE ON Edges BEGIN INSERT INTO GraphLog(entity_id, entity_type) VALUES (NEW.id, 'edges'); END;
CREATE TRIGGER IF NOT EXISTS edge_delete AFTER DELETE ON Edges BEGIN INSERT INTO GraphLog(entity_id, entity_type) VALUES (OLD.id, 'edges'); END;
"""  # noqa: E501 (quoted as the original writes them, one trigger per line)

#: E1, neomjs/neo `ai/graph/storage/SQLite.mjs` at 4d2c2abce9db6ff9827dfefbf5085d1ba73a2da5
#: (snapshot of 2026-04-12; the file last changed in 8a4221a8e, 2026-04-05): V0 plus `GraphLog`
#: and its six triggers. Its boot probes `SELECT log_id FROM GraphLog LIMIT 1` and drops
#: `Edges` and `Nodes` when that fails.
NEO_E1_DDL = NEO_V0_DDL + """
CREATE TABLE IF NOT EXISTS GraphLog (
    log_id INTEGER PRIMARY KEY AUTOINCREMENT,
    entity_id TEXT NOT NULL,
    entity_type TEXT NOT NULL
);
""" + _TRIGGERS

_E2_GRAPH = """
CREATE TABLE IF NOT EXISTS Nodes (
    id TEXT PRIMARY KEY,
    user_id TEXT,
    data TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS Edges (
    id TEXT PRIMARY KEY,
    user_id TEXT,
    source TEXT NOT NULL,
    target TEXT NOT NULL,
    type TEXT NOT NULL,
    data TEXT NOT NULL,
    FOREIGN KEY (source) REFERENCES Nodes(id) ON DELETE CASCADE,
    FOREIGN KEY (target) REFERENCES Nodes(id) ON DELETE CASCADE
);
CREATE INDEX IF NOT EXISTS idx_edges_source ON Edges(source);
CREATE INDEX IF NOT EXISTS idx_edges_target ON Edges(target);
"""

#: The statement every E2/E3 boot ends with (`stampSchemaVersion`).
SCHEMA_VERSION_DDL = """
CREATE TABLE IF NOT EXISTS SchemaVersion (
    id TEXT PRIMARY KEY,
    version INTEGER NOT NULL,
    updated_at TEXT NOT NULL DEFAULT CURRENT_TIMESTAMP
);
INSERT INTO SchemaVersion (id, version, updated_at)
VALUES ('graph', 1, CURRENT_TIMESTAMP)
ON CONFLICT(id) DO UPDATE SET
    version = excluded.version,
    updated_at = excluded.updated_at;
"""

#: E2, neomjs/neo `ai/graph/storage/SQLite.mjs` after PR #12618 (2026-06-06; stored-index
#: file-id 60944803684, commit not recorded): `user_id` on both tables, two indexes,
#: `SummarizationJobs`, and `SchemaVersion('graph', 1)` stamped at every boot.
NEO_E2_DDL = _E2_GRAPH + """
CREATE TABLE IF NOT EXISTS GraphLog (
    log_id INTEGER PRIMARY KEY AUTOINCREMENT,
    entity_id TEXT NOT NULL,
    entity_type TEXT NOT NULL
);
""" + _TRIGGERS + """
CREATE TABLE IF NOT EXISTS SummarizationJobs (
    session_id TEXT PRIMARY KEY,
    status TEXT NOT NULL CHECK(status IN ('pending', 'in_progress', 'completed', 'failed')),
    lease_token TEXT,
    expires_at INTEGER,
    retry_count INTEGER DEFAULT 0
);
""" + SCHEMA_VERSION_DDL

#: E3, neomjs/neo-agent-brain `ai/graph/storage/SQLite.mjs` at
#: 8169d89cf95d915c8d232a86e62a09a04286b1ef: E2 plus `GraphLog.event_id` / `event_payload`
#: with a partial unique index, and five `result_*` columns on `SummarizationJobs`.
NEO_E3_DDL = _E2_GRAPH + """
CREATE TABLE IF NOT EXISTS GraphLog (
    log_id INTEGER PRIMARY KEY AUTOINCREMENT,
    entity_id TEXT NOT NULL,
    entity_type TEXT NOT NULL,
    event_id TEXT,
    event_payload TEXT
);
CREATE UNIQUE INDEX IF NOT EXISTS idx_graph_log_event_id
ON GraphLog(event_id)
WHERE event_id IS NOT NULL;
""" + _TRIGGERS + """
CREATE TABLE IF NOT EXISTS SummarizationJobs (
    session_id TEXT PRIMARY KEY,
    status TEXT NOT NULL CHECK(status IN ('pending', 'in_progress', 'completed', 'failed')),
    lease_token TEXT,
    expires_at INTEGER,
    retry_count INTEGER DEFAULT 0,
    result_envelope BLOB,
    result_encoding TEXT,
    result_staged_at INTEGER,
    result_acknowledged_at INTEGER,
    result_last_replayed_at INTEGER
);
""" + SCHEMA_VERSION_DDL

#: Each era's fresh-file DDL.
NEO_GRAPH_DDL: dict[NeoEra, str] = {NeoEra.V0: NEO_V0_DDL, NeoEra.E1: NEO_E1_DDL,
                                    NeoEra.E2: NEO_E2_DDL, NeoEra.E3: NEO_E3_DDL}

#: The original's telemetry table, neomjs/neo `ai/services/knowledge-base/KBRecorderService.mjs`
#: at 0045c828f038d3eb427268cceb6116a9b410aa56 (unchanged in neo-agent-brain 1a02dfb8): the
#: columns this project's `kb_ingestion_metrics` has (CONTRACT), with the original's indexes.
#: Created only when the file has no such table, so that the original's later
#: `CREATE ... IF NOT EXISTS` finds everything as it would have made it; an existing one is
#: the original's and is never altered (no index of this project's is added to it).
NEO_TELEMETRY_DDL = """
CREATE TABLE IF NOT EXISTS kb_ingestion_metrics (id TEXT PRIMARY KEY, timestamp INTEGER NOT NULL, tenant_id TEXT NOT NULL, repo_slug TEXT NOT NULL,
  origin_agent TEXT, event_type TEXT NOT NULL, chunks_total INTEGER DEFAULT 0, chunks_embedded INTEGER DEFAULT 0, chunks_deleted INTEGER DEFAULT 0,
  duration_ms INTEGER, error_code TEXT, detail TEXT);
CREATE INDEX IF NOT EXISTS idx_kb_ingestion_metrics_tenant    ON kb_ingestion_metrics(tenant_id);
CREATE INDEX IF NOT EXISTS idx_kb_ingestion_metrics_timestamp ON kb_ingestion_metrics(timestamp);
CREATE INDEX IF NOT EXISTS idx_kb_ingestion_metrics_event     ON kb_ingestion_metrics(event_type);
"""  # noqa: E501 (quoted as the original writes it)

# ------------------------------------------------------------------- the daemons' own tables

#: What every table (and index) of the daemons' own on a neo.mjs graph file starts with.
OWN_PREFIX = "kb_daemons_"
#: The daemons' own tables and indexes, by the name they have in this project's schema.
OWN_NAMES: tuple[str, ...] = (
    "drain_generations", "drain_requeued", "daemon_ticks", "daemon_state", "drainer_ticks",
    "alert_cooldowns", "alerts_fired", "alerts_fired_at", "restore_holds")
_OWN_NAME = re.compile(r"\b(" + "|".join(OWN_NAMES) + r")\b")


def own_names(sql: str) -> str:
    """`sql` (this project's statement or DDL) with every own table and index renamed to its
    name on a neo.mjs graph file (`OWN_PREFIX`); the graph's and telemetry's names stay."""
    return _OWN_NAME.sub(lambda found: OWN_PREFIX + found.group(1), sql)


#: The daemons' own tables on a neo.mjs graph file: this project's DDL, renamed (every
#: statement a `CREATE ... IF NOT EXISTS`: running it on a file that has them changes nothing).
OWN_DDL: tuple[str, ...] = tuple(own_names(ddl) for ddl in (DRAIN_DDL, STATE_DDL,
                                                            DRAINER_TICKS_DDL, ALERTS_DDL,
                                                            HOLDS_DDL))
_CREATES = re.compile(r"CREATE\s+(?:TABLE|INDEX)\s+IF\s+NOT\s+EXISTS\s+(\w+)"
                      r"(?:\s+ON\s+(\w+))?")


def own_statements() -> list[tuple[str, str]]:
    """Each statement of `OWN_DDL` with the table it creates or indexes, in order."""
    statements: list[tuple[str, str]] = []
    for ddl in OWN_DDL:
        for text in ddl.split(";"):
            found = _CREATES.search(text)
            if found is not None:
                statements.append((found.group(2) or found.group(1), text.strip() + ";"))
    return statements
