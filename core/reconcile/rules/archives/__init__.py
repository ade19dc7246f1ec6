"""The tombstone archives' pure rules: the file format and its checksums (`format`), and what
an archive still holds for a restore (`listing`)."""
