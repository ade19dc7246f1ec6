"""Archives reachable from every host (issue 27), as operators run the commands: two hosts are
two data folders with their own config, one `stateUrl` (the session's real PostgreSQL) and one
embedded Chroma folder both name (the shared Chroma). Host A's reconcile pass tombstones, host
A's data folder is then deleted, and host B restores by the archive's file name."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

from core.base.chroma import Include, VectorStore
from core.base.config.config import Settings
from core.base.rules.rows import ChromaRow
from core.base.runtime.config_file import load_config
from core.base.state.state import open_graph
from tests.postgres_server import PostgresServer
from tests.support import run_module, seed

_databases = iter(range(1, 1_000_000))

STALE = ("old1", "old2", "old3", "old4")
#: Every field of a chunk a restore must bring back exactly.
WHOLE: tuple[Include, ...] = ("metadatas", "documents", "embeddings")


def write_host(tmp_path: Path, host: str, state_url: str) -> Path:
    """Host `host`'s config: its own `dataDir`, the shared state and the shared Chroma."""
    folder = tmp_path / host
    folder.mkdir()
    keys: dict[str, Any] = {
        "dataDir": "data", "stateUrl": state_url, "chromaPath": str(tmp_path / "chroma"),
        "reconciliationEnabled": True, "reconciliationAutoTombstone": True,
        "reconciliationMaxStaleFraction": 1.0}
    lines = ["[knowledgeBase]", *(f"{k} = {json.dumps(v)}" for k, v in keys.items())]
    (folder / "kb.toml").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return folder / "kb.toml"


def on(config: Path, module: str, *args: str) -> subprocess.CompletedProcess[str]:
    return run_module(module, *args, "--config", str(config), home=config.parent / "home")


async def _seed(settings: Settings) -> None:
    """Four chunks of `acme` at version 1 (stale at version 3, gap 2) and one current."""
    vectors = await VectorStore.open(settings.chroma)
    try:
        await seed(vectors, settings.chroma.knowledge_base_collection, [
            *((i, {"tenantId": "acme", "tenantConfigVersion": 1, "ingestedAt": 1_000 + n,
                   "sourcePath": f"{i}.md"}) for n, i in enumerate(STALE)),
            ("now", {"tenantId": "acme", "tenantConfigVersion": 3, "ingestedAt": 2_000})])
    finally:
        await vectors.close()


async def _rows(settings: Settings, ids: tuple[str, ...]) -> dict[str, ChromaRow]:
    vectors = await VectorStore.open(settings.chroma)
    try:
        rows = await vectors.get_by_ids(settings.chroma.knowledge_base_collection, ids,
                                        include=WHOLE)
    finally:
        await vectors.close()
    return {row.id: row for row in rows}


async def _reingest(settings: Settings, row: ChromaRow) -> None:
    vectors = await VectorStore.open(settings.chroma)
    try:
        await vectors.upsert(settings.chroma.knowledge_base_collection, [row])
    finally:
        await vectors.close()


async def _sql(settings: Settings, statement: str) -> None:
    """A statement of the test's own on the shared state (a fault, a tampering)."""
    graph = await open_graph(settings.state)
    try:
        async with graph.write() as tx:
            await tx.execute(statement)
    finally:
        await graph.close()


def _host_a_tombstones(tmp_path: Path, postgres_server: PostgresServer
                       ) -> tuple[Path, Path, Settings, dict[str, ChromaRow], Path]:
    """Two hosts on one fresh database; host A's pass tombstones the four stale chunks. Returns
    both configs, A's settings, the chunks as they were, and the archive A wrote."""
    url = postgres_server.create_database(f"hosts{next(_databases)}")
    host_a, host_b = write_host(tmp_path, "a", url), write_host(tmp_path, "b", url)
    settings = load_config(str(host_a)).settings
    asyncio.run(_seed(settings))
    for _ in range(3):
        made = on(host_a, "daemons.tenants", "set-config", "acme", "--repo-slug", "acme/r")
        assert made.returncode == 0, made.stderr
    before = asyncio.run(_rows(settings, STALE))
    assert set(before) == set(STALE)
    ticked = on(host_a, "daemons.reconcile", "--tick", "--json")
    assert ticked.returncode == 0, ticked.stderr
    figures = json.loads(ticked.stdout)
    assert figures["tombstonedCount"] == 4
    [archive] = figures["archives"]
    assert asyncio.run(_rows(settings, STALE)) == {}
    return host_a, host_b, settings, before, Path(archive)


