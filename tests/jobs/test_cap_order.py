"""Under the delete cap the oldest go first, across every reason (issue 31): one order, the
oldest `ingestedAt` of every reason together (config-stale chunks, manifest orphans of every
repo), then the smaller id; and `reconcile explain` marks beforehand exactly the chunks the
pass then deletes. Real SQLite, embedded Chroma."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from core.base.chroma import VectorStore
from core.base.rules.camel_json import to_json
from core.base.rules.tenants import TENANT_CONFIG_LABEL
from core.base.runtime.context import TickContext
from core.base.state.graph import upsert_node
from core.base.state.graph_db import GraphDB
from core.reconcile.explain_tenant import explain_tenant
from core.reconcile.reports.explain import render_plan
from core.reconcile.rules.manifests import RepoManifest
from core.reconcile.run_pass import reconcile_tick
from core.reconcile.stores.tenant_manifests import set_tenant_manifest
from core.suite.tick import run_tick
from tests.support import make_settings, read_archived_chunks, seed

KB = "neo-knowledge-base"
MANIFEST_AT = int(time.time() * 1000) - 3_600_000
BASE = MANIFEST_AT - 10_000


def chunk(row_id: str, *, repo: str, path: str, stamp: int = 3,
          ingested: int) -> tuple[str, dict[str, Any]]:
    return row_id, {"tenantId": "acme", "repoSlug": repo, "sourcePath": path,
                    "tenantConfigVersion": stamp, "ingestedAt": ingested}


#: 20 actionable chunks: 5 config-stale (the newest of all), 8 orphans of repo r and 7 of repo
#: s interleaved in time; r#03 and s#02 tie at BASE + 50 (the id decides).
STALE = [chunk(f"stale#{i}", repo="r", path="keep.md", stamp=1, ingested=BASE + 900 + i)
         for i in range(5)]
R_AT = [0, 20, 40, 50, 70, 90, 110, 130]
S_AT = [10, 30, 50, 60, 80, 100, 120]
ORPHANS = ([chunk(f"r#{i:02}", repo="r", path=f"gone-r{i}.md", ingested=BASE + at)
            for i, at in enumerate(R_AT)]
           + [chunk(f"s#{i:02}", repo="s", path=f"gone-s{i}.md", ingested=BASE + at)
              for i, at in enumerate(S_AT)])
LIVE = [chunk("live-r", repo="r", path="keep.md", ingested=BASE),
        chunk("live-s", repo="s", path="keep.md", ingested=BASE)]
#: The 11 oldest of the 20: the config-stale ones are the newest, so none of them.
FIRST_11 = {"r#00", "s#00", "r#01", "s#01", "r#02", "r#03", "s#02", "s#03", "r#04", "s#04",
            "r#05"}


async def test_a_capped_pass_deletes_the_oldest_of_every_reason_then_by_id(
    tmp_path: Path, graph: GraphDB, vectors: VectorStore
) -> None:
    await upsert_node(graph, "kb-config:acme", TENANT_CONFIG_LABEL,
                      {"version": 3, "repoSlug": "r"})
    for slug in ("r", "s"):
        await set_tenant_manifest(graph, "acme", RepoManifest(slug, ("keep.md",), MANIFEST_AT))
    await seed(vectors, KB, STALE + ORPHANS + LIVE)
    settings = make_settings(tmp_path, reconciliationEnabled=True,
                             reconciliationAutoTombstone=True,
                             reconciliationMaxStaleFraction=1.0,
                             reconciliationManifestGraceMs=0,
                             reconciliationMaxDeletesPerTick=11)
    stores = TickContext(settings, graph, vectors)

    plan = await explain_tenant(stores, "acme")
    marked = {c["id"] for c in to_json(plan)["chunks"] if c["wouldDelete"]}
    assert marked == FIRST_11
    text = render_plan(plan)
    assert sum("delete this pass" in line for line in text.splitlines()) == 11

    figures = (await run_tick("reconcile", stores, reconcile_tick, dry_run=False)).json()
    [acme] = [t for t in figures["tenants"] if t["tenantId"] == "acme"]
    assert (acme["actionableCount"], acme["tombstonedCount"]) == (20, 11)
    left = {r.id for page in [p async for p in vectors.scan(KB, include=())] for r in page}
    assert left == {r for r, _ in STALE + ORPHANS + LIVE} - FIRST_11
    archived = {c.row.id for a in figures["archives"] for _, c in read_archived_chunks(Path(a))}
    assert archived == FIRST_11
