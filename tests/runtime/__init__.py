"""Tests of the runtime (`core.base.runtime`, `core.suite`): scheduling, one-shot runs, supervision,
signals, systemd, metrics, logs and the daemons as processes.
"""
