"""`kb-status --health`: the original's `KB Multi-Tenant Health` view.

The pure formatter is held to the original's own cases (its `KbTenantHealthHelper` spec: lines,
rounding, defaults, the window label); the read runs on both backends; the command runs as an
operator runs it, over a real SQLite file with seeded telemetry rows.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from core.alerting.rules.health import (
    DAY_MS,
    DEFAULT_HEALTH_DAYS,
    HealthRow,
    format_error_rate,
    health_row,
    markdown_section,
    parse_days,
    window_start,
)
from core.alerting.stores.health import health_rollup
from core.base.config.config import Settings
from core.base.io.clock import now_ms
from core.base.rules.telemetry import build_metric_row
from core.base.state.graph_db import GraphDB
from core.base.state.state import open_graph
from core.base.state.telemetry import insert_metric_rows
from tests.support import make_settings, run_module

pytestmark = pytest.mark.both_backends


def rollup(tenant: str, repo: str, *, events: int = 0, ingest: int = 0, tombstone: int = 0,
           reconcile: int = 0, errors: int = 0, embedded: int = 0,
           deleted: int = 0) -> HealthRow:
    """A row as the statement returns it (KNOWN_METRICS order, chunksTotal and missingPaths
    last, which the view does not show)."""
    return health_row(tenant, repo,
                      (events, ingest, tombstone, reconcile, errors, embedded, deleted, 99, 5))


#: The original spec's two-tenant fixture.
TWO_TENANTS = (
    rollup("tenant-a", "neomjs/create-app", events=12, ingest=9, tombstone=2, errors=1,
           embedded=340, deleted=18),
    rollup("neo-shared", "neo", events=4, ingest=4, embedded=88),
)


# --- the pure view: the original's format and rounding --------------------------------------


def test_the_section_has_the_originals_heading_intro_header_and_alignment_row() -> None:
    lines = markdown_section(TWO_TENANTS).split("\n")
    assert lines[:6] == [
        "## KB Multi-Tenant Health",
        "",
        "Per-tenant Knowledge Base ingestion telemetry, rolled up from `kb_ingestion_metrics` "
        "(#11639).",
        "",
        "| Tenant | Repo | Events | Ingest | Tombstone | Reconcile | Errors | Error rate | "
        "Embedded | Deleted |",
        "|---|---|--:|--:|--:|--:|--:|--:|--:|--:|",
    ]
    assert lines[-1] == ""


def test_one_line_per_tenant_and_repo_as_the_original_prints_it() -> None:
    section = markdown_section(TWO_TENANTS)
    data = [line for line in section.split("\n") if line.startswith("| `")]
    assert data == [
        "| `tenant-a` | `neomjs/create-app` | 12 | 9 | 2 | 0 | 1 | 8.3% | 340 | 18 |",
        "| `neo-shared` | `neo` | 4 | 4 | 0 | 0 | 0 | 0.0% | 88 | 0 |",
    ]


def test_the_window_label_goes_in_the_intro_line_only_when_given() -> None:
    assert "ingestion telemetry (last 7 days), rolled up from" in markdown_section(
        TWO_TENANTS, label="last 7 days")
    assert "ingestion telemetry, rolled up from" in markdown_section(TWO_TENANTS)


def test_an_empty_rollup_is_no_section_as_in_the_original() -> None:
    assert markdown_section([]) == ""


@pytest.mark.parametrize(("errors", "events", "shown"), [
    (1, 4, "25.0%"), (2, 2, "100.0%"), (0, 3, "0.0%"), (1, 12, "8.3%"), (1, 3, "33.3%"),
    (2, 3, "66.7%"), (0, 0, "0.0%"),
    # Exact halves: JavaScript's toFixed rounds them up, Python's format to even (6.2%, 31.2%).
    (1, 16, "6.3%"), (5, 16, "31.3%"), (1, 80, "1.3%"),
])
def test_the_error_rate_is_a_percentage_to_one_decimal_rounded_as_javascripts_to_fixed(
    errors: int, events: int, shown: str,
) -> None:
    row = rollup("t", "r", events=events, errors=errors)
    assert row.error_rate_shown == shown
    assert format_error_rate(row.error_rate) == shown
    assert row.error_rate == (errors / events if events else 0.0)


def test_missing_figures_are_zero_never_none_or_nan() -> None:
    row = health_row("t-sparse", "r-sparse", (None,) * 9)
    line = markdown_section([row]).split("\n")[-2]
    assert line == "| `t-sparse` | `r-sparse` | 0 | 0 | 0 | 0 | 0 | 0.0% | 0 | 0 |"


def test_a_pipe_or_backtick_in_a_slug_cannot_break_the_table() -> None:
    line = markdown_section([rollup("t", "a|b`c", events=1)]).split("\n")[-2]
    assert line.startswith("| `t` | `` a\\|b`c `` | 1 |")
    assert line.count(" | ") == 9


@pytest.mark.parametrize("text", ["0", "-1", "1.5", "abc", "", " 7", "1e3", "\u0663"])
def test_days_is_a_whole_number_of_at_least_one(text: str) -> None:
    with pytest.raises(ValueError, match="whole number of days >= 1"):
        parse_days(text)


def test_the_window_starts_days_before_now_and_a_huge_one_reaches_the_oldest_storable() -> None:
    assert (parse_days("1"), parse_days("30")) == (1, 30)
    assert DEFAULT_HEALTH_DAYS == 7
    assert window_start(10 * DAY_MS, 7) == 3 * DAY_MS
    assert window_start(10 * DAY_MS, 10**30) == -(2**63)


# --- the read, on both backends -------------------------------------------------------------


async def insert_events(graph: GraphDB, events: Sequence[tuple[int, str, str, str, int, int]]
                        ) -> None:
    """(timestamp, tenant, repo, event, embedded, deleted) rows, written as the recorder does."""
    await insert_metric_rows(graph, [
        build_metric_row(row_id=f"m{i}", timestamp_ms=ts, tenant_id=tenant, repo_slug=repo,
                         event_type=event, chunks_embedded=embedded, chunks_deleted=deleted,
                         chunks_total=1000)
        for i, (ts, tenant, repo, event, embedded, deleted) in enumerate(events)
    ])


async def test_the_read_counts_from_the_window_start_inclusive_with_no_upper_bound(
    graph: GraphDB,
) -> None:
    since = 1_000_000
    await insert_events(graph, [
        (since - 1, "tenant-a", "r1", "ingest", 500, 0),         # just before: left out
        (since, "tenant-a", "r1", "ingest", 50, 0),              # at the start: counted
        (since + 10, "tenant-a", "r1", "error", 0, 0),
        (since + 10**12, "tenant-a", "r1", "tombstone", 0, 7),   # future-dated: counted
        (since + 5, "tenant-a", "r0", "reconcile", 0, 2),
        (since + 5, "Tenant-B", "z", "ingest", 3, 0),
    ])
    rows = await health_rollup(graph, since)
    assert [(r.tenant_id, r.repo_slug) for r in rows] == [
        ("Tenant-B", "z"), ("tenant-a", "r0"), ("tenant-a", "r1")]  # bytewise on both
    r1 = rows[2]
    assert (r1.event_count, r1.ingest_events, r1.tombstone_events, r1.reconcile_events,
            r1.error_events, r1.chunks_embedded, r1.chunks_deleted) == (3, 1, 1, 0, 1, 50, 7)
    assert r1.error_rate_shown == "33.3%"
    assert rows[1].reconcile_events == 1 and rows[1].chunks_deleted == 2
    assert await health_rollup(graph, since + 10**13) == []


# --- the command, over a real SQLite file ---------------------------------------------------


def write_config(folder: Path) -> Path:
    config = folder / "kb.toml"
    config.write_text('[knowledgeBase]\ndataDir = "data"\n')
    return config


def health(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_module("daemons.status", "--config", str(folder / "kb.toml"), "--health", *args,
                      home=folder / "home")


def snapshot(folder: Path) -> dict[str, bytes]:
    """Every file's bytes, but SQLite's own `-shm` index a WAL reader maps (not content) and an
    empty `-wal` (a reader leaves one; a write would fill it)."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file() and not p.name.endswith("-shm")
            and not (p.name.endswith("-wal") and p.stat().st_size == 0)}


