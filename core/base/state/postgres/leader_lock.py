"""The leader lock: a PostgreSQL session-level advisory lock held on a session of its own, and
the lease its holder renews, by which a standby tells a silent holder from a live one.

One host at a time holds the lock (`pg_try_advisory_lock`). The lock ends with its session:
- the holder dies (kill -9): the server sees the socket close and ends the session at once;
- the holder stops answering, however (SIGSTOP, a hung event loop, a cut network), even inside
  a statement: its lease runs out. The holder renews its row of `leader_leases` (schema version
  5) at every heartbeat and every fencing check (`renew`), stamped with the server's
  `statement_timestamp()`; a standby's `end_silent_holder` ends the holder's session
  (`pg_terminate_backend`) once that stamp is older than one lease by the server's clock,
  judged and done in one statement, so no host's clock is compared with another's and a
  standby that is itself slow acts on what is true when the statement runs. Two standbys that
  race end the same session; one of them then takes the lock.
- An idle holder's session also ends after one lease by itself (`idle_session_timeout`), even
  with no standby to end it; a session inside a statement is not idle, hence the lease.

Ending another host's session needs the privileges of its role (the same role on every host,
or membership in it) or of `pg_signal_backend` (which cannot end a superuser's session);
without them a standby logs `leadership.takeover_refused` and waits for `idle_session_timeout`.

`renew()` is also the fencing check: it answers True only while this session is alive, holds
the lock and renewed its lease (False on any error: a terminated session answers nothing). The
session is used by one caller at a time (an asyncio lock), since the heartbeat and a fencing
check may come at once.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import asyncpg
import structlog

from core.base.rules.errors import StoreUnavailable
from core.base.state.postgres.connection import CONNECTION_ERRORS, apply_schema

log = structlog.get_logger(__name__)

#: What a standby's role needs to end a silent holder's session.
TAKEOVER_HINT = ("run every host as the same role, or GRANT pg_signal_backend TO the daemons' "
                 "role (a superuser's session can be ended only by a superuser); until then "
                 "a silent leader is ended only when idle, by idle_session_timeout")
#: The server refused to end another role's session (SQLSTATE 42501).
InsufficientPrivilege = asyncpg.InsufficientPrivilegeError

#: The advisory lock's two keys: the project's namespace ("kb") and the lock's number.
LOCK_NAMESPACE = 0x6B62
#: The reconcile leader (reconcile, retention and alerting passes).
RECONCILE_LEADER = 1

#: Whether this session holds the lock (the lock's keys are $1 and $2 in every statement).
_HELD_HERE = """
EXISTS (SELECT 1 FROM pg_locks
        WHERE locktype = 'advisory' AND pid = pg_backend_pid() AND granted
          AND classid = $1::bigint::oid AND objid = $2::bigint::oid AND objsubid = 2)
"""
#: Take the lock when it is free and, in the same statement, start this session's lease.
_ACQUIRE = """
INSERT INTO leader_leases AS lease (lock_key, holder, pid, renewed_at)
SELECT $3::bigint, $4::text, pg_backend_pid(), statement_timestamp()
WHERE pg_try_advisory_lock($1::int, $2::int)
ON CONFLICT (lock_key) DO UPDATE
SET holder = EXCLUDED.holder, pid = EXCLUDED.pid, renewed_at = EXCLUDED.renewed_at
RETURNING lease.pid
"""
#: Renew this session's lease, only while it holds the lock.
_RENEW = f"""
UPDATE leader_leases SET renewed_at = statement_timestamp()
WHERE lock_key = $3::bigint AND pid = pg_backend_pid() AND {_HELD_HERE}
RETURNING pid
"""
#: End the session holding the lock when its lease is older than $4 ms by the server's clock
#: (waiting up to $5 ms for it to end); a holder without a lease row of its own (an earlier
#: version, or one whose first statement has not committed yet) is never ended here.
_END_SILENT = """
SELECT lease.holder, l.pid,
       (extract(epoch FROM clock_timestamp() - lease.renewed_at) * 1000)::bigint AS silent_ms,
       pg_terminate_backend(l.pid, $5::bigint) AS ended
