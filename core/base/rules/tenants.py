"""Tenant configuration (pure): tenant ids, and a tenant's version read from its node.

A tenant's current version is the yardstick of reconciliation: a chunk stamped with an older
`tenantConfigVersion` was ingested under a superseded configuration. The version lives in the
graph (node `kb-config:<tenantId>`, label `KnowledgeBaseTenantConfig`, `properties.version` an
integer >= 1); a tenant with no node is at version 0, which means "nothing to reconcile", never
"everything is stale".

Tenant ids are normalized: surrounding whitespace and one leading `@` go, so `@alice` and
`alice` are the same tenant everywhere (graph, Chroma `where`, telemetry).

On a neo.mjs graph the node is written as the original's `IngestionService.setTenantConfig`
writes it (`research/neo-deployment.md` §6): `tenantId`, `version`, `visibility: "team"` (its
row-filtered reads then find the node without a request context), the repos in
`tenantRepos` and no top-level `repoSlug`; a new node also gets the defaults the original
gives one (`original_config_properties`).
"""

from __future__ import annotations

import copy
import dataclasses
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from core.base.rules.camel_json import hidden
from core.base.rules.numbers import is_whole_number

TENANT_CONFIG_LABEL = "KnowledgeBaseTenantConfig"
TENANT_CONFIG_PREFIX = "kb-config:"
#: The version of a tenant without a configuration node: nothing of it can be stale.
NO_CONFIG_VERSION = 0
#: The `visibility` of the original's tenant nodes (its PR #11717): its row-filtered read
#: (`... OR json_extract(data, '$.properties.visibility') = 'team'`) finds such a node with
#: no request context, whatever its `user_id`.
TEAM_VISIBILITY = "team"
VISIBILITY_KEY = "visibility"
#: What the original's `setTenantConfig` writes into a config it creates from an empty
#: payload (`normalizeTenantRepoConfig({})`): written on a neo.mjs graph only when the node
#: is created, so a config the platform wrote keeps its own sources, parsers and repos.
ORIGINAL_CONFIG_DEFAULTS: dict[str, Any] = {
    "useDefaultSources": True, "rawRepoSource": False, "useDefaultParsers": True,
    "customSources": [], "customParsers": [], "sourcePaths": {}, "tenantRepos": []}


@dataclass(frozen=True, slots=True)
class TenantConfig:
    """One tenant's configuration as stored in the graph (its JSON: `tenantId`, `version`,
    `repoSlug`, as `tenants list --json` shows it)."""

    tenant_id: str
    #: The current configuration version (>= 1 for a stored node; 0 when unreadable).
    version: int
    #: The repository the tenant's chunks come from, when known.
    repo_slug: str | None
    #: `properties.reconciliationPolicy` as stored (read by `core.reconcile.rules.tenant_policy`).
    stored_policy: Any = field(default=None, compare=False, metadata=hidden())
    #: `properties.tenantRepos` as stored (read by `core.reconcile.rules.generations`).
    tenant_repos: Any = field(default=None, compare=False, metadata=hidden())

    @property
    def node_id(self) -> str:
        """The graph id of this tenant's configuration node."""
        return tenant_config_node_id(self.tenant_id)


@dataclass(frozen=True, slots=True)
class StoredConfig:
    """A configuration node as read, with what was wrong with it (for one warning)."""

    config: TenantConfig
    #: "unreadable-properties" or "invalid-version" when the node could not be used as is.
    problem: str | None = None
    #: The version value seen, when it was invalid.
    version_seen: Any = None


def normalize_tenant_id(raw: str) -> str:
    """The canonical tenant id (see the module docstring); ValueError when empty, as it would
    match chunks that carry `tenantId: ""`."""
    tenant_id = raw.strip().removeprefix("@").strip()
    if not tenant_id:
        raise ValueError(f"tenant id {raw!r} is empty")
    return tenant_id


def tenant_config_node_id(tenant_id: str) -> str:
    """`kb-config:<tenantId>` for a (normalized here) tenant id."""
    return TENANT_CONFIG_PREFIX + normalize_tenant_id(tenant_id)