@pytest.fixture
async def seeded(tmp_path: Path) -> Path:
    """The original's integration case (tenant-blue: 2 ingests and an error; tenant-green: a
    tombstone of 7), now-ish, plus tenant-old 2 days back and tenant-stale 8 days back."""
    write_config(tmp_path)
    (tmp_path / "home").mkdir()
    settings: Settings = make_settings(tmp_path)
    now, minute = now_ms(), 60_000
    graph = await open_graph(settings.state)
    try:
        await insert_events(graph, [
            (now - minute, "tenant-blue", "blue-svc", "ingest", 50, 0),
            (now - minute, "tenant-blue", "blue-svc", "ingest", 30, 0),
            (now - minute, "tenant-blue", "blue-svc", "error", 0, 0),
            (now - minute, "tenant-green", "green-svc", "tombstone", 0, 7),
            (now - 2 * DAY_MS, "tenant-old", "old-svc", "ingest", 4, 0),
            (now - 8 * DAY_MS, "tenant-stale", "r-stale", "ingest", 9, 0),
        ])
    finally:
        await graph.close()
    return tmp_path


BLUE = "| `tenant-blue` | `blue-svc` | 3 | 2 | 0 | 0 | 1 | 33.3% | 80 | 0 |"
GREEN = "| `tenant-green` | `green-svc` | 1 | 0 | 1 | 0 | 0 | 0.0% | 0 | 7 |"
OLD = "| `tenant-old` | `old-svc` | 1 | 1 | 0 | 0 | 0 | 0.0% | 4 | 0 |"


