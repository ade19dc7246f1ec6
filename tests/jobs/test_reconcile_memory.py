"""Bounded memory: a reconcile pass over many tenants holds a page, not the collection.

Each pass runs in a child process of its own (`benchmarks.scale_bench`), measured as a
daemon's later passes are: store open and the collection touched once, since embedded Chroma
loads a collection's whole vector index on its first touch (any read) and keeps it, whoever
reads (~106 MB at 200,000 chunks of 8 numbers; reported apart as `storeLoadMiB`). What is left
is the pass's own peak growth; over four times the chunks it may rise by no more than its
floor's did (the bare paged scan for the dry pass; that scan plus the deletes by ids for the
tombstoning pass) plus a small margin: glibc's per-thread arenas make any process's growth
wander by a few tens of MB, so a bound relative to the floor's, on the same stores, is what
says the pass does not hold the data.

Marked slow (about two minutes, most of it seeding 250,000 chunks):
`python -m pytest -m slow tests/jobs/test_reconcile_memory.py`.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from benchmarks.harness import child_env, copy_data, run_child
from benchmarks.scale_bench import FLOOR_OF, MAX_RSS_GROWTH_MIB, MODULE, stale_count

TENANTS = 1_000
SMALL, LARGE = 50_000, 200_000
#: How much more the pass's growth may rise from SMALL to LARGE than its floor's did: a
#: few pages and the per-tenant figures, never a share of the 150,000 extra chunks (their
#: metadata alone is ~60 MB as Python objects).
MAX_EXTRA_GROWTH_MIB = 25.0


def seeded(workdir: Path, chunks: int) -> Path:
    root = workdir / f"seed-{chunks}"
    run_child(MODULE, ["--seed", str(root), "--tenants", str(TENANTS), "--chunks", str(chunks)],
              env=child_env(workdir), timeout_s=900)
    return root


def growth(workdir: Path, seed: Path, contender: str) -> tuple[float, dict[str, object]]:
    root = copy_data(seed, workdir / f"{contender}-{seed.name}-{uuid.uuid4().hex[:6]}")
    report = run_child(MODULE, ["--contender", contender, "--data", str(root)],
                       env=child_env(workdir), timeout_s=900).report
    return float(report["peakRssGrowthMiB"]), report


@pytest.mark.slow
@pytest.mark.parametrize("contender", ["dry", "tombstone"])
def test_a_fleet_pass_grows_by_a_page_not_by_the_collection(
    tmp_path: Path, contender: str
) -> None:
    small_seed, large_seed = seeded(tmp_path, SMALL), seeded(tmp_path, LARGE)
    small, small_report = growth(tmp_path, small_seed, contender)
    large, large_report = growth(tmp_path, large_seed, contender)
    floor_small, _ = growth(tmp_path, small_seed, FLOOR_OF[contender])
    floor_large, _ = growth(tmp_path, large_seed, FLOOR_OF[contender])
    assert small_report["stale"] == stale_count(TENANTS, SMALL)
    assert large_report["stale"] == stale_count(TENANTS, LARGE)
    if contender == "tombstone":
        assert large_report["tombstoned"] == stale_count(TENANTS, LARGE)
    assert (large - small) - (floor_large - floor_small) <= MAX_EXTRA_GROWTH_MIB, (
        small, large, floor_small, floor_large)
    assert large <= MAX_RSS_GROWTH_MIB, (large, large_report["storeLoadMiB"])
