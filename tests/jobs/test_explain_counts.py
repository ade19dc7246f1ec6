"""`reconcile explain` on a tenant whose chunks were counted only as far as the stale-fraction
guard needed: the plan says so in words ("of at least N chunks", and why), never with a bare
"+". Real SQLite, embedded Chroma."""

from __future__ import annotations

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
from tests.support import make_settings, seed

KB = "neo-knowledge-base"


def chunk(row_id: str, *, stamp: int) -> tuple[str, dict[str, Any]]:
    return row_id, {"tenantId": "acme", "repoSlug": "r", "sourcePath": f"{row_id}.md",
                    "tenantConfigVersion": stamp, "ingestedAt": 1_000}


async def test_a_count_stopped_early_reads_as_at_least_with_its_reason(
    tmp_path: Path, graph: GraphDB, vectors: VectorStore
) -> None:
    await upsert_node(graph, "kb-config:acme", TENANT_CONFIG_LABEL, {"version": 3})
    await seed(vectors, KB, [chunk(f"stale-{i}", stamp=1) for i in range(4)]
               + [chunk(f"live-{i}", stamp=3) for i in range(60)])
    settings = make_settings(tmp_path, reconciliationEnabled=True,
                             reconciliationMaxStaleFraction=0.5)
    plan = await explain_tenant(TickContext(settings, graph, vectors), "acme")

    guards = to_json(plan)["guards"]
    assert guards["actionableCount"] == 4 and guards["totalComplete"] is False
    counted = guards["totalChunks"]
    assert 8 <= counted < 64, "counted only as far as the guard's answer needed"
    text = render_plan(plan)
    assert (f"actionable 4 of at least {counted:,} chunks (counted until the stale-fraction "
            "guard could no longer hold the pass)") in text
    assert "+ chunks" not in text
