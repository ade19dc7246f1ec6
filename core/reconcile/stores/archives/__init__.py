"""The tombstone archives' stores: one archive file, written durably and read back (`files`),
the folder as a whole (`folder`), and the copies in the shared state (`shared`)."""
