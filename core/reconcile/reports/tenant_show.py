"""`tenants show TENANT`: a tenant's version, repo, the reconciliation policy in force (and
where each value comes from) and its manifests. Read-only; never opens Chroma.
"""

from __future__ import annotations

from dataclasses import dataclass

from core.base.config.config import Settings
from core.base.rules.tenants import NO_CONFIG_VERSION
from core.base.rules.timestamps import iso_from_ms
from core.base.state.graph_db import GraphDB
from core.base.state.tenants import tenant_config
from core.reconcile.rules.manifests import RepoManifest
from core.reconcile.rules.tenant_policy import PolicyValue, TenantPolicy, resolve_tenant_policy
from core.reconcile.stores.tenant_manifests import tenant_manifests


@dataclass(frozen=True, slots=True)
class ManifestShown:
    """One repo's manifest as `show` lists it."""

    repo_slug: str
    path_count: int
    updated_at: int | float
    updated_at_iso: str
    revision: str | None

    @classmethod
    def of(cls, manifest: RepoManifest) -> ManifestShown:
        """The listing of a manifest."""
        try:
            iso = iso_from_ms(int(manifest.updated_at))
        except (ValueError, OverflowError, OSError):  # another writer's out-of-range time
            iso = str(manifest.updated_at)
        return cls(manifest.repo_slug, len(manifest.paths_after_push), manifest.updated_at,
                   iso, manifest.revision)


@dataclass(frozen=True, slots=True)
class PolicyShown:
    """The policy in force, each value with its source."""

    orphan_version_gap: PolicyValue
    manifest_grace_ms: PolicyValue
    auto_tombstone: PolicyValue
    #: What the tenant's node says for autoTombstone (`inherit`, `on`, `off`).
    auto_tombstone_setting: str
    invalid_keys: tuple[str, ...]

    @classmethod
    def of(cls, policy: TenantPolicy) -> PolicyShown:
        """The view of a resolved policy."""
        return cls(policy.orphan_version_gap, policy.manifest_grace_ms, policy.auto_tombstone,
                   policy.auto_tombstone_setting, policy.invalid_keys)


@dataclass(frozen=True, slots=True)
class TenantShown:
    """Everything `tenants show` prints (`--json`: this object)."""

    tenant_id: str
    configured: bool
    version: int
    repo_slug: str | None
    policy: PolicyShown
    manifests: tuple[ManifestShown, ...]


async def gather_tenant(graph: GraphDB, settings: Settings, tenant_id: str) -> TenantShown:
    """The tenant's view; LookupError when it has neither a configuration nor a manifest."""
    config = await tenant_config(graph, tenant_id)
    manifests = await tenant_manifests(graph, tenant_id)
    if config is None and not manifests:
        raise LookupError(f"tenant {tenant_id!r} has no configuration and no manifest")
    policy = resolve_tenant_policy(
        config.stored_policy if config is not None else None,
        global_gap=settings.reconcile.orphan_version_gap,
        global_grace_ms=settings.reconcile.manifest_grace_ms,
        global_auto_tombstone=settings.reconcile.auto_tombstone)
    return TenantShown(
        tenant_id=tenant_id, configured=config is not None,
        version=config.version if config is not None else NO_CONFIG_VERSION,
        repo_slug=config.repo_slug if config is not None else None,
        policy=PolicyShown.of(policy),
        manifests=tuple(ManifestShown.of(m) for _, m in sorted(manifests.items())))


def _value(value: PolicyValue) -> str:
    shown = "closed (nothing actionable)" if value.value is None else str(value.value)
    return f"{shown}  <- {value.source}"


def render_tenant(shown: TenantShown) -> str:
    """The view as a few lines for a terminal."""
    policy = shown.policy
    out = [f"tenant {shown.tenant_id}: version {shown.version}"
           + ("" if shown.configured else " (no configuration node: nothing is reconciled)"),
           f"  repo: {shown.repo_slug or '-'}",
           "  policy in force:",
           f"    orphanVersionGap: {_value(policy.orphan_version_gap)}",
           f"    manifestGraceMs:  {_value(policy.manifest_grace_ms)}",
           f"    autoTombstone:    {'on' if policy.auto_tombstone.value else 'off'}  <- "
           f"{policy.auto_tombstone.source} (tenant setting: {policy.auto_tombstone_setting})"]
    if policy.invalid_keys:
        out.append(f"  invalid in the tenant's policy (fails closed): "
                   f"{', '.join(policy.invalid_keys)}")
    out.append("  manifests:" if shown.manifests else "  manifests: none")
    for m in shown.manifests:
        revision = f", revision {m.revision[:12]}" if m.revision else ""
        out.append(f"    {m.repo_slug}: {m.path_count:,} paths, updated {m.updated_at_iso}"
                   f"{revision}")
    return "\n".join(out) + "\n"
