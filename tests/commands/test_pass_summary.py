"""A pass's summary on a terminal answers first: the tenants with drift are named (most first),
the clean ones counted, the archives it wrote named, and what is left says every kind of
chunk that stays. Commands run in-process on a real embedded Chroma and SQLite."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from daemons import reconcile, tenants
from tests.support import make_settings, seed

KB = "neo-knowledge-base"


def chunk(row_id: str, tenant: str, stamp: int) -> tuple[str, dict[str, Any]]:
    return row_id, {"tenantId": tenant, "repoSlug": f"{tenant}/kb", "sourcePath": f"{row_id}.md",
                    "tenantConfigVersion": stamp, "ingestedAt": 1_000}


async def _seed(tmp_path: Path, rows: Sequence[tuple[str, dict[str, Any]]]) -> None:
    from core.base.chroma import VectorStore

    vectors = await VectorStore.open(make_settings(tmp_path).chroma)
    try:
        await seed(vectors, KB, list(rows))
    finally:
        await vectors.close()


def run(main: Any, *argv: str, capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as stopped:
        main(list(argv))
    out = capsys.readouterr().out
    assert stopped.value.code == 0, out
    return out


@pytest.fixture()
def kb(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> str:
    """Three tenants: `aaa-clean` (nothing stale), `drifted` (3 stale) and `slight` (1 stale,
    1 orphaned by its manifest)."""
    config = tmp_path / "kb.toml"
    config.write_text(f'[knowledgeBase]\ndataDir = "{tmp_path / "data"}"\n'
                      "reconciliationEnabled = true\nreconciliationMaxStaleFraction = 1.0\n"
                      "reconciliationOrphanVersionGap = 1\n")
    for tenant, raises in (("aaa-clean", 1), ("drifted", 2), ("slight", 2)):
        for _ in range(raises):
            run(tenants.main, "set-config", tenant, "--repo-slug", f"{tenant}/kb",
                "--config", str(config), capsys=capsys)
    asyncio.run(_seed(tmp_path, [chunk("c0", "aaa-clean", 1)]
                      + [chunk(f"d{i}", "drifted", 1) for i in range(3)]
                      + [chunk("s0", "slight", 1), chunk("s1", "slight", 2),
                         chunk("s2", "slight", 2)]))
    paths = tmp_path / "paths.txt"
    paths.write_text("s0.md\ns1.md\n")  # s2.md left the repo: an orphan by path
    run(tenants.main, "set-manifest", "slight", "--repo-slug", "slight/kb", "--paths-file",
        str(paths), "--config", str(config), capsys=capsys)
    return str(config)


def test_the_drifted_tenants_are_named_most_first_and_the_clean_ones_counted(
        kb: str, capsys: pytest.CaptureFixture[str]) -> None:
    out = run(reconcile.main, "--tick", "--config", kb, capsys=capsys)
    lines = out.splitlines()
    named = [line.split(":")[0].strip() for line in lines if line.startswith("  ")
             and ": version" in line]
    assert named == ["drifted", "slight"], out
    assert "  1 tenant clean" in lines
    assert any(line.startswith("left: 5 chunks (4 stale, 1 orphaned by path) stay until "
                              "reconciliationAutoTombstone")
               for line in lines), out


def test_a_tombstoning_pass_names_each_archive_it_wrote(
        kb: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with open(kb, "a") as file:
        file.write("reconciliationAutoTombstone = true\n")
    out = run(reconcile.main, "--tick", "--config", kb, capsys=capsys)
    archives = [line.removeprefix("  archive: ") for line in out.splitlines()
                if line.startswith("  archive: ")]
    assert len(archives) == 2, out
    assert all(Path(path).is_file() and Path(path).parent == tmp_path / "data" / "tombstones"
               for path in archives)
