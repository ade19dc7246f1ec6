"""One REM tick: live ingestion since the watermark, then the drain."""

from __future__ import annotations

import json

from core.base.chroma import VectorStore
from core.base.config.config import Settings
from core.base.io.clock import now_ms
from core.base.rules.camel_json import to_json
from core.base.rules.timestamps import iso_from_ms
from core.base.runtime.context import TickContext
from core.base.state.daemon_state import LIVE_INGEST_WATERMARK, get_value, set_value
from core.base.state.graph import existing_ids
from core.base.state.graph_db import GraphDB
from core.drain.rem_tick import rem_tick
from core.suite.tick import open_context
from tests.support import seed

HOUR_MS = 3_600_000


async def seed_summary(vectors: VectorStore, settings: Settings, sid: str, created: int) -> None:
    await seed(vectors, settings.chroma.summary_collection,
               [(f"sum-{sid}", {"sessionId": sid, "createdAt": iso_from_ms(created)})])
    await seed(vectors, settings.chroma.memory_collection,
               [(f"{sid}-m", {"sessionId": sid, "createdAt": created})])


async def test_the_first_tick_looks_back_the_overlap_from_now(
    graph: GraphDB, vectors: VectorStore, settings: Settings
) -> None:
    now = now_ms()
    await seed_summary(vectors, settings, "fresh", now - HOUR_MS)
    await seed_summary(vectors, settings, "ancient", now - settings.drain.rem_live_ingest_overlap_ms
                       - HOUR_MS)
    figures = to_json(await rem_tick(TickContext(settings, graph, vectors), False))
    assert figures["liveIngest"]["sessionsFound"] == 1
    assert await existing_ids(graph, ["session:fresh", "session:ancient"]) == {"session:fresh"}
    watermark = await get_value(graph, LIVE_INGEST_WATERMARK)
    assert watermark is not None and int(watermark) >= now


async def test_a_later_tick_looks_back_the_overlap_before_the_previous_tick(
    graph: GraphDB, vectors: VectorStore, settings: Settings
) -> None:
    now = now_ms()
    overlap = settings.drain.rem_live_ingest_overlap_ms
    # The previous tick started 10 hours ago: a summary from (overlap + 5 h) ago is still in.
    await set_value(graph, LIVE_INGEST_WATERMARK, str(now - 10 * HOUR_MS), now_ms=now)
    await seed_summary(vectors, settings, "late", now - overlap - 5 * HOUR_MS)
    await seed_summary(vectors, settings, "too-old", now - overlap - 11 * HOUR_MS)
    await rem_tick(TickContext(settings, graph, vectors), False)
    assert await existing_ids(graph, ["session:late", "session:too-old"]) == {"session:late"}


async def test_a_dry_run_tick_moves_no_watermark_and_writes_nothing(
    graph: GraphDB, vectors: VectorStore, settings: Settings
) -> None:
    await seed_summary(vectors, settings, "fresh", now_ms() - HOUR_MS)
    settings.drain.lazy_edges_queue_path.parent.mkdir(parents=True)
    settings.drain.lazy_edges_queue_path.write_text(json.dumps(
        {"source": "memory:fresh-m", "target": "session:fresh", "relationship": "R"}) + "\n")
    before = settings.state.graph_db_path.read_bytes()
    async with open_context(settings, dry_run=True, vectors=vectors) as dry:
        figures = to_json(await rem_tick(dry, True))
    assert figures["liveIngest"]["sessionsUpserted"] == 1
    assert figures["drain"]["totalLines"] == 1
    assert settings.state.graph_db_path.read_bytes() == before
    assert await get_value(graph, LIVE_INGEST_WATERMARK) is None


async def test_a_tick_without_collections_skips_ingestion_and_still_drains(
    graph: GraphDB, vectors: VectorStore, settings: Settings
) -> None:
    figures = to_json(await rem_tick(TickContext(settings, graph, vectors), False))
    assert "not found" in figures["liveIngest"]["skipped"]
    assert figures["drain"]["totalLines"] == 0


async def test_sessions_land_even_before_the_memory_collection_exists(
    graph: GraphDB, vectors: VectorStore, settings: Settings
) -> None:
    await seed(vectors, settings.chroma.summary_collection,
               [("sum-x", {"sessionId": "x", "createdAt": iso_from_ms(now_ms() - HOUR_MS)})])
    figures = to_json(await rem_tick(TickContext(settings, graph, vectors), False))
    assert figures["liveIngest"]["sessionsUpserted"] == 1
    assert await get_value(graph, LIVE_INGEST_WATERMARK) is not None


async def test_a_skipped_ingestion_does_not_move_the_watermark(
    graph: GraphDB, vectors: VectorStore, settings: Settings
) -> None:
    await rem_tick(TickContext(settings, graph, vectors), False)  # no summary collection yet
    assert await get_value(graph, LIVE_INGEST_WATERMARK) is None
