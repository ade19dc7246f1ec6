"""Stores: every SQL statement, every Chroma call and every on-disk format's I/O.

One module per table group (`graph`, `drain_state`, `daemon_state`, `telemetry`, `alerts`,
`tenants`) over one connection (`sqlite`), the only door to Chroma (`chroma`), and the files
(`queue_files`, `dead_letter_file`, `archives`, `telemetry_spool`, `config_file`). Stores
decide nothing: the rules they need (a line's format, an archive's checksum) come from
`core.rules`.
"""
