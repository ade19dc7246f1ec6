"""Restoring tombstone archives: preserve-live (what lives now is never overwritten), only the
archive's own tenant and the knowledge-base collection, torn and edited lines named and
skipped, old archives still usable. Real embedded Chroma and real archives written by passes.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from core.base.chroma import CollectionMissing, Include, VectorStore
from core.base.rules.rows import ChromaRow
from core.base.rules.tenants import TENANT_CONFIG_LABEL
from core.base.runtime.context import TickContext
from core.base.state.graph import upsert_node
from core.base.state.graph_db import GraphDB
from core.reconcile.archives.restore import restore_archive
from core.reconcile.rules.archives.format import FIRST_FORMAT_WARNING, ArchiveHeader, seal
from core.reconcile.run_pass import reconcile_tick
from core.reconcile.stores.archives.files import ArchiveError
from core.suite.tick import run_tick
from tests.chroma_server import ChromaServer
from tests.support import make_settings, read_archived_chunks, run_module, seed

FULL: tuple[Include, ...] = ("metadatas", "documents", "embeddings")
KB = "neo-knowledge-base"


def chunk(row_id: str, tenant: str, stamp: Any, ingested: Any = 1) -> tuple[str, dict[str, Any]]:
    return row_id, {"tenantId": tenant, "repoSlug": f"{tenant}/repo", "sourcePath": "a.md",
                    "tenantConfigVersion": stamp, "ingestedAt": ingested}


async def tombstoning_stores(tmp_path: Path, graph: GraphDB, vectors: VectorStore) -> TickContext:
    settings = make_settings(tmp_path, reconciliationEnabled=True,
                             reconciliationAutoTombstone=True,
                             reconciliationMaxStaleFraction=1.0)
    return TickContext(settings, graph, vectors)


async def configure(graph: GraphDB, tenant: str, version: int) -> None:
    await upsert_node(graph, f"kb-config:{tenant}", TENANT_CONFIG_LABEL,
                            {"version": version, "repoSlug": f"{tenant}/repo"})


async def one_archive(stores: TickContext) -> Path:
    figures = (await run_tick("reconcile", stores, reconcile_tick, dry_run=False)).json()
    [archive] = figures["archives"]
    return Path(archive)


def by_id(rows: list[ChromaRow]) -> dict[str, ChromaRow]:
    return {r.id: r for r in rows}


# -- round trip -------------------------------------------------------------------------------


async def test_archive_then_restore_gives_back_identical_rows_and_again_changes_nothing(
    tmp_path: Path, graph: GraphDB, vectors: VectorStore
) -> None:
    stores = await tombstoning_stores(tmp_path, graph, vectors)
    await configure(graph, "acme", 4)
    await seed(vectors, KB, [chunk(f"doc{i}", "acme", i % 2) for i in range(6)])
    await seed(vectors, KB, [chunk(f"nodoc{i}", "acme", 1.5) for i in range(3)],
               documents=False)
    await vectors.upsert(KB, [ChromaRow(
        "odd", {"tenantId": "acme", "tenantConfigVersion": 0, "ingestedAt": 2.5,
                "note": "ünïcode ✓ \U0001f600", "ratio": 0.1, "flag": False, "big": 2**62},
        "line\nbreak \"quoted\" \\", [0.1, 1e-7, -3.25, 1 / 3])])
    ids = [f"doc{i}" for i in range(6)] + [f"nodoc{i}" for i in range(3)] + ["odd"]
    before = by_id(await vectors.get_by_ids(KB, ids, include=FULL))

    archive = await one_archive(stores)
    assert await vectors.count(KB) == 0

    result = await restore_archive(vectors, archive, collection=KB)
    assert (result.restored, result.kept_live, result.clean) == (10, 0, True)
    assert by_id(await vectors.get_by_ids(KB, ids, include=FULL)) == before

    again = await restore_archive(vectors, archive, collection=KB)
    assert (again.restored, again.kept_live) == (0, 10)
    assert by_id(await vectors.get_by_ids(KB, ids, include=FULL)) == before


async def test_an_archive_starts_with_its_header_and_every_line_carries_a_checksum(
    tmp_path: Path, graph: GraphDB, vectors: VectorStore
) -> None:
    stores = await tombstoning_stores(tmp_path, graph, vectors)
    await configure(graph, "acme", 4)
    await seed(vectors, KB, [chunk(f"c{i}", "acme", 1) for i in range(3)])
    archive = await one_archive(stores)
    lines = archive.read_bytes().splitlines()
    header = json.loads(lines[0])
    assert {k: header[k] for k in ("format", "kind", "collection", "tenantId")} == {
        "format": 2, "kind": "header", "collection": KB, "tenantId": "acme"}
    assert isinstance(header["passId"], str) and isinstance(header["createdAt"], int)
    assert all(len(json.loads(line)["sha256"]) == 64 for line in lines)
    assert [c.row.id for _, c in read_archived_chunks(archive)] == ["c0", "c1", "c2"]


# -- preserve-live ----------------------------------------------------------------------------


async def test_re_ingested_ids_keep_their_new_content_and_are_not_tombstoned_again(
    tmp_path: Path, graph: GraphDB, vectors: VectorStore
) -> None:
    stores = await tombstoning_stores(tmp_path, graph, vectors)
    await configure(graph, "acme", 3)
    await seed(vectors, KB, [chunk(f"c{i:02d}", "acme", 1) for i in range(20)])
    archive = await one_archive(stores)
    assert await vectors.count(KB) == 0

    # A re-ingest writes 10 of those ids again, at the current version, with new content.
    fresh = [ChromaRow(f"c{i:02d}", {"tenantId": "acme", "repoSlug": "acme/repo",
                                     "tenantConfigVersion": 3, "ingestedAt": 99},
                       f"new content {i}", [0.5, 0.25, 0.75, 0.125]) for i in range(10)]
    await vectors.upsert(KB, fresh)

    result = await restore_archive(vectors, archive, collection=KB)
    assert (result.restored, result.kept_live, result.clean) == (10, 10, True)
    live = by_id(await vectors.get_by_ids(KB, [f"c{i:02d}" for i in range(20)], include=FULL))
    for row in fresh:
        assert live[row.id] == row, "the live, re-ingested content is untouched"
    assert {live[f"c{i:02d}"].document for i in range(10, 20)} == {
        f"doc c{i:02d}" for i in range(10, 20)}

    figures = (await run_tick("reconcile", stores, reconcile_tick, dry_run=False)).json()
    assert figures["tombstonedCount"] == 10  # the restored old ones go again, not the new
    assert {r.id for r in await vectors.get_by_ids(KB, [r.id for r in fresh])} == {
        r.id for r in fresh}


# -- hostile archives -------------------------------------------------------------------------


def header_line(tenant: str = "acme", collection: str = KB, pass_id: str = "p1") -> bytes:
    return seal(ArchiveHeader(collection, tenant, pass_id, 1).record())


def chunk_line(row_id: str, *, tenant: str = "acme", collection: str = KB,
               owner: str | None = None, pass_id: str = "p1", document: str = "archived",
               embedding: list[float] | None = None) -> bytes:
    return seal({
        "format": 2, "kind": "chunk", "collection": collection, "tenantId": tenant,
        "passId": pass_id, "archivedAt": 1, "id": row_id,
        "metadata": {"tenantId": owner or tenant, "tenantConfigVersion": 1, "ingestedAt": 1},
        "document": document, "embedding": embedding or [0.5, 0.25, 0.125, 0.0625],
    })


def write_archive(path: Path, lines: list[bytes]) -> Path:
    path.write_bytes(b"".join(line + b"\n" for line in lines))
    return path


async def test_a_hostile_archive_changes_nothing_but_its_own_tenants_absent_ids(
    tmp_path: Path, vectors: VectorStore
) -> None:
    await seed(vectors, KB, [chunk("u-live", "other", 5), chunk("a-live", "acme", 5)])
    await seed(vectors, "neo-agent-memory", [("m1", {"sessionId": "s1"})])
    before = {
        KB: by_id(await vectors.get_by_ids(KB, ["u-live", "a-live"], include=FULL)),
        "mem": by_id(await vectors.get_by_ids("neo-agent-memory", ["m1"], include=FULL)),
    }
    good = chunk_line("a-absent")
    edited = chunk_line("a-edited").replace(b'"archived"', b'"tampered"')
    archive = write_archive(tmp_path / "hostile.jsonl", [
        header_line(),
        good,                                                   # 2: restored
        chunk_line("u-live", tenant="other"),                   # 3: another tenant's line
        chunk_line("u-live"),                                   # 4: id lives under `other`
        chunk_line("m1", collection="neo-agent-memory"),        # 5: another collection
        chunk_line("a-owner", owner="other"),                   # 6: metadata names `other`
        chunk_line("a-pass", pass_id="p2"),                     # 7: copied from another pass
        edited,                                                 # 8: checksum mismatch
        chunk_line("a-torn")[:60],                              # 9: torn by a crash
        b"\xff\xfe not utf-8",                                  # 10
        chunk_line("a-live", document="old"),                   # 11: live: kept
    ])
    result = await restore_archive(vectors, archive, collection=KB)

    assert (result.restored, result.kept_live) == (1, 1)
    assert [(p.line_number, p.reason.split(" ")[0]) for p in result.refused] == [
        (3, "tenant"), (4, "id"), (5, "collection"), (6, "metadata"), (7, "pass")]
    assert [p.line_number for p in result.unreadable] == [8, 9, 10]
    assert "checksum mismatch" in result.unreadable[0].reason
    assert "no checksum" in result.unreadable[1].reason
    assert not result.clean
    assert by_id(await vectors.get_by_ids(KB, ["u-live", "a-live"], include=FULL)) == before[KB]
    assert by_id(await vectors.get_by_ids("neo-agent-memory", ["m1"], include=FULL)) == \
        before["mem"]
    present = {r.id for r in await vectors.get_by_ids(
        KB, ["a-absent", "a-owner", "a-pass", "a-edited", "a-torn", "m1"])}
    assert present == {"a-absent"}


async def test_an_archive_of_another_collection_is_refused_whole(
    tmp_path: Path, vectors: VectorStore
) -> None:
    archive = write_archive(tmp_path / "mem.jsonl", [
        header_line(collection="neo-agent-memory"),
        chunk_line("m1", collection="neo-agent-memory")])
    with pytest.raises(ArchiveError, match="not of the knowledge-base collection") as caught:
        await restore_archive(vectors, archive, collection=KB)
    assert caught.value.exit_code == 2
    with pytest.raises(CollectionMissing):
        await vectors.get_by_ids("neo-agent-memory", ["m1"])


@pytest.mark.parametrize("first", [
    header_line()[:40],                                          # a torn header
    header_line().replace(b'"acme"', b'"evil"'),                 # an edited header
    b'{"hello": "world"}',                                       # not an archive
])
async def test_an_archive_without_a_readable_header_restores_nothing(
    tmp_path: Path, vectors: VectorStore, first: bytes
) -> None:
    archive = write_archive(tmp_path / "bad.jsonl", [first, chunk_line("a1")])
    with pytest.raises(ArchiveError, match="no readable archive header"):
        await restore_archive(vectors, archive, collection=KB)
    with pytest.raises(CollectionMissing):
        await vectors.get_by_ids(KB, ["a1"])


async def test_restoring_a_missing_or_empty_archive_is_a_usage_error(
    tmp_path: Path, vectors: VectorStore
) -> None:
    with pytest.raises(ArchiveError, match="archive not found") as caught:
        await restore_archive(vectors, tmp_path / "nope.jsonl", collection=KB)
    assert caught.value.exit_code == 2
    (tmp_path / "empty.jsonl").write_bytes(b"\n\n")
    with pytest.raises(ArchiveError, match="empty archive"):
        await restore_archive(vectors, tmp_path / "empty.jsonl", collection=KB)


# -- format 1 ---------------------------------------------------------------------------------


def legacy_line(row_id: str, *, tenant: str = "acme", collection: str = KB) -> bytes:
    return json.dumps({
        "format": 1, "collection": collection, "tenantId": tenant, "archivedAt": 1,
        "id": row_id, "embedding": [0.5, 0.5, 0.5, 0.5],
        "metadata": {"tenantId": tenant, "tenantConfigVersion": 1}, "document": "old",
    }).encode()


async def test_a_format_1_archive_is_restored_preserve_live_with_a_warning(
    tmp_path: Path, vectors: VectorStore
) -> None:
    await seed(vectors, KB, [chunk("live", "acme", 5), chunk("theirs", "other", 5)])
    live_before = await vectors.get_by_ids(KB, ["live", "theirs"], include=FULL)
    archive = write_archive(tmp_path / "v1.jsonl", [
        legacy_line("gone"), legacy_line("live"), legacy_line("theirs"),
        legacy_line("x", tenant="other"), legacy_line("m", collection="neo-agent-memory"),
        legacy_line("cut")[:30]])
    result = await restore_archive(vectors, archive, collection=KB)
    assert result.format == 1 and result.warnings == (FIRST_FORMAT_WARNING,)
    assert (result.restored, result.kept_live) == (1, 1)
    assert [p.line_number for p in result.refused] == [3, 4, 5]
    assert [p.line_number for p in result.unreadable] == [6]
    assert await vectors.get_by_ids(KB, ["live", "theirs"], include=FULL) == live_before
    assert [r.id for r in await vectors.get_by_ids(KB, ["gone", "x", "m", "cut"])] == ["gone"]


async def test_an_embedding_chroma_cannot_hold_is_a_bad_line_not_a_failed_restore(
    tmp_path: Path, vectors: VectorStore
) -> None:
    archive = write_archive(tmp_path / "huge.jsonl", [
        header_line(), chunk_line("big", embedding=[1e300, 0.0, 0.0, 0.0]), chunk_line("ok")])
    result = await restore_archive(vectors, archive, collection=KB)
    assert result.restored == 1
    assert [(p.line_number, p.reason) for p in result.unreadable] == [
        (2, "embedding holds a number too large for float32")]


# -- lines the store refuses ------------------------------------------------------------------


def store_refused_archive(path: Path) -> Path:
    """Two good lines around one of another embedding dimension and one with nested metadata
    (both well-formed archive lines, refused only by Chroma)."""
    nested = seal({
        "format": 2, "kind": "chunk", "collection": KB, "tenantId": "acme", "passId": "p1",
        "archivedAt": 1, "id": "a-nested",
        "metadata": {"tenantId": "acme", "tenantConfigVersion": 1, "extra": {"deep": [1]}},
        "document": "archived", "embedding": [0.5, 0.25, 0.125, 0.0625]})
    return write_archive(path, [
        header_line(),
        chunk_line("a-good1"),                                   # 2: restored
        chunk_line("a-dim3", embedding=[0.5, 0.25, 0.125]),      # 3: another dimension
        nested,                                                  # 4: nested metadata
        chunk_line("a-good2"),                                   # 5: restored
    ])


def run_restore_json(config: Path, archive: Path, home: Path) -> tuple[int, dict[str, Any]]:
    """`kb-reconcile restore ARCHIVE --json` as an operator runs it: the exit code and the one
    JSON object (asserted to be exactly one line of JSON on stdout)."""
    done = run_module("daemons.reconcile", "restore", str(archive), "--config", str(config),
                      "--json", home=home)
    [line] = done.stdout.splitlines()
    return done.returncode, json.loads(line)


def test_lines_the_store_refuses_are_refused_with_its_reason_and_the_others_restored(
    tmp_path: Path,
) -> None:
    config = tmp_path / "kb.toml"
    config.write_text('[knowledgeBase]\ndataDir = "data"\n', encoding="utf-8")
    settings = make_settings(tmp_path)

    async def seed_live_dimension() -> None:  # the collection holds 4-number embeddings
        vectors = await VectorStore.open(settings.chroma)
        try:
            await seed(vectors, KB, [chunk("a-live", "acme", 5)])
        finally:
            await vectors.close()

    asyncio.run(seed_live_dimension())
    archive = store_refused_archive(tmp_path / "mixed.jsonl")

    code, shown = run_restore_json(config, archive, tmp_path / "home")
    assert code == 2
    assert shown["ok"] is False and "2 line(s) refused" in shown["error"]
    assert (shown["restored"], shown["keptLive"], shown["refused"]) == (2, 0, 2)
    problems = [(p["line"], p["id"]) for p in shown["problems"]]
    assert problems == [(3, "a-dim3"), (4, "a-nested")]
    assert "dimension of 4, got 3" in shown["problems"][0]["reason"]
    assert "metadata" in shown["problems"][1]["reason"]

    async def present() -> set[str]:
        vectors = await VectorStore.open(settings.chroma)
        try:
            return {r.id for r in await vectors.get_by_ids(
                KB, ["a-good1", "a-good2", "a-dim3", "a-nested", "a-live"])}
        finally:
            await vectors.close()

    assert asyncio.run(present()) == {"a-good1", "a-good2", "a-live"}

    # Again: nothing new restored, the same refusals with the same reasons.
    again_code, again = run_restore_json(config, archive, tmp_path / "home")
    assert again_code == 2
    assert (again["restored"], again["keptLive"], again["refused"]) == (0, 2, 2)
    assert again["problems"] == shown["problems"]
    assert asyncio.run(present()) == {"a-good1", "a-good2", "a-live"}


async def test_a_refused_line_among_many_leaves_every_other_line_of_its_batch_restored(
    tmp_path: Path, vectors: VectorStore
) -> None:
    """Isolation by halving: the refused lines anywhere in a batch, the others all restored
    in the same run."""
    await seed(vectors, KB, [chunk("a-live", "acme", 5)])
    bad = {7, 8, 30}
    lines = [header_line()] + [
        chunk_line(f"a{i:02d}", embedding=[0.5, 0.25, 0.125] if i in bad else None)
        for i in range(40)]
    archive = write_archive(tmp_path / "many.jsonl", lines)
    result = await restore_archive(vectors, archive, collection=KB)
    assert result.restored == 37
    assert [(p.line_number, p.chunk_id) for p in result.refused] == [
        (i + 2, f"a{i:02d}") for i in sorted(bad)]
    assert all(p.reason.startswith("the store refused it: ") for p in result.refused)
    present = {r.id for r in await vectors.get_by_ids(KB, [f"a{i:02d}" for i in range(40)])}
    assert present == {f"a{i:02d}" for i in range(40) if i not in bad}


def test_a_store_that_goes_down_mid_restore_is_exit_1_and_claims_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Server mode: `chroma run` is stopped after the restore has read the store's state
    and before it adds the absent rows. That is an outage, not a refusal: exit 1, one JSON
    object with `ok: false`, no line claimed restored or refused, and the store (started
    again) holds none of the archive's rows."""
    from daemons.reconcile import main

    server = ChromaServer(tmp_path / "chroma", home=tmp_path / "home")
    server.start()
    try:
        config = tmp_path / "kb.toml"
        config.write_text(f'[knowledgeBase]\ndataDir = "data"\nchromaUrl = "{server.url}"\n',
                          encoding="utf-8")
        settings = make_settings(tmp_path, chromaUrl=server.url)

        async def seed_live() -> None:
            vectors = await VectorStore.open(settings.chroma)
            try:
                await seed(vectors, KB, [chunk("a-live", "acme", 5)])
            finally:
                await vectors.close()

        asyncio.run(seed_live())
        archive = write_archive(tmp_path / "a.jsonl", [header_line()] + [
            chunk_line(f"a{i}") for i in range(5)])
        real_get = VectorStore.get_by_ids

        async def get_then_stop_the_server(self: VectorStore, *args: Any,
                                           **kwargs: Any) -> list[ChromaRow]:
            rows = await real_get(self, *args, **kwargs)
            server.stop()
            return rows

        monkeypatch.setattr(VectorStore, "get_by_ids", get_then_stop_the_server)
        with pytest.raises(SystemExit) as exited:
            main(["restore", str(archive), "--config", str(config), "--json"])
        monkeypatch.undo()
        assert exited.value.code == 1
        out = capsys.readouterr()
        [line] = out.out.splitlines()
        shown = json.loads(line)
        assert shown["ok"] is False and shown["error"]
        assert not {"restored", "refused", "problems"} & shown.keys()
        assert "refused it" not in out.err

        server.start()

        async def present() -> set[str]:
            vectors = await VectorStore.open(settings.chroma)
            try:
                return {r.id for r in await vectors.get_by_ids(
                    KB, ["a-live", *(f"a{i}" for i in range(5))])}
            finally:
                await vectors.close()

        assert asyncio.run(present()) == {"a-live"}
    finally:
        server.stop()
