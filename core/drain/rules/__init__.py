"""The drain's pure rules: queue lines (`queue_lines`), each line's fate in a batch
(`drain_plan`), dead-letter records (`dead_letters`), live ingestion's window (`ingest`) and
the back-fill's plan (`backfill_plan`)."""
