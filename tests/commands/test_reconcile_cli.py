"""`python -m daemons.reconcile` as operators run it: one pass, dry runs, the switch, restore,
and the exit codes and one-line errors of CONTRACT."""

from __future__ import annotations

import asyncio
import json
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from core.base.chroma import VectorStore
from core.base.config.config import Settings
from core.base.runtime.config_file import load_config
from core.base.state.state import open_graph
from core.reconcile.rules.archives.format import ArchiveHeader, seal
from tests.support import run_module, seed_acme_drift


def write_config(tmp_path: Path, **keys: Any) -> Path:
    """A config file in tmp_path with `dataDir = "data"` plus the given keys."""
    lines = ["[knowledgeBase]", 'dataDir = "data"']
    lines += [f"{k} = {json.dumps(v)}" for k, v in keys.items()]
    path = tmp_path / "kb.toml"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def settings_of(config: Path) -> Settings:
    return load_config(str(config)).settings


def prepare(config: Path) -> Settings:
    settings = settings_of(config)
    asyncio.run(seed_acme_drift(settings))
    return settings


def chunk_count(settings: Settings) -> int:
    async def count() -> int:
        vectors = await VectorStore.open(settings.chroma)
        try:
            return await vectors.count(settings.chroma.knowledge_base_collection)
        finally:
            await vectors.close()

    return asyncio.run(count())


def run(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_module("daemons.reconcile", *args, home=tmp_path / "home")


def test_a_tick_tombstones_prints_one_json_object_and_restore_puts_the_chunks_back(
    tmp_path: Path,
) -> None:
    config = write_config(tmp_path, reconciliationEnabled=True,
                          reconciliationAutoTombstone=True,
                          reconciliationMaxStaleFraction=1.0)
    settings = prepare(config)

    ticked = run(tmp_path, "--tick", "--json", "--config", str(config))
    assert ticked.returncode == 0, ticked.stderr
    figures = json.loads(ticked.stdout)
    assert figures["tenants"] == [{
        "tenantId": "acme", "repoSlug": "acme/repo", "currentVersion": 4, "scanned": 3,
        "staleCount": 3, "manifestOrphanCount": 0, "totalOrphanCount": 3,
        "missingPathCount": 0, "actionableCount": 2, "heldCount": 0, "tombstonedCount": 2,
        "guard": None, "malformedCount": 0,
    }]
    assert (figures["ok"], figures["failedTenants"], figures["unrecordedRows"]) == (
        True, 0, 0)
    assert "durationMs" in figures and "alerting" not in figures
    assert chunk_count(settings) == 2

    [archive] = figures["archives"]
    restored = run(tmp_path, "restore", archive, "--config", str(config))
    assert restored.returncode == 0, restored.stderr
    assert restored.stdout == (
        f"restored 2, kept live 0, refused 0, unreadable 0 (chunks of tenant acme) from "
        f"{archive}\nheld 2: no pass deletes them until the tenant's version is raised again "
        "or its manifest or yield snapshot replaced; kb-tenants release acme lifts the hold\n")
    assert chunk_count(settings) == 4
    # Idempotent: a second restore changes nothing, and says the chunks are live.
    again = run(tmp_path, "restore", archive, "--config", str(config), "--json")
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout) == {
        "ok": True, "archive": archive, "collection": "neo-knowledge-base", "tenantId": "acme",
        "format": 2, "restored": 0, "keptLive": 2, "refused": 0, "unreadable": 0,
        "problems": [], "warnings": []}
    assert chunk_count(settings) == 4
    assert not (tmp_path / "home").exists(), "nothing may be written under $HOME"


def test_a_dry_run_works_while_disabled_and_writes_nothing(tmp_path: Path) -> None:
    config = write_config(tmp_path, reconciliationAutoTombstone=True,
                          reconciliationMaxStaleFraction=1.0)
    settings = prepare(config)
    before = settings.state.graph_db_path.read_bytes()

    result = run(tmp_path, "--tick", "--dry-run", "--json", "--config", str(config))

    assert result.returncode == 0, result.stderr
    [tenant] = json.loads(result.stdout)["tenants"]
    assert (tenant["actionableCount"], tenant["tombstonedCount"]) == (2, 0)
    assert settings.state.graph_db_path.read_bytes() == before
    assert not settings.tombstones_dir.exists()
    assert chunk_count(settings) == 4


