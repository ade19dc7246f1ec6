"""What a tick runs in, for every wing: its context (`context`: settings, stores, the stop
flag), fencing (`fencing`: a host that no longer leads deletes nothing), logging (`logs`),
process-wide settings (`process`, `settings`, `config_file`), signals, systemd notify,
waiting and backoff (`waiting`), and the daemon's side of the store door (`store_door`). The
tick itself, the scheduler and the metrics are `core.suite`'s."""
