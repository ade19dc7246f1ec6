"""Exceptions that end a command, each tied to the exit code CONTRACT gives it.

Errors the caller must decide about are values (result objects); these are the ones where the
command cannot go on. The CLI layer maps them to exit codes in one place
(`daemons/cli/commands.py`).
"""

from __future__ import annotations

#: The note a tick adds to an unexpected exception it logged with its traceback
#: (`core.suite.tick.run_tick`), so the command around it (`daemons.cli.commands.run_main`)
#: reports it in one line instead of logging the traceback again.
LOGGED_NOTE = "(logged above as tick.failed, with its traceback)"


class KbError(Exception):
    """Base of every error this project raises on purpose."""

    exit_code = 1


class ConfigError(KbError):
    """Usage or configuration error: exit 2, one line on stderr naming the flag or file:line:col."""

    exit_code = 2


class StoreUnavailable(KbError):
    """Chroma or SQLite could not be reached or used; nothing was lost: exit 1."""

    exit_code = 1


class ConnectionLost(StoreUnavailable):
    """The connection to a store broke under the call (a database restart or failover, a cut
    network, an I/O error, the SQLite file replaced): the call's transaction rolled back and
    nothing was lost; a daemon reopens the connection on its next use
    (`core.base.state.reopening_graph`), a one-shot run ends with exit 1."""


class WriteConflict(StoreUnavailable):
    """A write lost to a concurrent one (PostgreSQL: deadlock detected, serialization
    failure): the same transaction may succeed when tried again; if it keeps failing it is an
    outage (exit 1), never the data's fault."""


class LockHeld(KbError):
    """Another process holds a lock this run needs (drainer lock, embedded store lock): exit 1."""

    exit_code = 1