FROM pg_locks l JOIN leader_leases lease ON lease.pid = l.pid AND lease.lock_key = $3::bigint
WHERE l.locktype = 'advisory' AND l.granted AND l.pid <> pg_backend_pid()
  AND l.classid = $1::bigint::oid AND l.objid = $2::bigint::oid AND l.objsubid = 2
  AND lease.renewed_at < clock_timestamp() - $4::bigint * interval '1 millisecond'
"""
_HOLDER = """
SELECT a.application_name FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
WHERE l.locktype = 'advisory' AND l.granted
  AND l.classid = $1::bigint::oid AND l.objid = $2::bigint::oid AND l.objsubid = 2
"""


@dataclass(frozen=True, slots=True)
class EndedHolder:
    """A holder whose lease ran out, ended by this standby: who, and how long it was silent."""

    holder: str
    pid: int
    silent_ms: int
    ended: bool


class LeaderLock:
    """One session that tries for, holds, renews and checks the leader lock."""

    def __init__(self, conn: asyncpg.Connection, *, holder: str, key: int,
                 lease_ms: int) -> None:
        self._conn = conn
        self.holder_name = holder[:63]
        self._key = key
        self.lease_ms = lease_ms
        self._timeout_s = max(0.5, lease_ms / 2000)
        self._busy = asyncio.Lock()

    @classmethod
    async def open(cls, url: str, *, holder: str, lease_ms: int, key: int = RECONCILE_LEADER,
                   contender: bool = True) -> LeaderLock:
        """A session named `holder` (its `application_name`), which the server ends after
        `lease_ms` idle; a `contender` first brings the schema (the lease table) up to date.
        Raises the client's errors when the database cannot be reached."""
        conn = await asyncpg.connect(url, timeout=max(1.0, lease_ms / 1000), server_settings={
            "idle_session_timeout": str(lease_ms), "application_name": holder[:63]})
        try:
            if contender:
                await apply_schema(conn)
        except BaseException:
            conn.terminate()
            raise
        return cls(conn, holder=holder, key=key, lease_ms=lease_ms)

    async def try_acquire(self) -> bool:
        """Take the lock and start this session's lease when no other session holds it (never
        waits). Raises the client's error when the server could not be asked: the caller then
        closes this session, so no lock is left behind on it."""
        async with self._busy:
            pid = await self._conn.fetchval(
                _ACQUIRE, LOCK_NAMESPACE, self._key, self._key, self.holder_name,
                timeout=self._timeout_s)
        return pid is not None

    async def renew(self) -> bool:
        """Renew the lease; True while this session is alive and still holds the lock (asked
        of the server now; False on any error: a session the server ended holds nothing)."""
        if self._conn.is_closed():
            return False
        try:
            async with self._busy:
                pid = await self._conn.fetchval(_RENEW, LOCK_NAMESPACE, self._key, self._key,
                                                timeout=self._timeout_s)
        except CONNECTION_ERRORS as exc:
            log.warning("leadership.session_lost", error=f"{type(exc).__name__}: {exc}")
            return False
        return pid is not None

    async def end_silent_holder(self) -> EndedHolder | None:
        """End the holder's session when its lease ran out (see the module docstring); the
        holder ended, or None when the holder is alive or nobody holds the lock. Raises
        asyncpg's InsufficientPrivilegeError when this role may not end that session."""
        async with self._busy:
            row = await self._conn.fetchrow(
                _END_SILENT, LOCK_NAMESPACE, self._key, self._key, self.lease_ms,
                int(self._timeout_s * 500), timeout=self._timeout_s * 2)
        if row is None:
            return None
        return EndedHolder(str(row["holder"]), int(row["pid"]), int(row["silent_ms"]),
                           bool(row["ended"]))

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
    """Who holds the leader lock now (its session's `application_name`), or None, for status;
    StoreUnavailable when the database cannot be asked ("nobody" would be wrong)."""
    try:
        lock = await LeaderLock.open(url, holder="kb-status", lease_ms=10_000, key=key,
                                     contender=False)
    except (*CONNECTION_ERRORS, ValueError) as exc:
        raise StoreUnavailable(f"PostgreSQL {url}: could not ask who leads: {exc}") from exc
    try:
        return await lock.ask_holder()
    except CONNECTION_ERRORS as exc:
        raise StoreUnavailable(f"PostgreSQL {url}: could not ask who leads: {exc}") from exc
    finally:
        await lock.close()
