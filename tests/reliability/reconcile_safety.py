"""Randomized reconciliation safety: random tenants, stamps, `ingestedAt` values, versions and
guards; the pass may delete only what the rules allow, never more than the cap, and every
deleted chunk must come back exactly from its archive.

The plan is computed here from the rules as CONTRACT states them, independently of the
engine: a chunk is actionable when its stamp is a real, finite number (not a boolean) below
the tenant's version by at least the gap; it may be deleted when its `ingestedAt` is a real
number not later than the pass, or when it has none or a string (CONTRACT "Tombstones": an
actionable chunk without a numeric `ingestedAt` is deletable too, by a path that is just as
race-safe), never when it is later than the pass (nothing could tell a rewrite of it from
its archived content); a tenant whose actionable share of all its chunks exceeds
`reconciliationMaxStaleFraction` loses nothing; at most the cap goes per pass.
"""

from __future__ import annotations

import asyncio
import math
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from core.base.chroma import VectorStore
from core.base.io.clock import now_ms
from core.base.rules.rows import ChromaRow
from core.base.runtime.context import TickContext
from core.base.state.state import open_graph
from core.base.state.tenants import set_tenant_config
from core.reconcile.archives.restore import restore_archive
from core.reconcile.run_pass import reconcile_tick
from tests.support import embedding_for, make_settings


@dataclass
class SafetyFigures:
    """What the randomized passes did, against the plan."""

    trials: int = 0
    chunks: int = 0
    deleted: int = 0
    deleted_outside_plan: int = 0
    over_cap: int = 0
    not_restored_exactly: int = 0
    mismatches: list[str] = field(default_factory=list)

    def row(self) -> dict[str, Any]:
        return {"reconcileTrials": self.trials, "chunksSeeded": self.chunks,
                "chunksDeleted": self.deleted,
                "chunksDeletedOutsidePlan": self.deleted_outside_plan + self.over_cap,
                "chunksNotRestoredExactly": self.not_restored_exactly}


def _random_stamp(rng: random.Random) -> Any:
    return rng.choice([
        None, rng.randint(0, 6), rng.randint(0, 6), rng.uniform(0, 6), str(rng.randint(0, 6)),
        True, False, rng.randint(0, 6)])


def _random_ingested_at(rng: random.Random) -> Any:
    """Mostly epoch ms with many equal values (one ingest stamps a whole file), sometimes
    missing, text, a flag or the far future."""
    return rng.choice([None, "2024-01-01", True, 10**15, *([1_700_000_000_000 + rng.randint(0, 9)]
                                                            * 6), rng.uniform(0, 9)])


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _actionable(stamp: Any, version: int, gap: float) -> bool:
    return _number(stamp) and bool(stamp < version) and version - stamp >= gap


def _deletable(metadata: dict[str, Any], version: int, gap: float, now: int) -> bool:
    when: Any = metadata.get("ingestedAt")
    without_a_time = when is None or isinstance(when, str)
    return (_actionable(metadata.get("tenantConfigVersion"), version, gap)
            and (without_a_time or (_number(when) and when <= now)))


async def _one_trial(root: Path, rng: random.Random, figures: SafetyFigures) -> None:
    gap = rng.choice([1, 2, 2.5, 3])
    cap = rng.choice([0, 5, 40, 10_000])
    fraction = rng.choice([0.2, 0.5, 1.0])
    settings = make_settings(root, reconciliationEnabled=True, reconciliationAutoTombstone=True,
                             reconciliationOrphanVersionGap=gap,
                             reconciliationMaxDeletesPerTick=cap,
                             reconciliationMaxStaleFraction=fraction)
    tenants = {f"t{i}": rng.randint(0, 6) for i in range(rng.randint(1, 4))}
    rows: list[ChromaRow] = []
    for tenant in [*tenants, "unconfigured"]:
        for n in range(rng.randint(0, 80)):
            metadata: dict[str, Any] = {"tenantId": tenant, "repoSlug": "r", "sourcePath": f"{n}"}
            stamp = _random_stamp(rng)
            if stamp is not None:
                metadata["tenantConfigVersion"] = stamp
            when = _random_ingested_at(rng)
            if when is not None:
                metadata["ingestedAt"] = when
            row_id = f"{tenant}-{n}"
            rows.append(ChromaRow(row_id, metadata, f"doc {row_id}", embedding_for(row_id)))
    vectors = await VectorStore.open(settings.chroma)
    graph = await open_graph(settings.state)
    try:
        collection = settings.chroma.knowledge_base_collection
        await vectors.upsert(collection, rows, create=True)
        for tenant, version in tenants.items():
            for _ in range(version):
                await set_tenant_config(graph, tenant, repo_slug="r")
        # Compare restores with what Chroma held before the pass, not with what we wrote:
        # Chroma may round a float's last digit on the way in (1.3969716813913293 is read back
        # as 1.396971681391329), and a restore must give back what was there.
        before = {r.id: r for r in await vectors.get_by_ids(
            collection, [r.id for r in rows], include=("metadatas", "documents", "embeddings"))}
        await reconcile_tick(TickContext(settings, graph, vectors), False)
        left = {r.id for r in await vectors.get_by_ids(collection, [r.id for r in rows],
                                                        include=())}
        deleted = {r.id for r in rows} - left
        by_id = before
        held = [before.get(r.id, r) for r in rows]
        for tenant in [*tenants, "unconfigured"]:
            own = [r for r in held if r.metadata["tenantId"] == tenant]
            version = tenants.get(tenant, 0)
            actionable = [r for r in own if version > 0 and _actionable(
                r.metadata.get("tenantConfigVersion"), version, gap)]
            allowed = {r.id for r in actionable
                       if _deletable(dict(r.metadata), version, gap, now_ms())}
            if own and len(actionable) / len(own) > fraction:
                allowed = set()
            gone = {r.id for r in own} & deleted
            figures.deleted_outside_plan += len(gone - allowed)
            figures.over_cap += max(0, len(gone) - cap)
        figures.deleted += len(deleted)
        figures.chunks += len(rows)
        for archive in sorted(settings.tombstones_dir.glob("*.jsonl")):
            await restore_archive(vectors, archive, collection=collection)
        restored = await vectors.get_by_ids(collection, sorted(deleted),
                                            include=("metadatas", "documents", "embeddings"))
        exact = {r.id for r in restored
                 if r.metadata == by_id[r.id].metadata and r.document == by_id[r.id].document
                 and r.embedding is not None
                 and all(math.isclose(a, b, rel_tol=1e-6) for a, b in
                         zip(r.embedding, by_id[r.id].embedding or [], strict=True))}
        figures.not_restored_exactly += len(deleted - exact)
        restored_by_id = {r.id: r for r in restored}
        for row_id in sorted(deleted - exact)[:3]:
            got = restored_by_id.get(row_id)
            figures.mismatches.append(
                f"{row_id}: seeded {by_id[row_id].metadata} / {by_id[row_id].document}; "
                f"restored {got.metadata if got else None} / {got.document if got else None}")
        figures.trials += 1
    finally:
        await graph.close()
        await vectors.close()


def reconcile_trials(root: Path, *, trials: int, seed_value: int = 11) -> SafetyFigures:
    """Run `trials` randomized passes, each in a fresh store under `root`."""
    rng = random.Random(seed_value)
    figures = SafetyFigures()
    for trial in range(trials):
        asyncio.run(_one_trial(root / f"trial-{trial}", rng, figures))
    return figures