def test_markdown_is_the_originals_section_over_the_default_week(seeded: Path) -> None:
    before = snapshot(seeded)
    done = health(seeded, "--markdown")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.split("\n")
    assert lines[0] == "## KB Multi-Tenant Health"
    assert "ingestion telemetry (last 7 days), rolled up from" in lines[2]
    assert [line for line in lines if line.startswith("| `")] == [BLUE, GREEN, OLD]
    assert "tenant-stale" not in done.stdout
    assert snapshot(seeded) == before  # never writes


def test_text_is_a_table_with_the_same_figures(seeded: Path) -> None:
    done = health(seeded)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("KB Multi-Tenant Health (last 7 days, since ")
    header = next(line for line in done.stdout.splitlines() if line.startswith("Tenant"))
    assert header.split() == ["Tenant", "Repo", "Events", "Ingest", "Tombstone", "Reconcile",
                              "Errors", "Error", "rate", "Embedded", "Deleted"]
    rows = {line.split()[0]: line.split()[1:] for line in done.stdout.splitlines()
            if line.startswith("tenant-")}
    assert rows == {"tenant-blue": ["blue-svc", "3", "2", "0", "0", "1", "33.3%", "80", "0"],
                    "tenant-green": ["green-svc", "1", "0", "1", "0", "0", "0.0%", "0", "7"],
                    "tenant-old": ["old-svc", "1", "1", "0", "0", "0", "0.0%", "4", "0"]}


