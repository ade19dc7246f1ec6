"""Tenant configuration: the `kb-config:<tenantId>` nodes whose version stamps a tenant's chunks.

A tenant's current version is the yardstick of reconciliation: a chunk stamped with an older
`tenantConfigVersion` was ingested under a superseded configuration. The version lives in the
graph (label `KnowledgeBaseTenantConfig`, `properties.version` an integer >= 1); a tenant with
no node is at version 0, which means "nothing to reconcile", never "everything is stale".

Tenant ids are normalized as the original's `normalizeUserId` did: surrounding whitespace and
one leading `@` go, so `@alice` and `alice` are the same tenant everywhere (graph, Chroma
`where`, telemetry).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import structlog

from core.rules.nodes import NodeRow
from core.stores.clock import now_ms

if TYPE_CHECKING:
    from core.stores.sqlite import GraphDB

log = structlog.get_logger(__name__)

TENANT_CONFIG_LABEL = "KnowledgeBaseTenantConfig"
TENANT_CONFIG_PREFIX = "kb-config:"
#: The version of a tenant without a configuration node: nothing of it can be stale.
NO_CONFIG_VERSION = 0


@dataclass(frozen=True, slots=True)
class TenantConfig:
    """One tenant's configuration as stored in the graph."""

    tenant_id: str
    #: The current configuration version (>= 1 for a stored node; 0 when unreadable).
    version: int
    #: The repository the tenant's chunks come from, when known.
    repo_slug: str | None

    @property
    def node_id(self) -> str:
        """The graph id of this tenant's configuration node."""
        return tenant_config_node_id(self.tenant_id)

    def as_dict(self) -> dict[str, Any]:
        """The JSON shape used by `tenants list --json` and the reconcile figures."""
        return {"tenantId": self.tenant_id, "version": self.version, "repoSlug": self.repo_slug}


def normalize_tenant_id(raw: str) -> str:
    """The canonical tenant id: whitespace trimmed and one leading `@` removed.

    Raises ValueError for an id that is empty after normalizing: an empty tenant would match
    chunks that carry `tenantId: ""`, which no operator means.
    """
    tenant_id = raw.strip().removeprefix("@").strip()
    if not tenant_id:
        raise ValueError(f"tenant id {raw!r} is empty")
    return tenant_id


def tenant_config_node_id(tenant_id: str) -> str:
    """`kb-config:<tenantId>` for a (normalized here) tenant id."""
    return TENANT_CONFIG_PREFIX + normalize_tenant_id(tenant_id)


def version_from_properties(properties: Any) -> int:
    """The node's version when it is an integer >= 1 (a bool is not), else 0.

    Other programs write these nodes too; an unreadable version must make a tenant look
    unconfigured (nothing reconciled) rather than far ahead (everything stale).
    """
    if not isinstance(properties, dict):
        return NO_CONFIG_VERSION
    version = properties.get("version")
    if isinstance(version, int) and not isinstance(version, bool) and version >= 1:
        return version
    return NO_CONFIG_VERSION


def _repo_slug_from(properties: Any) -> str | None:
    slug = properties.get("repoSlug") if isinstance(properties, dict) else None
    return slug if isinstance(slug, str) and slug else None


def _properties_or_empty(properties_json: str) -> Any:
    try:
        return json.loads(properties_json)
    except ValueError:
        return {}


def _config_from_row(node_id: str, properties_json: str) -> TenantConfig:
    try:
        properties = json.loads(properties_json)
    except ValueError:
        log.warning("tenants.unreadable_properties", node=node_id)
        properties = None
    if properties is not None and version_from_properties(properties) == NO_CONFIG_VERSION:
        log.warning("tenants.invalid_version", node=node_id,
                    version=properties.get("version") if isinstance(properties, dict) else None)
    return TenantConfig(
        tenant_id=node_id[len(TENANT_CONFIG_PREFIX):],
        version=version_from_properties(properties),
        repo_slug=_repo_slug_from(properties),
    )


async def tenant_config(graph: GraphDB, tenant_id: str) -> TenantConfig | None:
    """A tenant's stored configuration, or None when it has no node."""
    node_id = tenant_config_node_id(tenant_id)
    rows = await graph.fetch_all(
        "SELECT id, properties FROM nodes WHERE id = ? AND label = ?",
        (node_id, TENANT_CONFIG_LABEL),
    )
    return _config_from_row(rows[0][0], rows[0][1]) if rows else None


async def tenant_version(graph: GraphDB, tenant_id: str) -> int:
    """A tenant's current configuration version; 0 when it has no configuration node."""
    config = await tenant_config(graph, tenant_id)
    return config.version if config is not None else NO_CONFIG_VERSION


async def set_tenant_config(
    graph: GraphDB, tenant_id: str, *, repo_slug: str | None = None
) -> TenantConfig:
    """Write a tenant's configuration and raise its version by one (the first write gives 1).

    The read of the old version and the write of the new one share one `BEGIN IMMEDIATE`
    transaction, so two concurrent `set-config` calls give two distinct versions instead of
    both writing the same one. Other properties of the node (written by the platform) are
    kept; `repoSlug` changes only when given.
    """
    node_id = tenant_config_node_id(tenant_id)
    if repo_slug is not None and not repo_slug.strip():
        raise ValueError("repo slug is empty")
    async with graph.write() as tx:
        async with tx.conn.execute(
            "SELECT properties FROM nodes WHERE id = ?", (node_id,)
        ) as cursor:
            row = await cursor.fetchone()
        old_properties = _properties_or_empty(row[0]) if row is not None else {}
        version = version_from_properties(old_properties) + 1
        properties: dict[str, Any] = {
            "tenantId": node_id[len(TENANT_CONFIG_PREFIX):],
            "version": version,
            "updatedAt": now_ms(),
        }
        if repo_slug is not None:
            properties["repoSlug"] = repo_slug.strip()
        await tx.upsert_nodes([NodeRow(node_id, TENANT_CONFIG_LABEL, properties)])
    config = TenantConfig(
        tenant_id=node_id[len(TENANT_CONFIG_PREFIX):],
        version=version,
        repo_slug=properties.get("repoSlug", _repo_slug_from(old_properties)),
    )
    log.info("tenants.config_set", tenant=config.tenant_id, version=version,
             repoSlug=config.repo_slug)
    return config


async def list_tenants(graph: GraphDB) -> list[TenantConfig]:
    """Every tenant with a configuration node, ordered by tenant id.

    This is the reconciliation pass's list of tenants: every configured tenant is visited,
    not only those that happen to have telemetry (the original's gap).
    """
    rows = await graph.fetch_all(
        # substr, not LIKE: LIKE is case-insensitive and would also list `KB-CONFIG:` nodes.
        "SELECT id, properties FROM nodes WHERE label = ? AND substr(id, 1, ?) = ? ORDER BY id",
        (TENANT_CONFIG_LABEL, len(TENANT_CONFIG_PREFIX), TENANT_CONFIG_PREFIX),
    )
    return [_config_from_row(r[0], r[1]) for r in rows if len(r[0]) > len(TENANT_CONFIG_PREFIX)]
