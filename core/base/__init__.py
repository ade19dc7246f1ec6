"""What every wing shares; nothing here imports a wing.

- `rules`: pure decisions every wing uses (ids, graph nodes, errors, secrets, telemetry rows);
- `config`: the `[knowledgeBase]` table's schema and its resolution, pure;
- `io`: small file helpers, locks and the clock;
- `state`: the store seam (`graph_db`) and its backends (`sqlite`, `postgres`, `neo`), the
  daemons' bookkeeping and the telemetry rows;
- `chroma`: the one Chroma adapter; `door`: the owner-only socket a command beside a daemon
  reaches the embedded store through;
- `runtime`: what a tick runs in (its context, fencing, logging, signals, settings, systemd);
- `reports`: tables and progress for people.
"""
