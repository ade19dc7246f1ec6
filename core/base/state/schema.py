"""The state's tables by name, whatever the backend (each backend writes their DDL once:
`core.base.state.sqlite.schema`).

`nodes`, `edges` and `kb_ingestion_metrics` are CONTRACT tables: columns may be added, never
renamed. The rest is the daemons' own state. All of it lives in one place (the SQLite file at
`graphDbPath`), so a back-up of it is a back-up of everything but Chroma and the queue.
"""

from __future__ import annotations

#: Every table of the state, parents before the tables that refer to them.
STATE_TABLES: tuple[str, ...] = (
    "nodes", "edges", "kb_ingestion_metrics", "drain_generations", "drain_requeued",
    "daemon_ticks", "daemon_state", "drainer_ticks", "alert_cooldowns", "alerts_fired",
    "restore_holds",
)
