"""Are the tenant and repo a tenant command was given known? (`core.reconcile.rules.
tenant_names` decides; this reads the names: the graph's tenant nodes, and the knowledge base
only for a repo the tenant does not declare.) A refusal is a ConfigError: exit 2, one line,
nothing written."""

from __future__ import annotations

from typing import TYPE_CHECKING

from core.base.chroma import CollectionMissing
from core.base.rules.errors import ConfigError
from core.base.state.tenants import list_tenants, tenant_config
from core.reconcile.rules.manifests import REPO_KEY
from core.reconcile.rules.reconcile import TENANT_KEY
from core.reconcile.rules.tenant_names import (
    CREATE_HINT,
    declared_repos,
    repo_refusal,
    unknown_repo,
    unknown_tenant,
)
from core.reconcile.stores.tenant_manifests import all_manifests, tenant_manifests

if TYPE_CHECKING:
    from core.base.chroma import VectorStore
    from core.base.state.graph_db import GraphDB

#: What a refusal says to a command that cannot add a tenant itself.
SET_CONFIG_HINT = "set-config adds a tenant."
#: What `set-yield` says of a repo without a manifest.
MANIFEST_HINT = "A yield snapshot is recorded beside its manifest: run set-manifest first."


async def known_tenant_repos(graph: GraphDB, tenant_id: str, *, create: bool = False,
                             hint: str = CREATE_HINT) -> frozenset[str]:
    """The repos the tenant declares (`core.reconcile.rules.tenant_names.declared_repos`);
    ConfigError naming the configured tenants when it has no configuration and `create` is
    false."""
    config = await tenant_config(graph, tenant_id)
    if config is None and not create:
        known = [t.tenant_id for t in await list_tenants(graph)]
        raise ConfigError(unknown_tenant(tenant_id, known, hint=hint))
    manifests = await tenant_manifests(graph, tenant_id)
    return declared_repos(repo_slug=config.repo_slug if config else None,
                          tenant_repos=config.tenant_repos if config else None,
                          manifest_repos=manifests)


async def refuse_unknown_holder(graph: GraphDB, tenant_id: str) -> None:
    """ConfigError when the tenant has neither a configuration nor a manifest (what the
    removal commands and `show` can act on), naming the tenants that have one."""
    if await tenant_config(graph, tenant_id) is not None:
        return
    holders = {t for t, by_repo in (await all_manifests(graph)).items() if by_repo}
    if tenant_id in holders:
        return
    known = {t.tenant_id for t in await list_tenants(graph)} | holders
    raise ConfigError(unknown_tenant(tenant_id, known, hint=SET_CONFIG_HINT))


async def refuse_unknown_manifest(graph: GraphDB, tenant_id: str, repo_slug: str) -> None:
    """ConfigError when the repo has no usable manifest (a yield snapshot is read with its
    manifest, so one without would never count), naming the repos that have one."""
    manifests = await tenant_manifests(graph, tenant_id)
    if repo_slug not in manifests:
        raise ConfigError(unknown_repo(tenant_id, repo_slug, manifests, hint=MANIFEST_HINT,
                                       what="manifest of"))


async def has_repo_chunks(vectors: VectorStore, collection: str, *, tenant_id: str,
                          repo_slug: str) -> bool:
    """Whether the knowledge base holds a chunk of the tenant's repo (one `get` of at most
    one id; a collection that does not exist yet holds none)."""
    where = {"$and": [{TENANT_KEY: tenant_id}, {REPO_KEY: repo_slug}]}
    try:
        return await vectors.any_where(collection, where=where)
    except CollectionMissing:
        return False


async def refuse_unknown_repo(vectors: VectorStore, collection: str, *, tenant_id: str,
                              repo_slug: str, declared: frozenset[str], create: bool) -> None:
    """ConfigError when the tenant neither declares the repo nor has chunks of it and
    `create` is false (the knowledge base is read only for an undeclared repo)."""
    if create or repo_slug in declared:
        return
    chunks = await has_repo_chunks(vectors, collection, tenant_id=tenant_id,
                                   repo_slug=repo_slug)
    refusal = repo_refusal(tenant_id, repo_slug, declared, has_chunks=chunks, create=create)
    if refusal is not None:
        raise ConfigError(refusal)
