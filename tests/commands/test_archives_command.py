"""`kb-reconcile archives [TENANT] [--json]` lists what the files hold, and `kb-status` shows the
archive folder (issue 34): a real pass archives for two tenants on a real embedded Chroma and
SQLite, then the listing is checked against the files themselves. Commands run in-process."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from core.reconcile.archives.listing import list_archives
from core.reconcile.reports.archives import render_archives
from core.reconcile.rules.archives.format import seal, withdrawn_line
from core.reconcile.rules.archives.listing import NO_HEADER
from core.suite.status import gather_status
from core.suite.status_text import render_status_text
from daemons import reconcile, status, tenants
from tests.chroma_server import free_port
from tests.support import make_settings, read_archived_chunks, run_module, seed

KB = "neo-knowledge-base"
#: Stale chunks per tenant (stamped 1; each tenant is at version 2 with a gap of 1).
STALE = {"acme": 2, "beta": 3}


def run(main: Any, *argv: str, capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as stopped:
        main(list(argv))
    out = capsys.readouterr().out
    assert stopped.value.code == 0, out
    return out


def listing(config: str, *argv: str, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    shown: dict[str, Any] = json.loads(
        run(reconcile.main, "archives", *argv, "--json", "--config", config, capsys=capsys))
    assert shown["ok"] is True
    return shown


async def _seed(tmp_path: Path, rows: Sequence[tuple[str, dict[str, Any]]]) -> None:
    from core.base.chroma import VectorStore

    vectors = await VectorStore.open(make_settings(tmp_path).chroma)
    try:
        await seed(vectors, KB, list(rows))
    finally:
        await vectors.close()


@pytest.fixture()
def archived(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> str:
    """Two tenants whose stale chunks one pass tombstoned: one archive each."""
    config = tmp_path / "kb.toml"
    config.write_text(f'[knowledgeBase]\ndataDir = "{tmp_path / "data"}"\n'
                      "reconciliationEnabled = true\nreconciliationMaxStaleFraction = 1.0\n"
                      "reconciliationOrphanVersionGap = 1\nreconciliationAutoTombstone = true\n")
    for tenant in STALE:
        for _ in range(2):
            run(tenants.main, "set-config", tenant, "--repo-slug", f"{tenant}/kb",
                "--config", str(config), capsys=capsys)
    asyncio.run(_seed(tmp_path, [
        (f"{tenant}-{i}", {"tenantId": tenant, "repoSlug": f"{tenant}/kb",
                           "sourcePath": f"{i}.md", "tenantConfigVersion": 1,
                           "ingestedAt": 1_000 + i})
        for tenant, count in STALE.items() for i in range(count)]))
    figures = json.loads(run(reconcile.main, "--tick", "--json", "--config", str(config),
                             capsys=capsys))
    assert figures["tombstonedCount"] == sum(STALE.values())
    assert len(figures["archives"]) == len(STALE)
    return str(config)


def folder_of(config: str) -> Path:
    return Path(config).parent / "data" / "tombstones"


def test_the_listing_matches_the_files(archived: str,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    shown = listing(archived, capsys=capsys)
    files = sorted(folder_of(archived).iterdir())
    assert sorted(a["name"] for a in shown["archives"]) == [f.name for f in files]
    assert shown["shared"] is False and shown["tenantId"] is None
    for archive in shown["archives"]:
        path = Path(archive["path"])
        chunks = list(read_archived_chunks(path))
        header = chunks[0][0]
        assert header is not None
        assert archive == {**archive, "where": "local", "tenantId": header.tenant_id,
                           "createdAt": header.created_at_ms, "collection": KB,
                           "chunks": STALE[header.tenant_id], "restorable": len(chunks),
                           "withdrawn": 0, "unreadable": 0, "bytes": path.stat().st_size}
        assert "problem" not in archive
    text = run(reconcile.main, "archives", "--config", archived, capsys=capsys)
    for archive in shown["archives"]:
        assert archive["name"] in text and archive["createdAtIso"] in text


def test_a_tenant_lists_only_its_own_archives(archived: str,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    shown = listing(archived, "@beta", capsys=capsys)
    assert shown["tenantId"] == "beta"
    assert [(a["tenantId"], a["chunks"]) for a in shown["archives"]] == [("beta", 3)]
    assert listing(archived, "nobody", capsys=capsys)["archives"] == []
    text = run(reconcile.main, "archives", "nobody", "--config", archived, capsys=capsys)
    assert text.startswith("No archives of tenant nobody")


def test_a_corrupt_archive_is_listed_with_its_problem(archived: str,
                                                      capsys: pytest.CaptureFixture[str]
                                                      ) -> None:
    folder = folder_of(archived)
    (folder / "garbage.jsonl").write_bytes(b"not an archive\n")
    acme = next(p for p in folder.iterdir() if "-acme-" in p.name)
    with acme.open("ab") as handle:  # a line torn by a crash, and one edited by hand
        handle.write(seal({"kind": "chunk", "id": "x"})[:-10] + b"\n")
    shown = {a["name"]: a for a in listing(archived, "acme", capsys=capsys)["archives"]}
    assert set(shown) == {acme.name, "garbage.jsonl"}, "an unreadable tenant is listed too"
    assert shown["garbage.jsonl"]["problem"] == NO_HEADER
    assert shown["garbage.jsonl"]["tenantId"] is None
    assert shown[acme.name]["unreadable"] == 1
    assert shown[acme.name]["problem"].startswith("1 unreadable line (first: line 4: ")
    assert shown[acme.name]["restorable"] == 2, "the readable lines still count"


def test_withdrawn_chunks_are_not_restorable(archived: str,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    folder = folder_of(archived)
    beta = next(p for p in folder.iterdir() if "-beta-" in p.name)
    [(header, _), *_] = read_archived_chunks(beta)
    assert header is not None
    with beta.open("ab") as handle:
        handle.write(withdrawn_line(header, ["beta-0"], withdrawn_at_ms=5) + b"\n")
    [archive] = listing(archived, "beta", capsys=capsys)["archives"]
    assert (archive["chunks"], archive["restorable"], archive["withdrawn"]) == (3, 2, 1)


async def test_the_text_fits_80_columns_with_every_name_and_time_whole(
        archived: str) -> None:
    shown = await list_archives(make_settings(Path(archived).parent))
    text = render_archives(shown, width=80)
    assert max(len(line) for line in text.splitlines()) <= 80
    words = set(text.split())
    for archive in shown.archives:
        assert {archive.name, str(archive.created_at_iso)} <= words
    assert any(line.split()[:2] == ["tenant", "created"]
               for line in render_archives(shown).splitlines()), "a table off a terminal"
    if len(f"{shown.folder})") <= 80:  # a word longer than the page cannot be whole
        assert f"{shown.folder})" in words, "the folder's path is not cut in two either"


def test_status_shows_the_folder_its_size_and_the_newest_archive(
        archived: str, capsys: pytest.CaptureFixture[str]) -> None:
    files = list(folder_of(archived).iterdir())
    shown = json.loads(run(status.main, "--json", "--config", archived, capsys=capsys))
    archives = shown["archives"]
    assert archives["path"] == str(folder_of(archived)) and archives["present"] is True
    assert archives["count"] == 2 and archives["bytes"] == sum(f.stat().st_size for f in files)
    newest = max(files, key=lambda f: (f.stat().st_mtime_ns, f.name))
    [(header, _), *_] = read_archived_chunks(newest)
    assert header is not None
    assert archives["newest"] == {"name": newest.name, "tenantId": header.tenant_id,
                                  "createdAt": header.created_at_ms,
                                  "createdAtIso": archives["newest"]["createdAtIso"]}
    text = run(status.main, "--config", archived, capsys=capsys)
    assert f"Archives: 2 files, {archives['bytes']:,} bytes; newest {newest.name}" in text


async def test_status_of_no_archives_says_none_yet(tmp_path: Path) -> None:
    report = await gather_status(make_settings(tmp_path))
    assert (report.archives.present, report.archives.count, report.archives.newest) == (
        False, 0, None)
    assert "Archives: none yet" in render_status_text(report)


def test_archives_on_a_data_folder_that_does_not_exist_creates_nothing(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "kb.toml"
    config.write_text('[knowledgeBase]\ndataDir = "data"\n')
    assert listing(str(config), capsys=capsys)["archives"] == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kb.toml"]


@pytest.mark.parametrize(("config", "flags", "code"), [
    ('dataDir = "data"', ("--no-such-flag",), 2),
    (f'stateUrl = "postgresql://127.0.0.1:{free_port()}/kb"', (), 1),
], ids=["usage error", "state unreachable"])
def test_a_failure_under_json_is_one_failure_object(
        tmp_path: Path, config: str, flags: tuple[str, ...], code: int) -> None:
    (tmp_path / "kb.toml").write_text(f"[knowledgeBase]\n{config}\n")
    done = run_module("daemons.reconcile", "archives", "--json", *flags, "--config",
                      str(tmp_path / "kb.toml"), home=tmp_path / "home")
    assert done.returncode == code, done.stderr
    [line] = done.stdout.splitlines()
    shown = json.loads(line)
    assert shown["ok"] is False and shown["error"]
