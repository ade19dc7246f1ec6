"""A real PostgreSQL 15 for the test session: `benchmarks.postgres_cluster`'s throwaway cluster
with the suite's settings (nothing flushed to disk), stopped at the end of the session. When it
cannot start, the session fails: a PostgreSQL test is never skipped (`tests/conftest.py`).
"""

from __future__ import annotations

from benchmarks.postgres_cluster import PostgresServer

__all__ = ["PostgresServer"]
