"""`kb-migrate`: copy a SQLite state file into an empty PostgreSQL database, verified, or nothing.

What is copied: every table of the state (`core.base.state.schema.STATE_TABLES`): the graph with
the tenant configs, manifests and policies (they are `kb-config:` / `kb-manifest:` nodes), the
telemetry, the drain's offsets and re-queued line ids, the tick records and daemon values, the
alert cooldowns and history. Chroma and the queue files are not state: they stay where they
are (the drainer keeps its queue; see docs/beyond-one-machine.md).

Guarantees:
- The source is read, never written: opened `mode=ro` in one read transaction, so the copy is
  one consistent snapshot even if a writer commits meanwhile. The run also takes the locks a
  running daemon holds (the drainer lock, and the embedded store's lock when the store exists)
  and refuses (exit 1) while one is held: stop the daemons first.
- The target must be empty: after its schema is applied (the daemons' own versioned schema),
  any state table with a row refuses the run (exit 2, naming the table), nothing written.
- One target transaction: every row, the identity sequences and the verification happen in it.
  Any failure (a row PostgreSQL refuses, a checksum that differs) rolls it all back: the target
  is left empty, the run says which table (exit 1), and a rerun starts clean.
- Verified before commit: per table, the row count and a checksum of every row's canonical
  rendering (`core.base.rules.state.verified_copy`) read back inside the transaction must
  equal the source's.
- The drain carries on: each offset row (`drain_generations`) is tagged with the drainer id of
  this host's queue (`core.drain.stores.drainer_identity`, created here when the queue has none
  yet), the id the host's drainer reads on its first tick on PostgreSQL: its `.draining` file
  resumes at the copied offset, and it forgets only its own generations.
- Text that is not strict JSON in a JSON column is copied as it is (PostgreSQL keeps JSON as
  TEXT and reads such text as unreadable, as SQLite does) and counted per table.
- Memory is bounded by a page (`PAGE_ROWS`) on both legs; no table is read whole.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field

import structlog

from core.base.chroma import STORE_LOCK_NAME
from core.base.config.config import Settings
from core.base.config.state_url import InvalidStateUrl, parse_state_url
from core.base.io.locks import ProcessLock
from core.base.rules.camel_json import omitted_when_none
from core.base.rules.errors import ConfigError, StoreUnavailable
from core.base.rules.state.verified_copy import (
    JSON_COLUMNS,
    CopyPlan,
    SchemaMismatch,
    TableCheck,
    TableTally,
    check_table,
    first_mismatch,
    is_strict_json,
    mismatch_reason,
    plan_table,
)
from core.base.state.graph_db import GraphDataError
from core.base.state.postgres.bulk_load import PostgresLoad
from core.base.state.schema import STATE_TABLES
from core.base.state.sqlite import BUSY_TIMEOUT_MS
from core.base.state.sqlite.snapshot import SqliteSnapshot
from core.drain.queue_drain import drainer_lock
from core.drain.stores.drainer_identity import drainer_id

log = structlog.get_logger(__name__)

#: Rows per page, read from SQLite and sent in one COPY (and fetched per cursor trip when
#: verifying): large enough that a page's round trip is amortized, small enough that a page of
#: the widest rows (node properties of a few KB) stays within a few MB.
PAGE_ROWS = 1_000
#: The target column the copy fills itself: the drainer each offset row belongs to.
DRAINER_COLUMN = "drainer"


@dataclass(frozen=True, slots=True)
class TableCopied:
    """One table as copied: its rows, the checksum of the source, whether the target's
    count and checksum matched, and how many rows hold text that is not strict JSON."""

    table: str
    rows: int
    checksum: str
    matches: bool
    invalid_json: int


@dataclass(frozen=True, slots=True)
class MigrationFigures:
    """What a migration did: `ok` when every table was copied, verified and committed;
    else `error` says which table failed and the target was left as it was (empty)."""

    ok: bool
    source: str
    target: str
    tables: tuple[TableCopied, ...]
    error: str | None = field(default=None, metadata=omitted_when_none())
    drainer: str | None = field(default=None, metadata=omitted_when_none())


def _checked_target(target_url: str) -> str:
    try:
        return parse_state_url(target_url)
    except InvalidStateUrl as exc:
        raise ConfigError(f"argument --to: {exc}") from None


@contextlib.contextmanager
def daemons_stopped(settings: Settings, *,
                    hint: str = "stop the daemons before kb-migrate") -> Iterator[None]:
    """Hold the locks a running daemon holds (the drainer's, the embedded store's), so none
    writes the folder meanwhile and none starts beside it (LockHeld, exit 1, when one runs;
    `hint` says what to do). A lock whose folder does not exist is not needed (no daemon
    ever ran there) and is not created."""
    locks: list[ProcessLock] = []
    try:
        queue = settings.drain.lazy_edges_queue_path
        if queue.parent.is_dir():
            locks.append(drainer_lock(queue).acquire())
        if not settings.chroma.server_mode and settings.chroma.path.is_dir():
            locks.append(ProcessLock(settings.chroma.path / STORE_LOCK_NAME,
                                     purpose=f"embedded Chroma store {settings.chroma.path}",
                                     hint=hint).acquire())
        yield
    finally:
        for lock in reversed(locks):
            lock.release()


async def migrate_state(settings: Settings, *, target_url: str,
                        page_rows: int = PAGE_ROWS) -> MigrationFigures:
    """Copy the SQLite state of `settings` into the empty database at `target_url` (see the
    module docstring). Raises ConfigError (exit 2) for what the operator must change first
    (the config already on PostgreSQL, no source file, a non-empty target, an invalid URL),
    LockHeld / StoreUnavailable (exit 1) when a daemon runs or a store cannot be reached;
    returns figures with `ok` false (exit 1) when a table could not be copied exactly."""
    if page_rows < 1:
        raise ValueError(f"page_rows must be at least 1, not {page_rows}")
    url = _checked_target(target_url)
    if settings.state.url:
        raise ConfigError(f"stateUrl is already {settings.state.url}: nothing to migrate from "
                          "(kb-migrate reads the SQLite file at graphDbPath; give it the "
                          "configuration the daemons use on SQLite)")
    source = settings.state.graph_db_path
    if not source.is_file():
        raise ConfigError(f"{source}: no SQLite state file there (graphDbPath); nothing to "
                          "migrate")
    with daemons_stopped(settings):
        snapshot = await SqliteSnapshot.open(source)
        try:
            return await _copy_snapshot(settings, snapshot, url, page_rows=page_rows)
        finally:
            await snapshot.close()


async def _source_tables(snapshot: SqliteSnapshot) -> tuple[str, ...]:
    """The state tables the source has, in copy order; refuses (ConfigError) a table this
    version does not know."""
    present = await snapshot.table_names()
    unknown = sorted(present - set(STATE_TABLES))
    if unknown:
        raise ConfigError(f"{snapshot.path}: table {unknown[0]} is not state this version "
                          "knows how to copy; nothing was copied")
    return tuple(t for t in STATE_TABLES if t in present)


async def _copy_snapshot(settings: Settings, snapshot: SqliteSnapshot, url: str, *,
                         page_rows: int) -> MigrationFigures:
    tables = await _source_tables(snapshot)
    load = await PostgresLoad.open(url, busy_timeout_ms=BUSY_TIMEOUT_MS)
    try:
        for table in STATE_TABLES:
            if await load.has_rows(table):
                raise ConfigError(f"{url}: table {table} already has rows; kb-migrate copies "
                                  "into an empty database only (nothing was written)")
        drainer: str | None = None
        if "drain_generations" in tables and await snapshot.row_count("drain_generations"):
            drainer = await asyncio.to_thread(drainer_id, settings.drain.lazy_edges_queue_path)
        copied: list[tuple[CopyPlan, TableTally, int]] = []
        for table in tables:
            plan = await _plan(snapshot, load, table, drainer=drainer)
            try:
                tally, invalid = await _copy_table(snapshot, load, plan, page_rows=page_rows)
            except GraphDataError as exc:
                return _failed(snapshot, url, copied, f"table {table}: PostgreSQL refused a "
                               f"row ({exc}); the target is left empty")
            copied.append((plan, tally, invalid))
        checks = [check_table(plan.table, tally,
                              await _target_tally(load, plan, page_rows=page_rows),
                              invalid_json=invalid)
                  for plan, tally, invalid in copied]
        mismatch = first_mismatch(checks)
        if mismatch is not None:
            return _failed(snapshot, url, copied,
                           f"{mismatch_reason(mismatch)}; the target is left empty",
                           checks=checks)
        await load.commit()
    finally:
        await load.close()
    figures = MigrationFigures(True, str(snapshot.path), url, tuple(map(_shown, checks)),
                               drainer=drainer)
    log.info("migrate.completed", source=str(snapshot.path), target=url,
             rows=sum(c.source_rows for c in checks),
             invalidJson=sum(c.invalid_json for c in checks))
    return figures


def _shown(check: TableCheck) -> TableCopied:
    return TableCopied(check.table, check.source_rows, check.source_checksum, check.matches,
                       check.invalid_json)


def _failed(snapshot: SqliteSnapshot, url: str, copied: list[tuple[CopyPlan, TableTally, int]],
            error: str, *, checks: list[TableCheck] | None = None) -> MigrationFigures:
    """The figures of a run whose transaction is about to be rolled back."""
    log.error("migrate.failed", source=str(snapshot.path), target=url, error=error)
    shown = tuple(map(_shown, checks)) if checks is not None else tuple(
        TableCopied(plan.table, tally.rows, tally.checksum, False, invalid)
        for plan, tally, invalid in copied)
    return MigrationFigures(False, str(snapshot.path), url, shown, error=error)


async def _plan(snapshot: SqliteSnapshot, load: PostgresLoad, table: str, *,
                drainer: str | None) -> CopyPlan:
    target = await load.columns(table)
    try:
        return plan_table(table, source_columns=await snapshot.columns(table),
                          target_columns=[c.name for c in target],
                          defaulted=[c.name for c in target if c.defaulted],
                          filled={DRAINER_COLUMN: drainer} if drainer is not None else {})
    except SchemaMismatch as exc:
        raise ConfigError(str(exc)) from None


async def _copy_table(snapshot: SqliteSnapshot, load: PostgresLoad, plan: CopyPlan, *,
                      page_rows: int) -> tuple[TableTally, int]:
    """Copy one table a page at a time; its source tally and its count of rows holding text
    that is not strict JSON in a JSON column."""
    tally = TableTally()
    invalid = 0
    json_at = [plan.columns.index(c) for c in JSON_COLUMNS.get(plan.table, ())
               if c in plan.columns]
    filled = tuple(plan.filled.values())
    columns = plan.columns + tuple(plan.filled)
    async for page in snapshot.pages(plan.table, plan.columns, page=page_rows):
        for row in page:
            tally.add(row)
            invalid += any(not is_strict_json(row[i]) for i in json_at)
        await load.copy_page(plan.table, columns, [row + filled for row in page])
    # The checksums compare what was read with what was written: check that what was read is
    # the whole table (same snapshot), so a short read cannot verify as a match.
    expected = await snapshot.row_count(plan.table)
    if tally.rows != expected:
        raise StoreUnavailable(f"SQLite {snapshot.path}: read {tally.rows} of the {expected} "
                               f"rows of {plan.table}; nothing was committed")
    target = await load.columns(plan.table)
    for column in target:
        if column.by_default_identity and column.name in plan.columns:
            await load.continue_identity(plan.table, column.name)
    if invalid:
        log.warning("migrate.invalid_json_kept", table=plan.table, rows=invalid)
    return tally, invalid


async def _target_tally(load: PostgresLoad, plan: CopyPlan, *, page_rows: int) -> TableTally:
    tally = TableTally()
    async for row in load.rows(plan.table, plan.columns, page=page_rows):
        tally.add(row)
    return tally
