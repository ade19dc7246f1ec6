"""The demo on a neo.mjs deployment's own graph (`kb-demo --neo`): a made-up checkout in a
folder of the demo's own, whose graph is the original's (the latest schema, E3) with what the
platform would already hold, so that the usual demo (`core.suite.demo.dataset`) then runs its drain
tick and report-only pass on the original's `Nodes`/`Edges` and tenant nodes.

The folder (`claim_neo_demo`): `kb.toml` (the daemons' config: `neoRoot` and, so that no
`NEO_*` variable of the operator's own deployment can redirect it, the graph and queue paths
spelled out; the embedded Chroma store, since the demo runs no server), `neo/` (the checkout:
`.neo-ai-data/sqlite/memory-core-graph.sqlite` and the E3 queue), `data/` (the daemons' data
folder). What the platform already holds (`seed_platform`): its frontier anchor, each demo
tenant's config node as its `setTenantConfig` writes it (version 1, the repo in `tenantRepos`)
and an `ingest` telemetry event per tenant as its recorder writes one.
"""

from __future__ import annotations

from pathlib import Path

import structlog

from core.base.config.config import Settings
from core.base.config.neo_layout import GRAPH_FILE, NEO_DATA_DIR, PLANE_QUEUE
from core.base.io.files import make_private_dirs
from core.base.rules.graph_schema import NeoEra
from core.base.rules.nodes import NodeRow
from core.base.rules.tenants import (
    TENANT_CONFIG_LABEL,
    original_config_properties,
    tenant_config_node_id,
)
from core.base.state.graph import upsert_nodes
from core.base.state.state import open_graph
from core.base.state.telemetry import record_ingestion_metric
from core.suite.demo.dataset import TENANTS, DemoTenant
from core.suite.demo.neo_folder import claim_demo_folder, create_original_graph, write_new_file

log = structlog.get_logger(__name__)

#: Where `kb-demo --neo` builds its checkout when no folder is named.
NEO_DEMO_FOLDER = ".kb-neo-demo"
#: The original's schema the demo graph has: its latest.
NEO_DEMO_ERA = NeoEra.E3
CHECKOUT = "neo"
DATA = "data"
CONFIG = "kb.toml"
#: Every entry the demo makes in its folder (and empties on the next run).
MADE = (CHECKOUT, DATA, CONFIG)
#: The platform's frontier node (its boot seeds it).
FRONTIER = NodeRow("frontier", "SYSTEM_ANCHOR", {"name": "Active Context Frontier",
                                                 "description": "The shifting focal point."})


def demo_config() -> str:
    """The daemons' config of the demo folder (its paths relative to the config's folder)."""
    return (
        "# Made by kb-demo --neo: the daemons on a made-up neo.mjs checkout.\n"
        "[knowledgeBase]\n"
        f'dataDir = "{DATA}"\n'
        f'neoRoot = "{CHECKOUT}"\n'
        "# Spelled out, so that no NEO_* variable of a real deployment redirects the demo.\n"
        f'graphDbPath = "{CHECKOUT}/{NEO_DATA_DIR}/{GRAPH_FILE}"\n'
        f'lazyEdgesQueuePath = "{CHECKOUT}/{PLANE_QUEUE}"\n'
        'graphSchema = "neo"\n'
        "# The embedded store: the demo runs no Chroma server (a deployment sets chromaUrl).\n"
        'chromaUrl = ""\n')


async def claim_neo_demo(folder: Path) -> Path:
    """Claim the folder (`core.suite.demo.neo_folder.claim_demo_folder`: exit 2 for one the
    demo did not make), write its config and make the checkout's graph (`NEO_DEMO_ERA`'s
    fresh boot: the config's `neoRoot` requires one); returns the config's path."""
    claim_demo_folder(folder, made=MADE)
    config = folder / CONFIG
    write_new_file(config, demo_config())
    await create_original_graph(folder / CHECKOUT / NEO_DATA_DIR / GRAPH_FILE, NEO_DEMO_ERA)
    return config


def platform_config(tenant: DemoTenant) -> NodeRow:
    """A tenant's config node as the original's `setTenantConfig` writes a new one, its repo
    declared in `tenantRepos` (a credential-free clone URL and a credential reference)."""
    node_id = tenant_config_node_id(tenant.tenant_id)
    properties, _ = original_config_properties(node_id, {}, exists=False)
    properties["tenantRepos"] = [{
        "cloneUrl": f"https://github.com/{tenant.repo_slug}.git",
        "credentialRef": "demo:none", "repoSlug": tenant.repo_slug}]
    return NodeRow(node_id, TENANT_CONFIG_LABEL, properties)


async def seed_platform(settings: Settings) -> None:
    """Write what the platform holds before the daemons run into the demo graph: its
    frontier, its tenant configs, its ingestion telemetry."""
    make_private_dirs(settings.drain.lazy_edges_queue_path.parent)
    graph = await open_graph(settings.state)
    try:
        async with graph.write() as tx:
            await upsert_nodes(tx, [FRONTIER, *(platform_config(t) for t in TENANTS)])
        for tenant in TENANTS:
            await record_ingestion_metric(
                graph, tenant_id=tenant.tenant_id, repo_slug=tenant.repo_slug,
                event_type="ingest", chunks_total=sum(tenant.chunks_by_version.values()))
    finally:
        await graph.close()
    log.info("demo.platform_seeded", graph=str(settings.state.graph_db_path),
             era=str(NEO_DEMO_ERA), tenants=len(TENANTS))
