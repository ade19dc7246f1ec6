"""The drain's stores: the queue files and their producers' protocol (`queue_files`,
`queue_reader`), the dead letters (`dead_letter_file`), the drainer's offsets and tokens
(`drain_state`), its identity and its recorded queue (`drainer_identity`, `drainer_queue`)."""
