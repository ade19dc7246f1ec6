"""The shared library of the drain and reconcile daemons: three wings over a base.

- `core.drain`: the drain daemon's REM tick (live ingestion, the lazy-edge queue, back-fill);
- `core.reconcile`: the reconcile daemon's pass (stale and orphaned chunks, the one deletion
  engine, retention, restore, explain);
- `core.alerting`: the alerting pass and the health view over the telemetry;
- `core.base`: what every wing shares (config, ids, nodes, errors, secrets, the state seam and
  its backends, the Chroma adapter and its door, files, the runtime a tick runs in);
- `core.suite`: what runs or shows the wings together (the scheduler, one tick's path, the
  metrics, leadership, status, the demo, the migration).

Each wing holds its pure `rules`, its `stores` and, at its top, its jobs. The import contracts
in `.importlinter` keep the wings apart and every layer importing only from below
(docs/layout.md is the map). `daemons/` holds the entry points: flags, wiring, exit codes.
"""
