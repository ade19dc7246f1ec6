"""The shared library of the drain and reconcile daemons, in layers (an import contract in
`.importlinter` keeps each to importing only from its own layer or below):

- `core.rules`: pure decisions and file formats; no I/O, no clock;
- `core.stores`: every SQL statement, Chroma call and on-disk format's I/O;
- `core.jobs`: tick bodies, read (stores) -> decide (rules) -> write (stores);
- `core.reports`: read-only views (status, progress);
- `core.runtime`: how a tick runs (scheduled or once), systemd, metrics, logging, settings.

`daemons/` holds the entry points: flags, wiring, exit codes.
"""
