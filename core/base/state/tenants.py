"""Tenant configuration nodes (`kb-config:<tenantId>`) in the graph: read, list, raise.

The parsing of a node is `core.base.rules.tenants`'; this module holds the statements.
"""

from __future__ import annotations

from typing import Any

import structlog

from core.base.io.clock import now_ms
from core.base.rules.nodes import NodeRow
from core.base.rules.tenants import (
    NO_CONFIG_VERSION,
    TENANT_CONFIG_LABEL,
    TENANT_CONFIG_PREFIX,
    StoredConfig,
    TenantConfig,
    config_from_row,
    next_config_properties,
    original_config_properties,
    properties_or_empty,
    team_visible,
    tenant_config_node_id,
)
from core.base.state.graph import original_tenants, upsert_nodes
from core.base.state.graph_db import GraphDB

log = structlog.get_logger(__name__)



def _logged(stored: StoredConfig, node_id: str) -> TenantConfig:
    """The configuration, with one warning when the node could not be used as it is."""
    if stored.problem == "unreadable-properties":
        log.warning("tenants.unreadable_properties", node=node_id)
    elif stored.problem == "invalid-version":
        log.warning("tenants.invalid_version", node=node_id, version=stored.version_seen)
    return stored.config


async def tenant_config(graph: GraphDB, tenant_id: str) -> TenantConfig | None:
    """A tenant's stored configuration, or None when it has no node."""
    node_id = tenant_config_node_id(tenant_id)
    rows = await graph.query(graph.sql.node_by_id_and_label, (node_id, TENANT_CONFIG_LABEL))
    return _logged(config_from_row(rows[0][0], rows[0][1]), rows[0][0]) if rows else None


async def tenant_version(graph: GraphDB, tenant_id: str) -> int:
    """A tenant's current configuration version; 0 when it has no configuration node."""
    config = await tenant_config(graph, tenant_id)
    return config.version if config is not None else NO_CONFIG_VERSION


async def set_tenant_config(
    graph: GraphDB, tenant_id: str, *, repo_slug: str | None = None
) -> TenantConfig:
    """Write a tenant's configuration and raise its version by one (the first write gives 1).

    The old version is read in the write transaction, so two concurrent calls give two
    distinct versions. The node's other properties are kept. On a neo.mjs graph the node is
    written as the original writes it, and a `repo_slug` is a ValueError.
    """
    node_id = tenant_config_node_id(tenant_id)
    if repo_slug is not None and not repo_slug.strip():
        raise ValueError("repo slug is empty")
    if repo_slug is not None and original_tenants(graph):
        raise ValueError("a neo.mjs graph keeps a tenant's repos in tenantRepos, never in a "
                         "top-level repoSlug: set-config without --repo-slug")
    async with graph.write() as tx:
        rows = await tx.query(tx.sql.node_properties, (node_id,))
        old_properties = properties_or_empty(rows[0][0]) if rows else {}
        if original_tenants(tx):
            properties, config = original_config_properties(node_id, old_properties,
                                                            exists=bool(rows))
        else:
            properties, config = next_config_properties(node_id, old_properties,
                                                        repo_slug=repo_slug, now_ms=now_ms())
        await upsert_nodes(tx, [NodeRow(node_id, TENANT_CONFIG_LABEL, properties)])
    log.info("tenants.config_set", tenant=config.tenant_id, version=config.version,
             repoSlug=config.repo_slug)
    return config


async def list_tenants(graph: GraphDB) -> list[TenantConfig]:
    """Every tenant with a configuration node, ordered by tenant id: the pass's tenants."""
    rows = await graph.query(
        graph.sql.nodes_by_label_and_prefix,
        (TENANT_CONFIG_LABEL, len(TENANT_CONFIG_PREFIX), TENANT_CONFIG_PREFIX))
    return [_logged(config_from_row(r[0], r[1]), r[0])
            for r in rows if len(r[0]) > len(TENANT_CONFIG_PREFIX)]


async def set_tenant_policy(graph: GraphDB, tenant_id: str, patch: dict[str, Any]) -> TenantConfig:
    """Merge a policy patch into an existing tenant's configuration node, in one transaction,
    never raising the version (a policy changes what is done about stale chunks, not which are
    stale). LookupError for a tenant without a configuration node. On a neo.mjs graph the node
    stays `visibility: "team"` (so the original's row-filtered reads find it).
    """
    node_id = tenant_config_node_id(tenant_id)
    async with graph.write() as tx:
        rows = await tx.query(tx.sql.node_by_id_and_label, (node_id, TENANT_CONFIG_LABEL))
        if not rows:
            raise LookupError(f"tenant {tenant_id!r} has no configuration (run set-config first)")
        if original_tenants(tx):
            patch = team_visible(patch)
        await upsert_nodes(tx, [NodeRow(node_id, TENANT_CONFIG_LABEL, patch)])
        rows = await tx.query(tx.sql.node_by_id_and_label, (node_id, TENANT_CONFIG_LABEL))
    config = config_from_row(rows[0][0], rows[0][1]).config
    log.info("tenants.policy_set", tenant=config.tenant_id, policy=config.stored_policy)
    return config