def test_host_b_restores_what_host_a_tombstoned_after_host_a_data_folder_is_gone(
    tmp_path: Path, postgres_server: PostgresServer
) -> None:
    host_a, host_b, settings, before, archive = _host_a_tombstones(tmp_path, postgres_server)
    shutil.rmtree(host_a.parent / "data")
    assert not archive.exists()
    # Re-ingested meanwhile: a restore keeps it as it lives now (preserve-live).
    live = ChromaRow("old2", {"tenantId": "acme", "tenantConfigVersion": 3,
                              "ingestedAt": 9_000, "sourcePath": "old2.md"},
                     "rewritten", [0.5, 0.25, 0.125, 1.0])
    asyncio.run(_reingest(settings, live))

    restored = on(host_b, "daemons.reconcile", "restore", archive.name, "--json")
    assert restored.returncode == 0, restored.stderr
    result = json.loads(restored.stdout)
    assert (result["ok"], result["restored"], result["keptLive"], result["tenantId"]) == (
        True, 3, 1, "acme")
    now = asyncio.run(_rows(settings, STALE))
    assert {i: now[i] for i in ("old1", "old3", "old4")} == {
        i: before[i] for i in ("old1", "old3", "old4")}
    assert now["old2"] == live
    # Host A's full path names the same archive; a second restore changes nothing.
    again = on(host_b, "daemons.reconcile", "restore", str(archive), "--json")
    assert again.returncode == 0, again.stderr
    assert (json.loads(again.stdout)["restored"], json.loads(again.stdout)["keptLive"]) == (0, 4)


def test_a_band_whose_archive_the_database_refuses_deletes_nothing(
    tmp_path: Path, postgres_server: PostgresServer
) -> None:
    url = postgres_server.create_database(f"hosts{next(_databases)}")
    host_a = write_host(tmp_path, "a", url)
    settings = load_config(str(host_a)).settings
    asyncio.run(_seed(settings))
    for _ in range(3):
        assert on(host_a, "daemons.tenants", "set-config", "acme").returncode == 0
    # The real database refuses every archive part (as a full disk or a revoked grant would).
    asyncio.run(_sql(settings, """
        CREATE FUNCTION refuse_archive() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN RAISE EXCEPTION 'injected: no room for archives'; END $$;
        CREATE TRIGGER refuse_archive BEFORE INSERT ON tombstone_archive_parts
        FOR EACH ROW EXECUTE FUNCTION refuse_archive();"""))

    ticked = on(host_a, "daemons.reconcile", "--tick", "--json")
    assert ticked.returncode == 1, ticked.stderr
    figures = json.loads(ticked.stdout)
    assert (figures["ok"], figures["tombstonedCount"], figures["failedTenants"]) == (False, 0, 1)
    assert "reconcile.tenant_failed" in ticked.stderr
    assert "injected: no room for archives" in ticked.stderr
    assert set(asyncio.run(_rows(settings, STALE))) == set(STALE)  # nothing deleted
    # The local archive was written and flushed first, as ever.
    assert [str(p) for p in settings.tombstones_dir.iterdir()] == figures["archives"]


def test_a_tampered_shared_archive_is_refused_and_nothing_restored(
    tmp_path: Path, postgres_server: PostgresServer
) -> None:
    host_a, host_b, settings, _before, archive = _host_a_tombstones(tmp_path, postgres_server)
    shutil.rmtree(host_a.parent / "data")
    # One byte of the stored copy changed (the line checksums alone would refuse only that
    # line; the archive's own checksum refuses the copy).
    asyncio.run(_sql(settings, "UPDATE tombstone_archive_parts SET content = "
                     "overlay(content placing '\\x20'::bytea from length(content) - 3)"))

    refused = on(host_b, "daemons.reconcile", "restore", archive.name, "--json")
    assert refused.returncode == 2
    assert refused.stderr.count("\n") == 1 and "fails its checksum" in refused.stderr
    assert archive.name in refused.stderr
    shown = json.loads(refused.stdout)
    assert shown["ok"] is False and "fails its checksum" in shown["error"]
    assert asyncio.run(_rows(settings, STALE)) == {}


def test_restore_names_the_file_and_the_database_when_no_host_wrote_that_archive(
    tmp_path: Path, postgres_server: PostgresServer
) -> None:
    url = postgres_server.create_database(f"hosts{next(_databases)}")
    host_b = write_host(tmp_path, "b", url)
    missing = on(host_b, "daemons.reconcile", "restore", "/elsewhere/nope.jsonl")
    assert missing.returncode == 2
    assert missing.stderr.count("\n") == 1
    assert "/elsewhere/nope.jsonl: archive not found" in missing.stderr
    assert "'nope.jsonl'" in missing.stderr and url in missing.stderr


