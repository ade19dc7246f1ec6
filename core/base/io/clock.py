"""Wall-clock time in epoch milliseconds, the unit of every timestamp this project stores.

Pure functions take `now_ms` as an argument instead of calling this, so tests control time.
"""

from __future__ import annotations

import time


def now_ms() -> int:
    """The current time as integer epoch milliseconds."""
    return time.time_ns() // 1_000_000
