"""The runtime: how a tick runs, written once.

One tick (`tick.run_tick`), run by a daemon's scheduler (`scheduler`) or once from the command
line (`oneshot`) with the same timeout and the same graceful stop; the process around the
daemons (`serve`: supervision, signals, systemd notify, metrics exposition) and logging and
settings load around it.
"""
