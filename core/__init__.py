"""The shared library of the drain and reconcile daemons.

Pure decisions (config resolution, queue-line parsing, the stale-chunk diff, alert rules) sit in
modules without I/O; the adapters (`graph`, `vectors`, `lazy_queue`, `telemetry`) wrap SQLite,
Chroma and files around them. `daemons/` only wires these together.
"""
