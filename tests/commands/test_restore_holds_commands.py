"""A restore stays restored, through the commands as operators run them (CONTRACT "Tombstones"):
`kb-reconcile restore` holds what it put back, the next `--tick` deletes none of it, a raised
version (`kb-tenants set-config`) or `kb-tenants release` lets a later pass delete it again.
Real SQLite file, real embedded Chroma, the real commands."""

from __future__ import annotations

import asyncio
import json
import subprocess
from pathlib import Path
from typing import Any

from core.base.chroma import VectorStore
from core.base.config.config import Settings
from tests.commands.test_reconcile_cli import prepare, write_config
from tests.support import run_module, seed

KB = "neo-knowledge-base"


def command(tmp_path: Path, module: str, *args: str) -> subprocess.CompletedProcess[str]:
    return run_module(module, *args, home=tmp_path / "home")


def tick(tmp_path: Path, config: Path) -> dict[str, Any]:
    done = command(tmp_path, "daemons.reconcile", "--tick", "--json", "--config", str(config))
    assert done.returncode == 0, done.stderr
    figures: dict[str, Any] = json.loads(done.stdout)
    return figures


def restore(tmp_path: Path, config: Path, archive: str) -> subprocess.CompletedProcess[str]:
    done = command(tmp_path, "daemons.reconcile", "restore", archive, "--config", str(config))
    assert done.returncode == 0, done.stderr
    return done


def live(settings: Settings, ids: list[str]) -> set[str]:
    async def read() -> set[str]:
        vectors = await VectorStore.open(settings.chroma)
        try:
            return {r.id for r in await vectors.get_by_ids(KB, ids, include=())}
        finally:
            await vectors.close()

    return asyncio.run(read())


def tombstoning(tmp_path: Path) -> tuple[Path, Settings]:
    config = write_config(tmp_path, reconciliationEnabled=True,
                          reconciliationAutoTombstone=True,
                          reconciliationMaxStaleFraction=1.0)
    return config, prepare(config)


def test_a_restore_stays_restored_until_the_version_is_raised_again(tmp_path: Path) -> None:
    config, settings = tombstoning(tmp_path)
    [archive] = tick(tmp_path, config)["archives"]
    done = command(tmp_path, "daemons.reconcile", "restore", archive, "--config", str(config),
                   "--json")
    assert done.returncode == 0, done.stderr
    restored = json.loads(done.stdout)
    assert (restored["restored"], restored["held"], restored["release"]) == (
        2, 2, "kb-tenants release acme")
    assert live(settings, ["old1", "old2"]) == {"old1", "old2"}

    figures = tick(tmp_path, config)
    assert (figures["tombstonedCount"], figures["archives"]) == (0, [])
    assert figures["tenants"][0]["restoreHeldCount"] == 2
    assert live(settings, ["old1", "old2"]) == {"old1", "old2"}

    # explain shows them held, not "would delete"; status counts them.
    explained = command(tmp_path, "daemons.reconcile", "explain", "acme", "--json",
                        "--config", str(config))
    assert explained.returncode == 0, explained.stderr
    plan = json.loads(explained.stdout)
    marks = {c["id"]: (c.get("restoreHeld"), c["wouldDelete"]) for c in plan["chunks"]}
    assert (marks["old1"], marks["old2"]) == ((True, False), (True, False))
    assert plan["restoreHolds"] == {"chunkCount": 2, "archives": [Path(archive).name],
                                    "release": "kb-tenants release acme"}
    assert plan["guards"]["wouldDelete"] == 0
    text = command(tmp_path, "daemons.reconcile", "explain", "acme", "--config", str(config))
    assert "held (restored)" in text.stdout and "kb-tenants release acme" in text.stdout
    status = command(tmp_path, "daemons.status", "--json", "--config", str(config))
    assert status.returncode == 0, status.stderr
    assert json.loads(status.stdout)["tenants"][0]["restoreHeldCount"] == 2
    shown = command(tmp_path, "daemons.status", "--config", str(config))
    assert "restore-held" in shown.stdout and "kb-tenants release acme" in shown.stdout

    raised = command(tmp_path, "daemons.tenants", "set-config", "acme", "--config", str(config))
    assert raised.returncode == 0, raised.stderr
    figures = tick(tmp_path, config)
    assert figures["tombstonedCount"] == 3  # old1, old2 and grace (stale by 2 now)
    assert live(settings, ["old1", "old2"]) == set()
    assert not (tmp_path / "home").exists(), "nothing may be written under $HOME"


def test_release_lifts_the_hold_and_the_next_pass_deletes_them(tmp_path: Path) -> None:
    config, settings = tombstoning(tmp_path)
    [archive] = tick(tmp_path, config)["archives"]
    restore(tmp_path, config, archive)
    name = Path(archive).name

    other = command(tmp_path, "daemons.tenants", "release", "acme", "--archive", "other.jsonl",
                    "--config", str(config))
    assert other.returncode == 0, other.stderr
    assert other.stdout == (f"acme: no held chunks from other.jsonl, nothing to release "
                            f"(its holds come from {name})\n")
    released = command(tmp_path, "daemons.tenants", "release", "acme", "--config", str(config),
                       "--json")
    assert released.returncode == 0, released.stderr
    assert json.loads(released.stdout) == {"tenantId": "acme", "archive": None, "released": 2}
    again = command(tmp_path, "daemons.tenants", "release", "acme", "--config", str(config))
    assert (again.returncode, again.stdout) == (0, "acme: no held chunks, nothing to release\n")

    assert tick(tmp_path, config)["tombstonedCount"] == 2
    assert live(settings, ["old1", "old2"]) == set()


def test_release_of_one_archive_lifts_only_its_chunks_holds(tmp_path: Path) -> None:
    config, settings = tombstoning(tmp_path)
    [first] = tick(tmp_path, config)["archives"]
    restore(tmp_path, config, first)

    async def seed_another() -> None:
        vectors = await VectorStore.open(settings.chroma)
        try:
            await seed(vectors, KB, [("old0", {"tenantId": "acme", "tenantConfigVersion": 1,
                                               "ingestedAt": 1_000})])
        finally:
            await vectors.close()

    asyncio.run(seed_another())
    [second] = tick(tmp_path, config)["archives"]  # old0 alone: old1, old2 are held
    restore(tmp_path, config, second)

    released = command(tmp_path, "daemons.tenants", "release", "acme", "--archive", second,
                       "--config", str(config))
    assert released.returncode == 0, released.stderr
    assert released.stdout.startswith(f"acme: released 1 held chunk(s) from {Path(second).name}")

    assert tick(tmp_path, config)["tombstonedCount"] == 1
    assert live(settings, ["old0", "old1", "old2"]) == {"old1", "old2"}


def test_release_of_an_unknown_tenant_is_exit_2_naming_the_known_ones(tmp_path: Path) -> None:
    config, _ = tombstoning(tmp_path)
    done = command(tmp_path, "daemons.tenants", "release", "acmee", "--config", str(config))
    assert done.returncode == 2
    [line] = done.stderr.splitlines()
    assert "acmee" in line and "acme" in line.replace("acmee", "")
