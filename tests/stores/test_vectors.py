"""Chroma access: the embedded store lock, paging, chunking, missing collections, no models."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.base.chroma import CollectionMissing, VectorStore, VectorStoreError
from core.base.config.config import Settings
from core.base.rules.errors import LockHeld
from core.base.rules.rows import ChromaRow
from tests.support import count_chroma_calls, make_settings, seed


async def test_a_second_opener_of_an_embedded_store_is_refused_naming_the_holder(
    vectors: VectorStore, settings: Settings
) -> None:
    import os

    with pytest.raises(LockHeld) as caught:
        await VectorStore.open(settings.chroma)
    message = str(caught.value)
    assert f"pid {os.getpid()}" in message
    assert "chromaUrl" in message


async def test_closing_releases_the_store_for_the_next_opener(settings: Settings) -> None:
    first = await VectorStore.open(settings.chroma)
    await first.close()
    second = await VectorStore.open(settings.chroma)
    await second.close()


async def test_scan_pages_through_more_rows_than_a_page(vectors: VectorStore) -> None:
    await seed(vectors, "kb-test", [(f"r{i:04d}", {"n": i}) for i in range(250)])
    pages = [page async for page in vectors.scan("kb-test", page_rows=100)]
    assert [len(p) for p in pages] == [100, 100, 50]
    assert sorted(r.id for p in pages for r in p) == [f"r{i:04d}" for i in range(250)]


async def test_get_by_ids_returns_only_rows_that_exist(vectors: VectorStore) -> None:
    await seed(vectors, "kb-test", [("a", {"x": 1}), ("b", {"x": 2})])
    rows = await vectors.get_by_ids("kb-test", ["a", "zz", "a"])
    assert [(r.id, r.metadata) for r in rows] == [("a", {"x": 1})]


async def test_get_where_in_finds_rows_by_a_metadata_value(vectors: VectorStore) -> None:
    await seed(vectors, "kb-test", [(f"r{i}", {"s": f"s{i % 3}"}) for i in range(9)])
    rows = await vectors.get_where_in("kb-test", "s", ["s0", "s2"])
    assert sorted(r.id for r in rows) == ["r0", "r2", "r3", "r5", "r6", "r8"]


async def test_a_missing_collection_is_reported_as_such(vectors: VectorStore) -> None:
    with pytest.raises(CollectionMissing, match="nope-nope"):
        await vectors.get_by_ids("nope-nope", ["a"])


async def test_upsert_then_read_back_embeddings_documents_and_metadata(
    vectors: VectorStore,
) -> None:
    await seed(vectors, "kb-test", [("a", {"tenantId": "t", "v": 2})])
    rows = await vectors.get_by_ids("kb-test", ["a"],
                                    include=("metadatas", "documents", "embeddings"))
    assert rows[0].document == "doc a"
    assert rows[0].embedding is not None and len(rows[0].embedding) == 4
    assert rows[0].metadata == {"tenantId": "t", "v": 2}


async def test_a_where_delete_is_one_request_and_says_how_many_went(
    vectors: VectorStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    await seed(vectors, "kb-test", [(f"r{i}", {"n": i}) for i in range(30)])
    calls = count_chroma_calls(monkeypatch, vectors)
    assert await vectors.delete_where("kb-test", where={"n": {"$lt": 20}}) == 20
    assert calls() == 1
    assert await vectors.count("kb-test") == 10
    assert await vectors.delete_where("kb-test", where={"n": {"$lt": 20}}) == 0
    assert await vectors.delete_where("kb-test", where={"n": {"$gte": 20}}, limit=4) == 4
    assert await vectors.count("kb-test") == 6


async def test_add_keeps_every_live_row_and_adds_only_the_absent_ids(
    vectors: VectorStore,
) -> None:
    await seed(vectors, "kb-test", [("live", {"v": "live"})])
    before = await vectors.get_by_ids("kb-test", ["live"],
                                      include=("metadatas", "documents", "embeddings"))
    await vectors.add("kb-test", [
        ChromaRow("live", {"v": "old"}, "old document", [0.0, 0.0, 0.0, 1.0]),
        ChromaRow("gone", {"v": "old"}, None, [0.0, 0.0, 1.0, 0.0])])
    after = await vectors.get_by_ids("kb-test", ["live", "gone"],
                                     include=("metadatas", "documents", "embeddings"))
    assert after[0] == before[0]
    assert (after[1].id, after[1].metadata, after[1].document) == ("gone", {"v": "old"}, None)


async def test_ids_where_reads_every_match_in_one_call_past_the_metadata_limit(
    vectors: VectorStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    await vectors.upsert("kb-test", [ChromaRow(f"r{i}", {"t": "x"}, None, [1.0, 0.0, 0.0, 0.0])
                                     for i in range(33_000)], create=True)
    calls = count_chroma_calls(monkeypatch, vectors)
    assert len(await vectors.ids_where("kb-test", where={"t": "x"})) == 33_000
    assert calls() == 1


async def test_collections_are_opened_without_an_embedding_function(
    vectors: VectorStore,
) -> None:
    await vectors.ensure_collection("kb-test")
    collection = vectors._collections["kb-test"]
    assert collection.configuration_json.get("embedding_function") is None


async def test_an_unreachable_server_is_a_store_error(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, chromaUrl="http://127.0.0.1:9")
    with pytest.raises(VectorStoreError, match=r"Chroma server http://127\.0\.0\.1:9"):
        await VectorStore.open(settings.chroma)