def test_disabled_reconciliation_logs_so_and_exits_zero(tmp_path: Path) -> None:
    config = write_config(tmp_path, reconciliationAutoTombstone=True)
    settings = prepare(config)
    result = run(tmp_path, "--tick", "--json", "--config", str(config))
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["tenants"] == []
    assert "reconciliation disabled" in result.stderr
    assert chunk_count(settings) == 4


def test_a_toml_syntax_error_is_exit_2_with_one_line_naming_file_line_and_column(
    tmp_path: Path,
) -> None:
    config = tmp_path / "kb.toml"
    config.write_text("[knowledgeBase]\nreconciliationEnabled = tru\n", encoding="utf-8")
    result = run(tmp_path, "--tick", "--config", str(config))
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.count("\n") == 1
    assert f"{config}:2:" in result.stderr


def test_an_unknown_flag_is_exit_2_with_one_line(tmp_path: Path) -> None:
    result = run(tmp_path, "--tick", "--frobnicate")
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "--frobnicate" in result.stderr


def test_json_without_tick_is_a_usage_error_because_a_daemon_logs_its_figures(
    tmp_path: Path,
) -> None:
    result = run(tmp_path, "--json", "--config", str(write_config(tmp_path)))
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "--json" in result.stderr


def test_restoring_a_missing_archive_is_exit_2_with_one_line(tmp_path: Path) -> None:
    config = write_config(tmp_path)
    result = run(tmp_path, "restore", str(tmp_path / "nope.jsonl"), "--config", str(config))
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "nope.jsonl: archive not found" in result.stderr


def test_restoring_an_archive_with_a_corrupt_line_names_it_and_exits_2(tmp_path: Path) -> None:
    config = write_config(tmp_path)
    archive = tmp_path / "cut.jsonl"
    header = seal(ArchiveHeader("neo-knowledge-base", "acme", "p1", 1).record())
    line = seal({"format": 2, "kind": "chunk", "collection": "neo-knowledge-base",
                 "tenantId": "acme", "passId": "p1", "archivedAt": 1, "id": "c1",
                 "metadata": {"tenantId": "acme"}, "document": "d", "embedding": [0.5, 0.5]})
    other = line.replace(b'"c1"', b'"c2"')  # edited: the checksum no longer matches
    archive.write_bytes(header + b"\n" + line + b"\n" + other + b"\n" + line[:20] + b"\n")
    result = run(tmp_path, "restore", str(archive), "--config", str(config))
    assert result.returncode == 2
    assert f"{archive}:3: checksum mismatch" in result.stderr
    assert f"{archive}:4: no checksum" in result.stderr
    assert result.stdout.startswith(f"restored 1, kept live 0, refused 0, unreadable 2 "
                                    f"(chunks of tenant acme) from {archive}\nheld 1: ")


