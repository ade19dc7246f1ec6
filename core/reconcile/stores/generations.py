"""A tenant's declared generations (`tenantRepos` of `kb-config:<tenantId>`) and its repos'
extraction snapshots (in `kb-manifest:<tenantId>`): the statements. The rules are
`core.reconcile.rules.generations.orphans`'."""

from __future__ import annotations

from typing import Any

import structlog

from core.base.rules.nodes import NodeRow
from core.base.rules.tenants import (
    TENANT_CONFIG_LABEL,
    properties_or_empty,
    team_visible,
    tenant_config_node_id,
)
from core.base.state.graph import original_tenants, upsert_nodes
from core.base.state.graph_db import GraphDB
from core.reconcile.rules.generations.extraction_snapshot import ExtractionSnapshot
from core.reconcile.rules.generations.orphans import (
    TENANT_REPOS_KEY,
    RepoGeneration,
    declared_in_place,
    replaced_repos,
    snapshot_patch,
)
from core.reconcile.rules.manifests import (
    MANIFEST_LABEL,
    manifest_node_id,
    manifests_from_properties,
)

log = structlog.get_logger(__name__)

async def set_tenant_repo(graph: GraphDB, tenant_id: str, slug: str,
                          entry: RepoGeneration | None) -> list[Any]:
    """Replace (or with None remove) one repo's `tenantRepos` entry in one transaction; the
    version is never raised (a declaration changes which rows are of an old generation, not
    which config is current). Returns the list stored. LookupError for a tenant without a
    configuration node (a pass never visits it). On a neo.mjs graph the generation goes into
    the platform's own entry of the repo, which keeps its other keys, and a repo without one
    is a LookupError (`core.reconcile.rules.generations.orphans.declared_in_place`)."""
    node_id = tenant_config_node_id(tenant_id)
    async with graph.write() as tx:
        rows = await tx.query(tx.sql.node_by_id_and_label, (node_id, TENANT_CONFIG_LABEL))
        if not rows:
            raise LookupError(f"tenant {tenant_id!r} has no configuration (run set-config first)")
        old = properties_or_empty(rows[0][1])
        stored = old.get(TENANT_REPOS_KEY) if isinstance(old, dict) else None
        original = original_tenants(tx)
        repos = (declared_in_place if original else replaced_repos)(stored, slug, entry)
        patch: dict[str, Any] = {TENANT_REPOS_KEY: repos}
        await upsert_nodes(tx, [NodeRow(node_id, TENANT_CONFIG_LABEL,
                                        team_visible(patch) if original else patch)])
    log.info("tenants.repo_set", tenant=tenant_id, repoSlug=slug,
             entry=entry.stored() if entry else None)
    return repos


async def set_extraction_snapshot(graph: GraphDB, tenant_id: str, slug: str,
                                  snapshot: ExtractionSnapshot) -> None:
    """Replace one repo's extraction snapshot beside its manifest (whose `pathsAfterPush` is
    kept), in one transaction. LookupError when the repo has no usable manifest: a snapshot
    is read with its manifest, so one without would never count. On a neo.mjs graph the node
    also stays `visibility: "team"`; the manifest's `updatedAt` is left as it is (it fences
    the manifest's own verdicts, which a snapshot does not change)."""
    node_id = manifest_node_id(tenant_id)
    async with graph.write() as tx:
        rows = await tx.query(tx.sql.node_by_id_and_label, (node_id, MANIFEST_LABEL))
        manifests = manifests_from_properties(properties_or_empty(rows[0][1])) if rows else {}
        if slug not in manifests:
            raise LookupError(f"repo {slug!r} of tenant {tenant_id!r} has no manifest "
                              "(run set-manifest first)")
        patch = snapshot_patch(slug, snapshot)
        await upsert_nodes(tx, [NodeRow(node_id, MANIFEST_LABEL,
                                        team_visible(patch) if original_tenants(tx)
                                        else patch)])
    log.info("tenants.yield_set", tenant=tenant_id, repoSlug=slug,
             paths=len(snapshot.yielded_source_paths),
             extractionIdentity=snapshot.extraction_identity, updatedAt=snapshot.updated_at)
