"""Files, locks and the clock: durable renames and bounded reads (`files`), advisory process
locks (`locks`), epoch milliseconds (`clock`), the data folders' start-up check
(`data_folders`) and the fencing deadline a delete must meet (`fence_deadline`)."""
