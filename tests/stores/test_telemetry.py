"""Ingestion telemetry: best-effort recording with the original's defaults, rollups, and the
spool that keeps a reconciliation pass's rows until SQLite takes them."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from core.base.config.config import Settings
from core.base.rules.errors import StoreUnavailable
from core.base.rules.telemetry import (
    DEFAULT_REPO_SLUG,
    DEFAULT_TENANT_ID,
    EVENT_ERROR,
    EVENT_RECONCILE,
    EVENT_TOMBSTONE,
    KNOWN_METRICS,
    MetricWindow,
    serialize_detail,
)
from core.base.state.graph_db import GraphDB
from core.base.state.state import open_graph
from core.base.state.telemetry import (
    ingestion_rollup,
    insert_metric_rows,
    last_stale_counts,
    new_metric_row,
    record_ingestion_metric,
    recorded_repos,
)
from core.base.state.telemetry_spool import MetricSpool

pytestmark = pytest.mark.both_backends


async def _rows(graph: GraphDB) -> list[dict[str, Any]]:
    rows = await graph.query(
        "SELECT tenant_id, repo_slug, event_type, chunks_total, chunks_embedded, "
        "chunks_deleted, duration_ms, error_code, detail, origin_agent, timestamp "
        "FROM kb_ingestion_metrics ORDER BY timestamp, rowid"
    )
    keys = ("tenant", "repo", "event", "total", "embedded", "deleted", "duration", "error",
            "detail", "origin", "timestamp")
    return [dict(zip(keys, tuple(r), strict=True)) for r in rows]


@pytest.mark.sqlite_only(reason="reads SQLite itself (raw SQL, rowid, pragmas or the file)")
async def test_an_event_without_fields_takes_the_original_defaults(graph: GraphDB) -> None:
    assert await record_ingestion_metric(graph) is not None
    [row] = await _rows(graph)
    assert (row["tenant"], row["repo"], row["event"]) == ("neo-shared", "neo", "ingest")
    assert (row["total"], row["embedded"], row["deleted"]) == (0, 0, 0)
    assert row["detail"] is None and row["duration"] is None and row["error"] is None


@pytest.mark.sqlite_only(reason="reads SQLite itself (raw SQL, rowid, pragmas or the file)")
async def test_every_field_is_stored_as_given(graph: GraphDB) -> None:
    await record_ingestion_metric(
        graph, tenant_id="@acme", repo_slug="acme/kb", event_type=EVENT_TOMBSTONE,
        origin_agent="agent-7", chunks_total=9, chunks_embedded=4, chunks_deleted=5,
        duration_ms=120, error_code=None, detail={"files": ["a.md"]}, timestamp_ms=1_000,
    )
    [row] = await _rows(graph)
    assert row == {
        "tenant": "acme", "repo": "acme/kb", "event": "tombstone", "total": 9, "embedded": 4,
        "deleted": 5, "duration": 120, "error": None, "detail": '{"files":["a.md"]}',
        "origin": "agent-7", "timestamp": 1_000,
    }


@pytest.mark.parametrize("detail", [object(), {"x": {1, 2}}, {"nan": math.nan}])
def test_an_unserializable_detail_is_stored_as_the_original_marker(detail: Any) -> None:
    assert json.loads(serialize_detail(detail) or "") == {"error": "Unserializable Value"}


def test_a_cyclic_detail_is_unserializable_too() -> None:
    cyclic: dict[str, Any] = {}
    cyclic["self"] = cyclic
    assert serialize_detail(cyclic) == '{"error":"Unserializable Value"}'


async def test_recording_never_raises_into_its_caller(settings: Settings) -> None:
    read_only = await open_graph(settings.state, read_only=True)
    try:
        assert await record_ingestion_metric(read_only, tenant_id="acme") is None
    finally:
        await read_only.close()
    closed = await open_graph(settings.state)
    await closed.close()
    assert await record_ingestion_metric(closed, tenant_id="acme") is None


async def _seed_events(graph: GraphDB) -> None:
    events: list[dict[str, Any]] = [
        {"tenant_id": "acme", "repo_slug": "a", "event_type": "ingest", "chunks_embedded": 10,
         "chunks_total": 10},
        {"tenant_id": "acme", "repo_slug": "a", "event_type": EVENT_RECONCILE,
         "chunks_total": 7, "chunks_deleted": 3},
        {"tenant_id": "acme", "repo_slug": "b", "event_type": EVENT_ERROR,
         "error_code": "boom"},
        {"tenant_id": "acme", "repo_slug": "b", "event_type": EVENT_TOMBSTONE,
         "chunks_deleted": 2},
        {"tenant_id": "zeta", "repo_slug": "z", "event_type": EVENT_RECONCILE,
         "chunks_total": 4},
    ]
    for i, event in enumerate(events):
        await record_ingestion_metric(graph, timestamp_ms=1_000 + i, **event)
    # Outside the window on both sides.
    await record_ingestion_metric(graph, tenant_id="acme", repo_slug="a", timestamp_ms=999)
    await record_ingestion_metric(graph, tenant_id="acme", repo_slug="a", timestamp_ms=2_000)


async def test_the_rollup_per_tenant_and_repo_counts_the_window_only(graph: GraphDB) -> None:
    await _seed_events(graph)
    rollup = await ingestion_rollup(graph, MetricWindow(1_000, 2_000))
    assert [(r["tenantId"], r["repoSlug"]) for r in rollup] == [
        ("acme", "a"), ("acme", "b"), ("zeta", "z"),
    ]
    acme_a = rollup[0]
    assert acme_a == {
        "tenantId": "acme", "repoSlug": "a", "eventCount": 2, "ingestEvents": 1,
        "tombstoneEvents": 0, "reconcileEvents": 1, "errorEvents": 0, "chunksEmbedded": 10,
        "chunksDeleted": 3, "chunksTotal": 17, "missingPaths": 0, "errorRate": 0.0,
    }
    assert rollup[1]["errorRate"] == 0.5


async def test_missing_paths_roll_up_as_the_largest_count_a_reconcile_row_reported(
    graph: GraphDB
) -> None:
    # Missing paths are a level: three passes that each report the same 3 paths mean 3.
    for i, detail in enumerate([{"missingPathCount": 3}, {"missingPathCount": 3},
                                {"missingPathCount": 2}, {"missingPathCount": "x"}, None]):
        await record_ingestion_metric(graph, tenant_id="acme", repo_slug="a",
                                      event_type=EVENT_RECONCILE, timestamp_ms=1_000 + i,
                                      detail=detail)
    await record_ingestion_metric(graph, tenant_id="acme", repo_slug="a",
                                  event_type=EVENT_ERROR, timestamp_ms=1_010,
                                  detail={"missingPathCount": 99})  # not a reconcile row
    async with graph.write() as tx:  # a row another program wrote with unreadable detail
        await tx.execute("INSERT INTO kb_ingestion_metrics(id, timestamp, tenant_id, "
                         "repo_slug, event_type, detail) VALUES ('bad', 1020, 'acme', 'a', "
                         "'reconcile', '{not json')")
    [row] = await ingestion_rollup(graph, MetricWindow(1_000, 2_000))
    assert row["missingPaths"] == 3


async def test_the_rollup_per_tenant_merges_repos_and_has_no_repo_slug(graph: GraphDB) -> None:
    await _seed_events(graph)
    rollup = await ingestion_rollup(graph, MetricWindow(1_000, 2_000), per="tenant")
    acme = rollup[0]
    assert "repoSlug" not in acme
    assert acme["tenantId"] == "acme"
    assert (acme["eventCount"], acme["errorEvents"], acme["chunksDeleted"]) == (4, 1, 5)
    assert acme["errorRate"] == 0.25
    assert await ingestion_rollup(
        graph, MetricWindow(1_000, 2_000), per="tenant", tenant_id="@zeta"
    ) == [rollup[1]]


async def test_a_rollup_row_carries_every_known_metric(graph: GraphDB) -> None:
    await _seed_events(graph)
    for row in await ingestion_rollup(graph, MetricWindow.ending_at(2_000, length_ms=1_000)):
        assert set(KNOWN_METRICS) <= set(row)


async def test_an_empty_window_rolls_up_to_nothing(graph: GraphDB) -> None:
    await _seed_events(graph)
    assert await ingestion_rollup(graph, MetricWindow(5_000, 6_000)) == []


async def test_the_last_stale_count_is_each_tenants_latest_reconcile_event(
    graph: GraphDB,
) -> None:
    for timestamp, stale in ((1_000, 9), (3_000, 4), (2_000, 6)):
        await record_ingestion_metric(
            graph, tenant_id="acme", repo_slug="a", event_type=EVENT_RECONCILE,
            chunks_total=stale, chunks_deleted=1, timestamp_ms=timestamp,
            detail={"staleCount": stale},
        )
    await record_ingestion_metric(graph, tenant_id="acme", timestamp_ms=9_000)  # not reconcile
    reports = await last_stale_counts(graph)
    assert list(reports) == ["acme"]
    assert reports["acme"].stale_count == 4
    assert reports["acme"].detail == {"staleCount": 4}


def test_the_defaults_are_the_originals() -> None:
    assert (DEFAULT_TENANT_ID, DEFAULT_REPO_SLUG) == ("neo-shared", "neo")


# -- the spool: rows SQLite refused, written by a later pass -----------------------------------


@pytest.mark.sqlite_only(reason="reads SQLite itself (raw SQL, rowid, pragmas or the file)")
async def test_spooled_rows_are_written_once_by_the_next_flush_and_the_spool_goes(
    graph: GraphDB, tmp_path: Path
) -> None:
    spool = MetricSpool(tmp_path / "data" / "telemetry-spool.jsonl")
    rows = [new_metric_row(tenant_id="acme", event_type=EVENT_RECONCILE, chunks_total=5,
                             chunks_deleted=3, detail={"staleCount": 5}, timestamp_ms=1_000),
            new_metric_row(tenant_id="beta", event_type=EVENT_ERROR, timestamp_ms=1_001)]
    await spool.append(rows[:1])
    await spool.append(rows[1:])
    assert spool.pending() == 2
    assert await spool.flush(graph) == 2
    assert not spool.path.exists() and spool.pending() == 0
    assert [(r["tenant"], r["event"], r["total"], r["deleted"]) for r in await _rows(graph)] == [
        ("acme", EVENT_RECONCILE, 5, 3), ("beta", EVENT_ERROR, 0, 0)]
    assert await spool.flush(graph) == 0


@pytest.mark.sqlite_only(reason="reads SQLite itself (raw SQL, rowid, pragmas or the file)")
async def test_a_row_already_written_before_a_crash_is_not_written_twice(
    graph: GraphDB, tmp_path: Path
) -> None:
    """A crash between the insert and the spool's removal: the next flush repeats the rows,
    and their ids keep them single."""
    spool = MetricSpool(tmp_path / "telemetry-spool.jsonl")
    row = new_metric_row(tenant_id="acme", event_type=EVENT_RECONCILE, chunks_deleted=7)
    await spool.append([row])
    await insert_metric_rows(graph, [row])
    assert await spool.flush(graph) == 1
    assert [r["deleted"] for r in await _rows(graph)] == [7]


async def test_a_torn_spool_line_is_logged_with_its_text_and_the_rest_is_written(
    graph: GraphDB, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spool = MetricSpool(tmp_path / "telemetry-spool.jsonl")
    await spool.append([new_metric_row(tenant_id="acme", event_type=EVENT_RECONCILE)])
    with spool.path.open("ab") as handle:
        handle.write(b'{"id": "cut-short", "timest')
    assert await spool.flush(graph) == 1
    assert "telemetry.spool_line_unreadable" in capsys.readouterr().err
    assert not spool.path.exists()


@pytest.mark.sqlite_only(reason="reads SQLite itself (raw SQL, rowid, pragmas or the file)")
async def test_a_flush_that_sqlite_refuses_keeps_the_spool(
    settings: Settings, tmp_path: Path
) -> None:
    import sqlite3

    graph = await open_graph(settings.state, busy_timeout_ms=100)
    spool = MetricSpool(tmp_path / "telemetry-spool.jsonl")
    await spool.append([new_metric_row(tenant_id="acme", event_type=EVENT_RECONCILE)])
    holder = sqlite3.connect(settings.state.graph_db_path, timeout=0)
    holder.execute("BEGIN IMMEDIATE")
    try:
        with pytest.raises(StoreUnavailable):
            await spool.flush(graph)
    finally:
        holder.rollback()
        holder.close()
    assert spool.pending() == 1
    assert await spool.flush(graph) == 1
    await graph.close()


async def test_recorded_repos_name_each_tenants_smallest_repo_in_byte_order(
    graph: GraphDB,
) -> None:
    """The original's reconciler names a tenant by the first row of its rollup, ordered by
    SQLite's byte order: `B` before `a`, whatever the server's collation."""
    for tenant, repo in (("acme", "github.com/a"), ("acme", "Github.com/B"), ("acme", ""),
                         ("beta", "neo"), ("beta", "neo")):
        await record_ingestion_metric(graph, tenant_id=tenant, repo_slug=repo)
    assert await recorded_repos(graph) == {"acme": "Github.com/B", "beta": "neo"}