def test_the_listing_shows_the_local_file_and_its_shared_copy_on_every_host(
    tmp_path: Path, postgres_server: PostgresServer
) -> None:
    host_a, host_b, _settings, _before, archive = _host_a_tombstones(tmp_path, postgres_server)
    listed_a = on(host_a, "daemons.reconcile", "archives", "--json")
    assert listed_a.returncode == 0, listed_a.stderr
    shown = json.loads(listed_a.stdout)
    assert shown["shared"] is True
    rows = {a["where"]: a for a in shown["archives"]}
    assert set(rows) == {"local", "shared"} and len(shown["archives"]) == 2
    for row in rows.values():
        assert (row["name"], row["tenantId"], row["chunks"], row["restorable"]) == (
            archive.name, "acme", 4, 4)
        assert row["path"] == str(archive)
    assert rows["shared"]["bytes"] == archive.stat().st_size == rows["local"]["bytes"]
    assert rows["shared"]["host"] and "host" not in rows["local"]
    assert rows["shared"]["createdAt"] == rows["local"]["createdAt"]

    shutil.rmtree(host_a.parent / "data")
    listed_b = on(host_b, "daemons.reconcile", "archives", "acme", "--json")
    assert listed_b.returncode == 0, listed_b.stderr
    [only] = json.loads(listed_b.stdout)["archives"]
    assert only == rows["shared"], "host B lists the shared copy as host A did"
    assert json.loads(on(host_b, "daemons.reconcile", "archives", "beta",
                         "--json").stdout)["archives"] == []
    text = on(host_b, "daemons.reconcile", "archives").stdout
    assert archive.name in text and "shared (by " in text


async def _old_shared_archive(settings: Settings, *, days_ago: int) -> Path:
    """An archive of acme written `days_ago` days ago on host A, and its shared copy, by the
    archive writer and the shared store themselves."""
    from core.base.io.clock import now_ms
    from core.base.rules.rows import ColumnPage
    from core.reconcile.stores.archives.files import TombstoneArchive, sync_archives
    from core.reconcile.stores.archives.shared import SharedArchives

    archive = TombstoneArchive.new_unsynced(
        settings.tombstones_dir, collection=settings.chroma.knowledge_base_collection,
        tenant_id="acme", pass_id="old-pass", now_ms=now_ms() - days_ago * 86_400_000,
        first_page=ColumnPage(["gone"], [{"tenantId": "acme"}], ["doc"], [[0.5, 0.25]]))
    sync_archives([archive])
    graph = await open_graph(settings.state)
    try:
        await SharedArchives(graph, host="a").store([archive])
    finally:
        await graph.close()
    # Its head is dated when it was copied (by its pass, in real life): that long ago too.
    await _sql(settings, f"UPDATE tombstone_archives SET created_at = "
                         f"{archive.header.created_at_ms} WHERE name = '{archive.path.name}'")
    return archive.path


def test_the_retention_job_prunes_old_shared_copies_and_keeps_the_tenants_newest(
    tmp_path: Path, postgres_server: PostgresServer
) -> None:
    host_a, host_b, settings, _before, archive = _host_a_tombstones(tmp_path, postgres_server)
    old = asyncio.run(_old_shared_archive(settings, days_ago=30))
    for host in (host_a, host_b):
        with host.open("a") as config:
            config.write(f"gcEnabled = true\narchiveMaxAgeMs = {7 * 86_400_000}\n")
    names = {a["name"] for a in json.loads(on(host_b, "daemons.reconcile", "archives",
                                                "--json").stdout)["archives"]}
    assert names == {archive.name, old.name}

    pruned_b = on(host_b, "daemons.reconcile", "gc", "--json")
    assert pruned_b.returncode == 0, pruned_b.stderr
    shown = json.loads(pruned_b.stdout)["archives"]
    assert shown["shared"] == {"expired": [old.name], "pruned": [old.name], "kept": []}
    assert shown["local"] == {"expired": [], "pruned": [], "kept": []}
    listed = json.loads(on(host_b, "daemons.reconcile", "archives", "--json").stdout)
    assert [a["name"] for a in listed["archives"]] == [archive.name], "its newest stays"
    assert old.exists(), "host B cannot reach host A's files"

    pruned_a = json.loads(on(host_a, "daemons.reconcile", "gc", "--json").stdout)["archives"]
    assert pruned_a["local"]["pruned"] == [str(old)] and pruned_a["shared"]["pruned"] == []
    assert not old.exists() and archive.exists()