def test_json_is_one_object_with_every_figure(seeded: Path) -> None:
    done = health(seeded, "--json", "--days", "9")
    assert done.returncode == 0, done.stderr
    assert len(done.stdout.splitlines()) == 1
    report: dict[str, Any] = json.loads(done.stdout)
    assert report["days"] == 9
    assert report["sinceMs"] == report["generatedAt"] - 9 * DAY_MS
    blue = report["rows"][0]
    assert blue == {"tenantId": "tenant-blue", "repoSlug": "blue-svc", "eventCount": 3,
                    "ingestEvents": 2, "tombstoneEvents": 0, "reconcileEvents": 0,
                    "errorEvents": 1, "errorRate": 1 / 3, "errorRatePercent": "33.3%",
                    "chunksEmbedded": 80, "chunksDeleted": 0}
    assert [r["tenantId"] for r in report["rows"]] == [
        "tenant-blue", "tenant-green", "tenant-old", "tenant-stale"]


def test_days_narrows_the_window(seeded: Path) -> None:
    one = health(seeded, "--markdown", "--days", "1")
    assert one.returncode == 0, one.stderr
    assert [line for line in one.stdout.split("\n") if line.startswith("| `")] == [BLUE, GREEN]
    assert "(last 1 day)" in one.stdout


@pytest.mark.parametrize("days", ["0", "-1", "1.5", "abc", ""])
def test_a_bad_days_is_a_usage_error_with_one_line_and_one_json_object(
    seeded: Path, days: str,
) -> None:
    text = health(seeded, "--days", days)
    assert text.returncode == 2 and text.stdout == ""
    assert len(text.stderr.splitlines()) == 1 and "--days" in text.stderr
    as_json = health(seeded, "--json", f"--days={days}")
    assert as_json.returncode == 2
    assert json.loads(as_json.stdout)["ok"] is False and len(as_json.stdout.splitlines()) == 1


@pytest.mark.parametrize("args", [("--days", "3"), ("--markdown",)])
def test_health_flags_without_health_are_usage_errors(tmp_path: Path,
                                                      args: tuple[str, ...]) -> None:
    write_config(tmp_path)
    done = run_module("daemons.status", "--config", str(tmp_path / "kb.toml"), *args,
                      home=tmp_path / "home")
    assert done.returncode == 2 and "only with --health" in done.stderr
    assert len(done.stderr.splitlines()) == 1


def test_markdown_and_json_together_are_a_usage_error(seeded: Path) -> None:
    done = health(seeded, "--markdown", "--json")
    assert done.returncode == 2
    assert json.loads(done.stdout)["ok"] is False


def test_an_empty_window_says_so_in_every_form(tmp_path: Path) -> None:
    write_config(tmp_path)
    (tmp_path / "home").mkdir()
    # No database at all: an empty window, and nothing is created.
    done = health(tmp_path, "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["rows"] == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["home", "kb.toml"]
    text = health(tmp_path)
    assert text.returncode == 0 and "No telemetry events in the last 7 days" in text.stdout
    markdown = health(tmp_path, "--markdown")
    assert markdown.returncode == 0
    assert markdown.stdout.startswith("## KB Multi-Tenant Health\n\nNo telemetry events in the "
                                      "last 7 days")
    assert "| `" not in markdown.stdout


async def test_a_database_with_only_older_events_is_an_empty_window(tmp_path: Path) -> None:
    write_config(tmp_path)
    (tmp_path / "home").mkdir()
    graph = await open_graph(make_settings(tmp_path).state)
    try:
        await insert_events(graph, [(now_ms() - 8 * DAY_MS, "tenant-stale", "r", "ingest", 9, 0)])
    finally:
        await graph.close()
    week = health(tmp_path, "--json")
    assert week.returncode == 0, week.stderr
    assert json.loads(week.stdout)["rows"] == []
    text = health(tmp_path)
    assert "No telemetry events in the last 7 days" in text.stdout
    assert "tenant-stale" not in text.stdout
    nine = health(tmp_path, "--json", "--days", "9")
    assert [r["tenantId"] for r in json.loads(nine.stdout)["rows"]] == ["tenant-stale"]
