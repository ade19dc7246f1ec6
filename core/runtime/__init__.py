"""The runtime: how a tick runs, written once.

One tick (`tick.run_tick`), run by the scheduler under supervision (`scheduler`) or once from
the command line (`oneshot`) with the same timeout and the same graceful stop; systemd notify,
metrics exposition, logging and settings load around it.
"""
