"""Tests of `core.runtime`: scheduling, one-shot runs, supervision, signals, systemd, metrics, logs
and the daemons as processes.
"""
