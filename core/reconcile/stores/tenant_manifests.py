"""Tenant manifest nodes (`kb-manifest:<tenantId>`) in the graph: read one, read all, replace a
repo's manifest, remove a repo's manifest or yield snapshot. The shape and its rules are
`core.reconcile.rules.manifests`' (and `manifest_removal`'s); this module holds the statements.
"""

from __future__ import annotations

import structlog

from core.base.rules.nodes import NodeRow
from core.base.rules.tenants import properties_or_empty, team_visible
from core.base.state.graph import original_tenants, rewrite_node_keys, upsert_nodes
from core.base.state.graph_db import GraphDB
from core.reconcile.rules.manifest_removal import (
    Removal,
    removable_repos,
    without_manifest,
    without_snapshot,
)
from core.reconcile.rules.manifests import (
    MANIFEST_LABEL,
    MANIFEST_PREFIX,
    MANIFESTS_PROPERTY,
    RepoManifest,
    manifest_node_id,
    manifest_patch,
    manifests_from_properties,
    original_manifest_patch,
)

log = structlog.get_logger(__name__)


async def tenant_manifests(graph: GraphDB, tenant_id: str) -> dict[str, RepoManifest]:
    """A tenant's usable manifests by repo ({} when it has none)."""
    rows = await graph.query(graph.sql.node_by_id_and_label,
                             (manifest_node_id(tenant_id), MANIFEST_LABEL))
    return manifests_from_properties(properties_or_empty(rows[0][1])) if rows else {}


async def all_manifests(graph: GraphDB) -> dict[str, dict[str, RepoManifest]]:
    """Every tenant's usable manifests, by tenant then repo, in one query (a pass reads them
    once for all its tenants)."""
    rows = await graph.query(graph.sql.nodes_by_label_and_prefix,
                             (MANIFEST_LABEL, len(MANIFEST_PREFIX), MANIFEST_PREFIX))
    return {node_id[len(MANIFEST_PREFIX):]: manifests_from_properties(properties_or_empty(p))
            for node_id, p in rows}


async def set_tenant_manifest(graph: GraphDB, tenant_id: str, manifest: RepoManifest) -> None:
    """Replace one repo's manifest (the other repos' are kept), in one transaction; on a
    neo.mjs graph as the original writes it
    (`core.reconcile.rules.manifests.original_manifest_patch`)."""
    node_id = manifest_node_id(tenant_id)
    async with graph.write() as tx:
        if original_tenants(tx):
            rows = await tx.query(tx.sql.node_properties, (node_id,))
            patch = original_manifest_patch(
                tenant_id, manifest, properties_or_empty(rows[0][0]) if rows else {})
        else:
            patch = manifest_patch(tenant_id, manifest)
        await upsert_nodes(tx, [NodeRow(node_id, MANIFEST_LABEL, patch)])
    log.info("tenants.manifest_set", tenant=tenant_id, repoSlug=manifest.repo_slug,
             paths=len(manifest.paths_after_push), revision=manifest.revision,
             updatedAt=manifest.updated_at)


async def remove_manifest_entry(graph: GraphDB, tenant_id: str, repo_slug: str, *,
                                snapshot_only: bool) -> Removal:
    """Remove the repo's manifest entry (or, `snapshot_only`, only its yield snapshot) in one
    transaction, by writing the node's `manifests` map without it
    (`core.reconcile.rules.manifest_removal`); on a neo.mjs graph the node also stays
    `visibility: "team"`. Nothing to remove writes nothing."""
    node_id = manifest_node_id(tenant_id)
    async with graph.write() as tx:
        rows = await tx.query(tx.sql.node_by_id_and_label, (node_id, MANIFEST_LABEL))
        stored = properties_or_empty(rows[0][1]) if rows else {}
        kept = (without_snapshot if snapshot_only else without_manifest)(stored, repo_slug)
        if kept is None:
            return Removal(False, removable_repos(stored, snapshot_only=snapshot_only))
        patch = {MANIFESTS_PROPERTY: kept}
        await rewrite_node_keys(tx, NodeRow(node_id, MANIFEST_LABEL,
                                            team_visible(patch) if original_tenants(tx)
                                            else patch))
    log.info("tenants.yield_removed" if snapshot_only else "tenants.manifest_removed",
             tenant=tenant_id, repoSlug=repo_slug)
    return Removal(True)
