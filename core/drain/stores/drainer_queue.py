"""What a drainer records of itself with each tick: its id, its host and its queue's figures.

A host cannot read another host's queue file, so each drainer writes these beside its tick
(`core.base.state.daemon_state.record_tick`); status and /metrics on any host then show every
drainer of a shared state. Lines are counted, not parsed (`count_newlines`): the cost is one
read of the queue and dead-letter files per tick, as a status run already pays.
"""

from __future__ import annotations

import socket

from core.base.config.config import Settings
from core.base.state.daemon_state import DrainerQueue
from core.drain.stores.drainer_identity import DrainerIdentityError, read_drainer_id
from core.drain.stores.queue_files import count_newlines


def read_drainer_queue(settings: Settings) -> DrainerQueue | None:
    """This host's drainer and its queue now, or None when it has no id yet. Blocking.

    The id is the one the drain keeps beside the queue on PostgreSQL; it is never made here
    (a tick that failed before its drain began made none, and guessing one would split a
    drainer in two): such a tick is recorded in `daemon_ticks` only. A SQLite file has one
    drainer, ''. Raises `DrainerIdentityError` when the id file exists but holds no id.
    """
    queue = settings.drain.lazy_edges_queue_path
    ident = read_drainer_id(queue) if settings.state.url else ""
    if ident is None:
        return None
    return DrainerQueue(
        drainer=ident,
        host=socket.gethostname(),
        queue_lines=count_newlines(queue),
        draining=settings.drain.draining_path.exists(),
        dead_letters=count_newlines(settings.drain.dead_letter_path),
    )


def local_drainer(settings: Settings) -> str | None:
    """The id this host's drainer records under, without creating one (None: it has not
    ticked on PostgreSQL yet, or its id file is unreadable). Blocking."""
    if not settings.state.url:
        return ""
    try:
        return read_drainer_id(settings.drain.lazy_edges_queue_path)
    except DrainerIdentityError:
        return None
