"""Fencing's deadline, with a real reconcile pass on real stores (SQLite, embedded Chroma): a
delete is sent only while the fencing check that allowed it is fresh. A check whose answer
came later than the fence's validity (a renewal that waited, a leader paused between its
check and its request) sends nothing; a fresh one deletes as ever."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import pytest
from chromadb.api.models.Collection import Collection

from core.base.chroma import VectorStore
from core.base.config.config import Settings
from core.base.runtime.context import TickContext
from core.base.runtime.fencing import fenced
from core.base.state.state import open_graph
from core.reconcile.run_pass import reconcile_tick
from core.suite.tick import run_tick
from tests.support import make_settings, seed_acme_drift


class SlowFence:
    """A fence that says this host still leads, after `answer_s`, valid for `valid_for_s`."""

    def __init__(self, *, answer_s: float, valid_for_s: float) -> None:
        self.answer_s = answer_s
        self.valid_for_s = valid_for_s

    async def lost_reason(self) -> str | None:
        await asyncio.sleep(self.answer_s)
        return None


def tombstoning(tmp_path: Path) -> Settings:
    return make_settings(tmp_path, reconciliationEnabled=True,
                         reconciliationAutoTombstone=True, reconciliationMaxStaleFraction=1.0)


async def _pass_under(settings: Settings, fence: SlowFence) -> tuple[int, int]:
    """(chunks tombstoned, chunks left) after one pass under `fence`."""
    vectors = await VectorStore.open(settings.chroma)
    try:
        graph = await open_graph(settings.state)
        try:
            with fenced(fence):
                figures = (await run_tick("reconcile", TickContext(settings, graph, vectors),
                                          reconcile_tick, dry_run=False)).json()
        finally:
            await graph.close()
        return figures["tombstonedCount"], await vectors.count(
            settings.chroma.knowledge_base_collection)
    finally:
        await vectors.close()


async def test_a_delete_whose_fencing_check_is_older_than_its_validity_is_not_sent(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    settings = tombstoning(tmp_path)
    await seed_acme_drift(settings)
    tombstoned, left = await _pass_under(settings, SlowFence(answer_s=0.3, valid_for_s=0.2))
    assert (tombstoned, left) == (0, 4)
    fenced_lines = [json.loads(line) for line in capsys.readouterr().err.splitlines()
                    if '"leadership.fenced"' in line]
    assert fenced_lines and "not sent" in fenced_lines[0]["reason"]


async def test_a_delete_whose_fencing_check_is_fresh_is_sent(tmp_path: Path) -> None:
    settings = tombstoning(tmp_path)
    await seed_acme_drift(settings)
    assert await _pass_under(settings, SlowFence(answer_s=0.0, valid_for_s=30.0)) == (2, 2)


async def test_a_pause_inside_the_compound_s_read_past_the_validity_sends_no_delete(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    """The check is fresh when the compound starts, but its whole-row read before the delete
    stalls past the check's validity (a leader paused mid-read): the delete is not sent."""
    settings = tombstoning(tmp_path)
    await seed_acme_drift(settings)
    real_get = Collection.get

    def stalling_get(self: Collection, *args: Any, **kwargs: Any) -> Any:
        if "embeddings" in (kwargs.get("include") or ()):  # the reads of whole rows
            time.sleep(0.6)
        return real_get(self, *args, **kwargs)

    monkeypatch.setattr(Collection, "get", stalling_get)
    tombstoned, left = await _pass_under(settings, SlowFence(answer_s=0.0, valid_for_s=0.3))
    assert (tombstoned, left) == (0, 4)
    fenced_lines = [json.loads(line) for line in capsys.readouterr().err.splitlines()
                    if '"leadership.fenced"' in line]
    assert fenced_lines and "not sent" in fenced_lines[0]["reason"]