def version_from_properties(properties: Any) -> int:
    """The node's version when it is an integer >= 1 (a bool is not), else 0: an unreadable
    version makes a tenant look unconfigured rather than far ahead (everything stale)."""
    if not isinstance(properties, dict):
        return NO_CONFIG_VERSION
    version = properties.get("version")
    if is_whole_number(version) and version >= 1:
        return version
    return NO_CONFIG_VERSION


def repo_slug_from(properties: Any) -> str | None:
    """`properties.repoSlug` when it is a non-empty string."""
    slug = properties.get("repoSlug") if isinstance(properties, dict) else None
    return slug if isinstance(slug, str) and slug else None


def properties_or_empty(properties_json: str) -> Any:
    """A node's properties, or {} when its JSON cannot be read."""
    try:
        return json.loads(properties_json)
    except ValueError:
        return {}


def config_from_row(node_id: str, properties_json: str) -> StoredConfig:
    """The configuration a `kb-config:` node holds; an unreadable node reads as version 0."""
    try:
        properties = json.loads(properties_json)
    except ValueError:
        properties = None
    config = TenantConfig(
        tenant_id=node_id[len(TENANT_CONFIG_PREFIX):],
        version=version_from_properties(properties),
        repo_slug=repo_slug_from(properties),
        stored_policy=properties.get("reconciliationPolicy")
        if isinstance(properties, dict) else None,
        tenant_repos=properties.get("tenantRepos") if isinstance(properties, dict) else None,
    )
    if properties is None:
        return StoredConfig(config, "unreadable-properties")
    if config.version == NO_CONFIG_VERSION:
        seen = properties.get("version") if isinstance(properties, dict) else None
        return StoredConfig(config, "invalid-version", seen)
    return StoredConfig(config)


def next_config_properties(
    node_id: str, old_properties: Any, *, repo_slug: str | None, now_ms: int
) -> tuple[dict[str, Any], TenantConfig]:
    """The properties `set-config` writes (the version raised by one, `repoSlug` changed only
    when given) and the configuration they make."""
    version = version_from_properties(old_properties) + 1
    tenant_id = node_id[len(TENANT_CONFIG_PREFIX):]
    properties: dict[str, Any] = {"tenantId": tenant_id, "version": version, "updatedAt": now_ms}
    if repo_slug is not None:
        properties["repoSlug"] = repo_slug.strip()
    config = TenantConfig(tenant_id, version,
                          properties.get("repoSlug", repo_slug_from(old_properties)))
    return properties, config


def original_config_properties(
    node_id: str, old_properties: Any, *, exists: bool
) -> tuple[dict[str, Any], TenantConfig]:
    """The properties `set-config` writes on a neo.mjs graph, as the original's
    `setTenantConfig` does (see the module docstring): the version raised by one (an
    unreadable one counts as 0), and the original's defaults only for a new node."""
    version = version_from_properties(old_properties) + 1
    tenant_id = node_id[len(TENANT_CONFIG_PREFIX):]
    properties: dict[str, Any] = {"tenantId": tenant_id}
    if not exists:
        properties.update(copy.deepcopy(ORIGINAL_CONFIG_DEFAULTS))
    properties.update({"version": version, VISIBILITY_KEY: TEAM_VISIBILITY})
    old = old_properties if isinstance(old_properties, dict) else {}
    return properties, TenantConfig(tenant_id, version, repo_slug_from(old_properties),
                                    tenant_repos=old.get("tenantRepos",
                                                         properties.get("tenantRepos")))


def team_visible(patch: dict[str, Any]) -> dict[str, Any]:
    """`patch` with `visibility: "team"`: a write of a tenant node on a neo.mjs graph leaves
    it readable by the original's row-filtered reads (research §2.2)."""
    return {**patch, VISIBILITY_KEY: TEAM_VISIBILITY}


def named_as_recorded(tenants: Sequence[TenantConfig],
                      recorded: Mapping[str, str]) -> list[TenantConfig]:
    """The tenants with the repo the original names their telemetry by on a neo.mjs graph:
    the smallest repo of each one's recorded events (`recorded`); a tenant without events
    keeps its own."""
    return [dataclasses.replace(t, repo_slug=recorded[t.tenant_id])
            if recorded.get(t.tenant_id) else t for t in tenants]
