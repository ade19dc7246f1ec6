"""The leader lock: a PostgreSQL session-level advisory lock held on a connection of its own.

One host at a time holds it (`pg_try_advisory_lock`); it is released by PostgreSQL itself when
the holder's session ends, whatever ends it:
- the process dies (kill -9): the server sees the socket close and ends the session;
- the process is paused (SIGSTOP) or the network is cut: the kernel would keep the socket
  open, so the session is opened with `idle_session_timeout = lease`: a holder that has not
  spoken for one lease is disconnected by the server. The holder therefore speaks every third
  of a lease (`holds()`, the heartbeat), and a standby can take over one lease after the
  holder went silent.

`holds()` is also the fencing check: it asks the server, on the lock's own session, whether
this session still holds the lock, and answers False on any error (a terminated session
answers nothing). The session is used by one caller at a time (an asyncio lock), since the
heartbeat and a fencing check may come at once.
"""

from __future__ import annotations

import asyncio

import asyncpg
import structlog

from core.rules.errors import StoreUnavailable
from core.stores.postgres.connection import CONNECTION_ERRORS

log = structlog.get_logger(__name__)

#: The advisory lock's two keys: the project's namespace ("kb") and the lock's number.
LOCK_NAMESPACE = 0x6B62
#: The reconcile leader (reconcile, retention and alerting passes).
RECONCILE_LEADER = 1

_HOLDS = """
SELECT count(*) FROM pg_locks
WHERE locktype = 'advisory' AND pid = pg_backend_pid() AND granted
  AND classid = $1::bigint::oid AND objid = $2::bigint::oid AND objsubid = 2
"""
_HOLDER = """
SELECT a.application_name FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
WHERE l.locktype = 'advisory' AND l.granted
  AND l.classid = $1::bigint::oid AND l.objid = $2::bigint::oid AND l.objsubid = 2
"""



class LeaderLock:
    """One session that tries for, holds and checks the leader lock."""

    def __init__(self, conn: asyncpg.Connection, *, key: int, timeout_s: float) -> None:
        self._conn = conn
        self._key = key
        self._timeout_s = timeout_s
        self._busy = asyncio.Lock()

    @classmethod
    async def open(cls, url: str, *, holder: str, lease_ms: int,
                   key: int = RECONCILE_LEADER) -> LeaderLock:
        """A session named `holder` (shown as its `application_name`: who leads), which the
        server ends after `lease_ms` of silence. Raises OSError/asyncpg errors when the
        database cannot be reached (the caller stays a standby and tries again)."""
        conn = await asyncpg.connect(url, timeout=max(1.0, lease_ms / 1000), server_settings={
            "idle_session_timeout": str(lease_ms), "application_name": holder[:63]})
        return cls(conn, key=key, timeout_s=max(0.5, lease_ms / 2000))

    async def try_acquire(self) -> bool:
        """Take the lock when no other session holds it (never waits)."""
        try:
            async with self._busy:
                return bool(await self._conn.fetchval(
                    "SELECT pg_try_advisory_lock($1, $2)", LOCK_NAMESPACE, self._key,
                    timeout=self._timeout_s))
        except CONNECTION_ERRORS:
            log.warning("leadership.try_failed", exc_info=True)
            return False

    async def holds(self) -> bool:
        """Whether this session is alive and still holds the lock (asked of the server now;
        False on any error: a session the server ended can hold nothing)."""
        if self._conn.is_closed():
            return False
        try:
            async with self._busy:
                count = await self._conn.fetchval(_HOLDS, LOCK_NAMESPACE, self._key,
                                                  timeout=self._timeout_s)
        except CONNECTION_ERRORS as exc:
            log.warning("leadership.session_lost", error=f"{type(exc).__name__}: {exc}")
            return False
        return bool(count)

    async def holder(self) -> str | None:
        """The `application_name` of the session holding the lock now, or None (also when
        the server cannot be asked)."""
        try:
            return await self.ask_holder()
        except CONNECTION_ERRORS:
            return None

    async def ask_holder(self) -> str | None:
        """The `application_name` of the session holding the lock now, or None when no
        session does; raises the client's error when the server cannot be asked."""
        async with self._busy:
            name = await self._conn.fetchval(_HOLDER, LOCK_NAMESPACE, self._key,
                                             timeout=self._timeout_s)
        return str(name) if name is not None else None

    async def close(self) -> None:
        """End the session (the lock, if held, is released with it). Idempotent."""
        if not self._conn.is_closed():
            try:
                await asyncio.wait_for(self._conn.close(), self._timeout_s)
            except CONNECTION_ERRORS:
                self._conn.terminate()


async def current_leader(url: str, *, key: int = RECONCILE_LEADER) -> str | None:
    """Who holds the leader lock now (its session's `application_name`), or None when nobody
    does, for status. A database that cannot be reached or asked is StoreUnavailable (exit
    1): "nobody" would be a wrong answer, not an unknown one."""
    try:
        lock = await LeaderLock.open(url, holder="kb-status", lease_ms=10_000, key=key)
    except (*CONNECTION_ERRORS, ValueError) as exc:
        raise StoreUnavailable(f"PostgreSQL {url}: could not ask who leads: {exc}") from exc
    try:
        return await lock.ask_holder()
    except CONNECTION_ERRORS as exc:
        raise StoreUnavailable(f"PostgreSQL {url}: could not ask who leads: {exc}") from exc
    finally:
        await lock.close()
