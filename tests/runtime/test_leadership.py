"""A standby's side of the election on a real PostgreSQL (the session's), where the holder's
role is not the standby's: a standby that may not end a silent holder's session is refused,
says so once with what to grant, and takes over as soon as its role has `pg_signal_backend`."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import asyncpg
import pytest

from core.base.state.postgres.leader_lock import RECONCILE_LEADER, LeaderLock
from core.base.state.state import open_graph
from core.suite.leadership import Leadership
from tests.postgres_server import PostgresServer
from tests.support import make_settings

LEASE_MS = 1_000
_databases = iter(range(1, 1_000_000))


async def _database_with_roles(postgres_server: PostgresServer, tmp_path: Path,
                               *roles: str) -> str:
    """A database with the schema applied and login roles (no superusers) that may use it."""
    url = postgres_server.create_database(f"leadroles{next(_databases)}")
    graph = await open_graph(make_settings(tmp_path, stateUrl=url).state)
    await graph.close()
    admin = await asyncpg.connect(url)
    try:
        for role in roles:
            await admin.execute(f"DROP ROLE IF EXISTS {role}")
            await admin.execute(f"CREATE ROLE {role} LOGIN")
            await admin.execute(f"GRANT CREATE ON SCHEMA public TO {role}")
            await admin.execute(f"GRANT SELECT, INSERT, UPDATE ON leader_leases TO {role}")
            await admin.execute(f"GRANT SELECT ON kb_schema_version TO {role}")
    finally:
        await admin.close()
    return url


def _as(url: str, role: str) -> str:
    return url.replace("//postgres@", f"//{role}@")


async def test_a_standby_that_may_not_end_the_holder_says_so_once_and_takes_over_once_granted(
    postgres_server: PostgresServer, tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    suffix = next(_databases)
    holder_role, standby_role = f"kb_lead_a{suffix}", f"kb_lead_b{suffix}"
    url = await _database_with_roles(postgres_server, tmp_path, holder_role, standby_role)
    session = await asyncpg.connect(_as(url, holder_role), server_settings={
        "application_name": "a", "idle_session_timeout": str(LEASE_MS)})
    holder = LeaderLock(session, holder="a", key=RECONCILE_LEADER, lease_ms=LEASE_MS)
    standby = Leadership(_as(url, standby_role), holder="b", lease_ms=LEASE_MS)
    stop = asyncio.Event()
    try:
        assert await holder.try_acquire()
        stuck = asyncio.create_task(session.execute("SELECT pg_sleep(30)"))  # silent, busy
        for _ in range(5):  # a little more than a lease, the standby's heartbeat going on
            await asyncio.sleep(LEASE_MS / 4000 + 0.06)
            await standby.step()
        assert not standby.leads
        refused = [json.loads(line) for line in capsys.readouterr().err.splitlines()
                   if '"leadership.takeover_refused"' in line]
        assert len(refused) == 1, "said once"
        assert "pg_signal_backend" in refused[0]["hint"]

        admin = await asyncpg.connect(url)
        try:
            await admin.execute(f"GRANT pg_signal_backend TO {standby_role}")
        finally:
            await admin.close()
        await standby.step()
        assert standby.leads
        with pytest.raises(asyncpg.PostgresError):
            await stuck
    finally:
        session.terminate()
        stop.set()
        await standby.run(stop)  # releases its session