def test_a_failing_tenant_prints_the_figures_then_exits_1(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """In-process, because the failure is injected: every Chroma call filtered on `acme`
    raises, as when that tenant's reads time out."""
    from daemons.reconcile import main

    config = write_config(tmp_path, reconciliationEnabled=True)
    prepare(config)
    real = VectorStore._call_on_collection

    def failing(self: VectorStore, name: str, method: str, kwargs: Mapping[str, Any]) -> Any:
        if "acme" in json.dumps(kwargs.get("where")):
            raise ConnectionError("injected failure for acme")
        return real(self, name, method, kwargs)

    monkeypatch.setattr(VectorStore, "_call_on_collection", failing)
    with pytest.raises(SystemExit) as exited:
        main(["--tick", "--json", "--config", str(config)])
    assert exited.value.code == 1
    figures = json.loads(capsys.readouterr().out)
    assert (figures["ok"], figures["failedTenants"]) == (False, 1)


def test_a_tick_runs_the_alerting_pass_after_reconciling_when_alerting_is_on(
    tmp_path: Path,
) -> None:
    config = tmp_path / "kb.toml"
    config.write_text(
        '[knowledgeBase]\ndataDir = "data"\nreconciliationEnabled = true\n'
        "alertingEnabled = true\n"
        '[[knowledgeBase.alertRules]]\nmetric = "reconcileEvents"\nthreshold = 0\n'
        'severity = "warning"\nchannels = ["console"]\n',
        encoding="utf-8",
    )
    prepare(config)
    result = run(tmp_path, "--tick", "--json", "--config", str(config))
    assert result.returncode == 0, result.stderr
    figures = json.loads(result.stdout)
    assert figures["staleCount"] == 3
    assert figures["alerting"]["fired"] == 1


@pytest.mark.parametrize("guard", [
    "reconciliationMaxStaleFraction = 0", "reconciliationMaxStaleFraction = -1",
    "reconciliationMaxStaleFraction = nan", "reconciliationMaxStaleFraction = 1.5",
    "reconciliationMaxDeletesPerTick = -1", 'reconciliationMaxDeletesPerTick = "all"',
])
def test_an_invalid_guard_deletes_nothing_and_says_so(tmp_path: Path, guard: str) -> None:
    config = tmp_path / "kb.toml"
    config.write_text('[knowledgeBase]\ndataDir = "data"\nreconciliationEnabled = true\n'
                      f"reconciliationAutoTombstone = true\n{guard}\n", encoding="utf-8")
    settings = prepare(config)
    result = run(tmp_path, "--tick", "--json", "--config", str(config))
    assert result.returncode == 0, result.stderr
    [tenant] = json.loads(result.stdout)["tenants"]
    assert (tenant["actionableCount"], tenant["tombstonedCount"], tenant["guard"]) == (
        2, 0, "invalid-config")
    assert chunk_count(settings) == 4
    assert "deleting nothing until it is fixed" in result.stderr
    assert "reconcile.guard_config_invalid" in result.stderr


def test_a_pass_whose_telemetry_cannot_be_written_fails_and_the_next_pass_writes_it(
    tmp_path: Path,
) -> None:
    """SQLite held by another connection past busy_timeout while the pass records its row:
    the deletions happened, so the pass must say it failed (exit 1, ok: false) and keep the
    row; the next pass, with the lock gone, writes it."""
    import sqlite3

    config = write_config(tmp_path, reconciliationEnabled=True,
                          reconciliationAutoTombstone=True,
                          reconciliationMaxStaleFraction=1.0)
    settings = prepare(config)
    holder = sqlite3.connect(settings.state.graph_db_path, timeout=0)
    holder.execute("BEGIN IMMEDIATE")
    try:
        locked = run(tmp_path, "--tick", "--json", "--config", str(config))
    finally:
        holder.rollback()
        holder.close()
    assert locked.returncode == 1, locked.stderr[-2000:]
    figures = json.loads(locked.stdout)
    assert (figures["ok"], figures["tombstonedCount"], figures["unrecordedRows"]) == (
        False, 2, 1)
    assert "reconcile.telemetry_unrecorded" in locked.stderr
    assert chunk_count(settings) == 2
    assert settings.telemetry_spool_path.exists()

    async def reconcile_rows() -> list[tuple[Any, ...]]:
        graph = await open_graph(settings.state)
        try:
            return [tuple(r) for r in await graph.query(
                "SELECT tenant_id, chunks_total, chunks_deleted FROM kb_ingestion_metrics "
                "WHERE event_type = 'reconcile' ORDER BY timestamp")]
        finally:
            await graph.close()

    assert asyncio.run(reconcile_rows()) == []
    later = run(tmp_path, "--tick", "--json", "--config", str(config))
    assert later.returncode == 0, later.stderr[-2000:]
    figures = json.loads(later.stdout)
    assert (figures["ok"], figures["spoolFlushed"], figures["unrecordedRows"]) == (True, 1, 0)
    # The missing row (2 deleted) is there now, then this pass's own (nothing left to delete).
    assert asyncio.run(reconcile_rows()) == [("acme", 3, 2), ("acme", 1, 0)]
    assert not settings.telemetry_spool_path.exists()
