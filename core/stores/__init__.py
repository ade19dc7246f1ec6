"""Stores: every SQL statement, every Chroma call and every on-disk format's I/O.

One module per table group (`graph`, `drain_state`, `daemon_state`, `demo_state`,
`telemetry`, `alert_records`, `tenants`, `tenant_manifests`, `claimed_paths`) over one
connection (`sqlite`, its DDL in `schema`), the only door to Chroma (`chroma`; `chroma_door`
serves the embedded store to tools beside the daemons, through the owner-only Unix socket of
`door_socket`), alert delivery (`alert_delivery`), and
the files (`queue_files`, `queue_reader`, `dead_letter_file`, `archives`, `files`, `locks`,
`telemetry_spool`, `config_file`); `clock` is the one source of the current time. Stores
decide nothing: the rules they need (a line's format, an archive's checksum) come from
`core.rules`.
"""
