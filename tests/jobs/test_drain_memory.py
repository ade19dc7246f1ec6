"""Bounded memory: a tick's peak RSS stays within 150 MB of an empty tick's, whatever the line
sizes. Each drain runs in a child process of its own (`tests.drain_memory_child`) that reports
`ru_maxrss`; the same child on an empty queue is the baseline, so imports and open stores
cancel out. Over-limit lines are never held: their bytes go to a side file, named with its
size and hash in the dead letter."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import pytest

from core.base.runtime.config_file import load_config
from core.base.state.graph import upsert_node
from core.base.state.state import open_graph
from tests.support import REPO, child_env

MIB = 1 << 20
#: The issue's bound on a tick's peak memory over an empty tick's.
MAX_GROWTH_BYTES = 150 * MIB
WRITE_CHUNK = 4 * MIB


def edge(rel: str, **extra: Any) -> bytes:
    return json.dumps({"source": "CONCEPT:a", "target": "CONCEPT:b", "relationship": rel,
                       **extra}).encode()


@dataclass
class World:
    config: Path
    queue: Path
    dead_letters: Path


async def make_world(root: Path) -> World:
    root.mkdir(parents=True)
    config = root / "kb.toml"
    config.write_text('[knowledgeBase]\ndataDir = "data"\nlogFormat = "json"\n')
    settings = load_config(str(config), environ={}).settings
    graph = await open_graph(settings.state)
    try:
        await upsert_node(graph, "CONCEPT:a", "CONCEPT")
        await upsert_node(graph, "CONCEPT:b", "CONCEPT")
    finally:
        await graph.close()
    settings.drain.lazy_edges_queue_path.parent.mkdir(parents=True, exist_ok=True)
    return World(config, settings.drain.lazy_edges_queue_path, settings.drain.dead_letter_path)


def write_huge_line(out: BinaryIO, size: int, rel: str) -> str:
    """A valid edge line of `size` bytes (a long property), written in chunks; its SHA-256."""
    head = edge(rel)[:-1] + b', "padding": "'
    tail = b'"}'
    digest = hashlib.sha256()
    remaining = size - len(head) - len(tail)
    for piece in (head, *_padding(remaining), tail):
        out.write(piece)
        digest.update(piece)
    out.write(b"\n")
    return digest.hexdigest()


def _padding(size: int) -> list[bytes]:
    chunk = b"x" * WRITE_CHUNK
    pieces = [chunk] * (size // WRITE_CHUNK)
    return [*pieces, b"x" * (size % WRITE_CHUNK)]


def run_tick(world: World, home: Path) -> dict[str, Any]:
    done = subprocess.run([sys.executable, "-m", "tests.drain_memory_child", str(world.config)],
                          cwd=REPO, env=child_env(home), capture_output=True, text=True,
                          timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    report: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return report


async def drain_huge_lines(tmp_path: Path, *, huge: int, size: int) -> None:
    empty = await make_world(tmp_path / "empty")
    world = await make_world(tmp_path / "huge")
    digests = []
    with world.queue.open("wb") as out:
        for i in range(huge):
            digests.append(write_huge_line(out, size, f"HUGE{i}"))
            out.write(edge(f"AFTER{i}") + b"\n")
    baseline = run_tick(empty, tmp_path / "home")
    report = run_tick(world, tmp_path / "home")

    growth = (report["peakKiB"] - baseline["peakKiB"]) * 1024
    assert growth <= MAX_GROWTH_BYTES, f"peak RSS grew {growth / MIB:.0f} MiB over an empty tick"
    drained = report["drain"]
    assert (drained["succeeded"], drained["skippedMalformed"]) == (huge, huge)
    assert not world.queue.exists()
    records = [json.loads(r) for r in world.dead_letters.read_bytes().splitlines()]
    assert len(records) == huge
    for record, digest in zip(records, digests, strict=True):
        assert record["reason"] == "malformed" and "line" not in record
        assert record["lineBytes"] == size and record["lineSha256"] == digest
        kept = world.dead_letters.parent / record["lineFile"]
        assert kept.stat().st_size == size
        assert _sha256_of(kept) == digest, "the side file holds the line's exact bytes"
        kept.unlink()  # hundreds of MB: not left for pytest's kept temp folders
    print(f"peak RSS over an empty tick: {growth / MIB:.1f} MiB")


def _sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as stream:
        while chunk := stream.read(WRITE_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


async def test_a_50_mb_line_is_kept_in_a_side_file_and_the_tick_stays_within_the_bound(
    tmp_path: Path,
) -> None:
    await drain_huge_lines(tmp_path, huge=2, size=50 * MIB)


async def test_a_400_mb_queue_of_50_mb_lines_stays_within_the_bound(tmp_path: Path) -> None:
    await drain_huge_lines(tmp_path, huge=8, size=50 * MIB)


def _dense_body(shape: str, size: int) -> bytes:
    """About `size` bytes of one JSON shape, to follow an edge's fields in an object."""
    if shape == "empty-lists":  # the JSON that grows most when parsed (~21x its bytes)
        return b'"p": [' + b"[]," * (size // 3) + b"[]]"
    if shape == "long-string":
        return b'"p": "' + b"x" * size + b'"'
    if shape == "top-level-keys":  # each a property: parsed into the line and its copy
        return b",".join(b'"k%07d": 0' % i for i in range(size // 14))
    return b'"p": [' + b'"ab",' * (size // 5) + b'"ab"]'  # short strings


@pytest.mark.parametrize("shape", ["empty-lists", "long-string", "top-level-keys",
                                   "short-strings"])
async def test_lines_just_under_the_limit_of_any_shape_stay_within_the_bound(
    tmp_path: Path, shape: str
) -> None:
    # A batch is bounded by its bytes and by a bound of its parsed size computed from them;
    # each shape here is valid, so it is parsed, planned, linked and stored.
    empty = await make_world(tmp_path / "empty")
    world = await make_world(tmp_path / shape)
    lines = 40
    with world.queue.open("wb") as out:
        for i in range(lines):
            out.write(edge(f"SHAPE{i}")[:-1] + b", " + _dense_body(shape, MIB - 300) + b"}\n")
    baseline = run_tick(empty, tmp_path / "home")
    report = run_tick(world, tmp_path / "home")
    growth = (report["peakKiB"] - baseline["peakKiB"]) * 1024
    print(f"{shape}: peak RSS over an empty tick: {growth / MIB:.1f} MiB")
    assert report["drain"]["succeeded"] == lines
    assert growth <= MAX_GROWTH_BYTES, f"peak RSS grew {growth / MIB:.0f} MiB over an empty tick"


async def test_failing_lines_cost_a_batch_of_memory_not_a_queue_of_it(tmp_path: Path) -> None:
    # What a tick keeps per failing line (dead letters, re-queued lines, what it remembers
    # about them) must be bounded by a batch: ten times the lines, about the same peak.
    empty = await make_world(tmp_path / "empty")
    baseline = run_tick(empty, tmp_path / "home")
    growth = {}
    for pairs in (20_000, 200_000):
        world = await make_world(tmp_path / f"failing-{pairs}")
        with world.queue.open("wb") as out:
            for i in range(pairs):  # a malformed line, and one re-queued: no such target
                out.write(b'{"source": "CONCEPT:a", "target": "CONCEPT:b", "x": NaN}\n')
                out.write(edge(f"R{i}").replace(b"CONCEPT:b", b"CONCEPT:ghost") + b"\n")
        report = run_tick(world, tmp_path / "home")
        assert (report["drain"]["skippedMalformed"], report["drain"]["requeued"]) == (
            pairs, pairs)
        growth[pairs] = (report["peakKiB"] - baseline["peakKiB"]) * 1024
    print({n: f"{g / MIB:.1f} MiB" for n, g in growth.items()})
    assert growth[200_000] <= MAX_GROWTH_BYTES
    assert growth[200_000] - growth[20_000] <= 15 * MIB, "memory grows with the queue"
