"""Pruning old archives (`archiveMaxAgeMs`, issue 34) through the retention job, as
`kb-reconcile gc` runs it: archives older than the age go, each tenant's newest stays however
old, a corrupt one is kept and logged, a dry run removes nothing, and the default keeps every
archive. The archives are written by the archive writer itself, dated in the past; real
SQLite and embedded Chroma. Commands run in-process."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from core.base.rules.rows import ColumnPage
from core.reconcile.stores.archives.files import TombstoneArchive, sync_archives
from daemons import reconcile
from tests.support import log_events

KB = "neo-knowledge-base"
DAY = 86_400_000


def now_ms() -> int:
    return int(time.time() * 1000)


def write_archive(folder: Path, tenant: str, *, days_ago: int) -> Path:
    """One archive of two chunks of `tenant`, created `days_ago` days ago."""
    created = now_ms() - days_ago * DAY
    ids = [f"{tenant}-{days_ago}-{i}" for i in range(2)]
    archive = TombstoneArchive.new_unsynced(
        folder, collection=KB, tenant_id=tenant, pass_id=f"pass-{days_ago}", now_ms=created,
        first_page=ColumnPage(ids, [{"tenantId": tenant} for _ in ids],
                              ["doc" for _ in ids], [[0.5, 0.25] for _ in ids]))
    sync_archives([archive])
    return archive.path


@pytest.fixture()
def folder(tmp_path: Path) -> dict[str, Path]:
    """acme: archives 30, 10 and 1 day old; beta: 20 and 2; gamma: one, 40 days old; a
    corrupt acme archive 50 days old (a torn last line); and a file with no header."""
    tombstones = tmp_path / "data" / "tombstones"
    made = {f"{tenant}-{days}": write_archive(tombstones, tenant, days_ago=days)
            for tenant, days in (("acme", 30), ("acme", 10), ("acme", 1), ("beta", 20),
                                 ("beta", 2), ("gamma", 40), ("acme", 50))}
    with made["acme-50"].open("ab") as handle:
        handle.write(b'{"format":2,"kind":"chunk","id":"torn\n')
    made["no-header"] = tombstones / "garbage.jsonl"
    made["no-header"].write_bytes(b"not an archive\n")
    return made


def gc(tmp_path: Path, *lines: str, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    config = tmp_path / "kb.toml"
    enabled = [] if any(line.startswith("gcEnabled") for line in lines) else ["gcEnabled = true"]
    config.write_text("\n".join(["[knowledgeBase]", f'dataDir = "{tmp_path / "data"}"',
                                 *enabled, *lines]) + "\n")
    with pytest.raises(SystemExit) as stopped:
        reconcile.main(["gc", "--json", "--config", str(config)]
                       + (["--dry-run"] if "# dry run" in lines else []))
    out, err = capsys.readouterr()
    assert stopped.value.code == 0, out
    figures: dict[str, Any] = json.loads(out)
    assert figures["ok"] is True
    logged = tmp_path / "gc.log"
    logged.write_text(err)
    return figures


def remaining(made: dict[str, Path]) -> set[str]:
    return {key for key, path in made.items() if path.exists()}


def test_old_archives_go_and_each_tenants_newest_stays(
        tmp_path: Path, folder: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    figures = gc(tmp_path, f"archiveMaxAgeMs = {7 * DAY}", capsys=capsys)
    assert remaining(folder) == {"acme-1", "beta-2", "gamma-40", "acme-50", "no-header"}
    local = figures["archives"]["local"]
    assert sorted(local["pruned"]) == sorted(str(folder[k]) for k in ("acme-30", "acme-10",
                                                                       "beta-20"))
    assert local["kept"] == [str(folder["acme-50"])], "a corrupt archive is never pruned"
    assert figures["archives"]["maxAgeMs"] == 7 * DAY and "shared" not in figures["archives"]
    pruned = log_events(tmp_path / "gc.log", "gc.archive_pruned")
    assert sorted(e["archive"] for e in pruned) == sorted(local["pruned"])
    [kept] = log_events(tmp_path / "gc.log", "gc.archive_kept")
    assert kept["archive"] == str(folder["acme-50"])
    assert kept["problem"].startswith("1 unreadable line")

    again = gc(tmp_path, "archiveMaxAgeMs = 1", capsys=capsys)
    assert again["archives"]["local"]["pruned"] == [], "only each tenant's newest is left"
    assert remaining(folder) == {"acme-1", "beta-2", "gamma-40", "acme-50", "no-header"}


def test_the_default_keeps_every_archive(tmp_path: Path, folder: dict[str, Path],
                                         capsys: pytest.CaptureFixture[str]) -> None:
    figures = gc(tmp_path, capsys=capsys)
    assert "archives" not in figures
    assert remaining(folder) == set(folder)
    assert "archives" not in gc(tmp_path, "archiveMaxAgeMs = -5", capsys=capsys)
    assert remaining(folder) == set(folder), "an invalid age takes the default: keep all"


def test_a_dry_run_names_what_it_would_prune_and_removes_nothing(
        tmp_path: Path, folder: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    figures = gc(tmp_path, f"archiveMaxAgeMs = {7 * DAY}", "# dry run", capsys=capsys)
    local = figures["archives"]["local"]
    assert len(local["expired"]) == 4 and local["pruned"] == []
    assert local["kept"] == [str(folder["acme-50"])]
    assert remaining(folder) == set(folder)
    with pytest.raises(SystemExit):
        reconcile.main(["gc", "--dry-run", "--config", str(tmp_path / "kb.toml")])
    assert "; archives: 3 would be pruned, 1 kept (cannot be read whole: see the log)" in (
        capsys.readouterr().out)


def test_a_disabled_retention_job_prunes_nothing(tmp_path: Path, folder: dict[str, Path],
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    figures = gc(tmp_path, "gcEnabled = false", f"archiveMaxAgeMs = {DAY}", capsys=capsys)
    assert figures["enabled"] is False and "archives" not in figures
    assert remaining(folder) == set(folder)
