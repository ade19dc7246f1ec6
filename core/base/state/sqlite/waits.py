"""How long the SQLite state's calls wait (the connection's and the schema read's one value)."""

from __future__ import annotations

#: How long a write waits for another writer before the tick gives up (ms). Long enough to ride
#: out a neighbour's batch commit (tens of ms), short enough that a stuck writer fails the tick
#: instead of hanging it.
BUSY_TIMEOUT_MS = 5_000
#: Between tries of the switch to WAL while another opener has a new file busy.
WAL_RETRY_S = 0.02
