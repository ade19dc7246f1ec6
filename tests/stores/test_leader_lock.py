"""The leader lock's lease on a real PostgreSQL (the session's): a holder silent past its lease
is ended by a standby, even inside a statement; a live one and one of an earlier version (no
lease row) never are; two racing standbys end it and exactly one takes the lock."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
import pytest

from core.base.state.postgres.leader_lock import LOCK_NAMESPACE, RECONCILE_LEADER, LeaderLock
from core.base.state.state import open_graph
from tests.postgres_server import PostgresServer
from tests.support import make_settings

LEASE_MS = 1_000
_databases = iter(range(1, 1_000_000))


@pytest.fixture
async def url(postgres_server: PostgresServer, tmp_path: Path) -> AsyncIterator[str]:
    """A fresh database with the schema applied (the lease table is part of it)."""
    made = postgres_server.create_database(f"lease{next(_databases)}")
    graph = await open_graph(make_settings(tmp_path, stateUrl=made).state)
    await graph.close()
    yield made


async def _lock(url: str, holder: str) -> LeaderLock:
    return await LeaderLock.open(url, holder=holder, lease_ms=LEASE_MS)


async def _past_the_lease(*standbys: LeaderLock) -> None:
    """Wait a little more than a lease, the standbys speaking every quarter of one (as their
    heartbeat does: a standby silent for a lease is idle, and the server ends it)."""
    for _ in range(5):
        await asyncio.sleep(LEASE_MS / 4000 + 0.06)
        for standby in standbys:
            await standby.holder()


async def _holder(url: str, name: str) -> tuple[LeaderLock, asyncpg.Connection]:
    """A lock on a session the test can also hold inside a statement of its own (not idle,
    so the server's idle_session_timeout never ends it: a leader stopped mid-query)."""
    conn = await asyncpg.connect(url, server_settings={
        "application_name": name, "idle_session_timeout": str(LEASE_MS)})
    return LeaderLock(conn, holder=name, key=RECONCILE_LEADER, lease_ms=LEASE_MS), conn


async def test_a_holder_silent_inside_a_statement_past_its_lease_is_ended_and_replaced(
    url: str,
) -> None:
    holder, session = await _holder(url, "a")
    standby = await _lock(url, "b")
    try:
        assert await holder.try_acquire()
        assert not await standby.try_acquire()
        assert await standby.end_silent_holder() is None, "it renewed a moment ago"
        # The holder's session is inside a statement now, and renews no more.
        stuck = asyncio.create_task(session.execute("SELECT pg_sleep(30)"))
        await _past_the_lease(standby)
        ended = await standby.end_silent_holder()
        assert ended is not None and ended.holder == "a"
        assert ended.silent_ms >= LEASE_MS
        # The server waits a quarter of a lease for the session to exit; on a loaded machine
        # it may take longer (ended=False), and the standby's next heartbeat tries again, as
        # the daemon's does (`Leadership._take_over`).
        for _ in range(20):
            if ended is None or ended.ended:
                break
            await asyncio.sleep(LEASE_MS / 4000)
            ended = await standby.end_silent_holder()
        assert ended is None or ended.ended, "the silent holder was never ended"
        with pytest.raises(asyncpg.PostgresError):
            await stuck
        assert await standby.try_acquire()
        assert not await holder.renew(), "the old holder's fencing check fails"
        assert await standby.renew()
    finally:
        await holder.close()
        await standby.close()


async def test_a_holder_that_renews_is_never_ended(url: str) -> None:
    holder, standby = await _lock(url, "a"), await _lock(url, "b")
    try:
        assert await holder.try_acquire()
        for _ in range(int(LEASE_MS / 200) * 2):  # two leases, renewed every fifth of one
            await asyncio.sleep(0.2)
            assert await holder.renew()
            assert await standby.end_silent_holder() is None
    finally:
        await holder.close()
        await standby.close()


async def test_a_holder_without_a_lease_row_of_its_own_is_never_ended(url: str) -> None:
    """An earlier version's leader takes the bare advisory lock and writes no lease."""
    older = await asyncpg.connect(url, server_settings={"application_name": "old-version"})
    standby = await _lock(url, "b")
    try:
        assert await older.fetchval("SELECT pg_try_advisory_lock($1, $2)", LOCK_NAMESPACE,
                                    RECONCILE_LEADER)
        task = asyncio.create_task(older.execute("SELECT pg_sleep(30)"))
        await _past_the_lease(standby)
        assert await standby.end_silent_holder() is None
        assert not await standby.try_acquire()
        task.cancel()
    finally:
        older.terminate()
        await standby.close()


async def test_two_racing_standbys_end_the_silent_holder_and_exactly_one_takes_the_lock(
    url: str,
) -> None:
    holder, session = await _holder(url, "a")
    standbys = [await _lock(url, name) for name in ("b", "c")]
    try:
        assert await holder.try_acquire()
        stuck = asyncio.create_task(session.execute("SELECT pg_sleep(30)"))
        await _past_the_lease(*standbys)
        ended = await asyncio.gather(*(s.end_silent_holder() for s in standbys))
        assert any(e is not None for e in ended)
        taken = await asyncio.gather(*(s.try_acquire() for s in standbys))
        assert sorted(taken) == [False, True]
        winner = standbys[taken.index(True)]
        assert await winner.end_silent_holder() is None, "nobody ends the new, live holder"
        assert await standbys[taken.index(False)].end_silent_holder() is None
        with pytest.raises(asyncpg.PostgresError):
            await stuck
    finally:
        for lock in (holder, *standbys):
            await lock.close()
