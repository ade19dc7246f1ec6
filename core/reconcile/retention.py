"""The retention pass (the original's GC daemon, #11641): for every tenant, the chunks its
retention expires (`core.reconcile.rules.retention`), reported as `tombstone` telemetry rows per
tenant and repo, and (opt-in, `gcAutoDelete`) deleted through the one deletion engine, the
oldest first, up to `reconciliationMaxDeletesPerTick` per tenant. Then, with `archiveMaxAgeMs`,
the old archives are pruned (`core.reconcile.archives.pruning`).

Tenants are the configured ones, not the telemetry rollup the original enumerates. A tenant's
scan holds its chunks' (id, repo, `ingestedAt`) in memory: the count rule needs every chunk of
a repo.
"""

from __future__ import annotations

import uuid
from collections import defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import structlog

from core.base.chroma import CollectionMissing
from core.base.io.clock import now_ms
from core.base.rules.camel_json import omitted_when_none
from core.base.rules.telemetry import EVENT_TOMBSTONE, MetricRow
from core.base.rules.tenants import TenantConfig
from core.base.state.telemetry import insert_metric_rows, new_metric_row
from core.base.state.telemetry_spool import MetricSpool
from core.base.state.tenants import list_tenants
from core.reconcile.archives.pruning import ArchivePruning, prune_archives
from core.reconcile.deletion import (
    BAND_ROWS,
    DeletionPlan,
    DeletionTarget,
    TenantRule,
    TombstoneProgress,
    run_bands,
)
from core.reconcile.page_loop import read_pages, until_stopping
from core.reconcile.rules.retention import (
    Expired,
    ExpiredChunk,
    RepoRetention,
    Retention,
    TenantRetention,
    defrag_recommended,
    gc_detail,
    resolve_retention,
    retention_bands,
    retention_clauses,
    retention_rule,
    select_expired,
    tenant_retention,
)
from core.reconcile.stores.archives.shared import shared_archives
from core.reconcile.stores.restore_holds import RestoreHolds

if TYPE_CHECKING:
    from core.base.runtime.context import TickContext

log = structlog.get_logger(__name__)

_OPTIONAL = omitted_when_none()


@dataclass(frozen=True, slots=True)
class RetentionFigures:
    """A retention pass's figures."""

    enabled: bool
    auto_delete: bool
    collection_count: int
    expired_count: int
    deleted_count: int
    defrag_recommended: bool
    tenants: tuple[TenantRetention, ...]
    failed_tenants: int
    unrecorded_rows: int = 0
    #: Omitted when `archiveMaxAgeMs` is 0.
    archives: ArchivePruning | None = field(default=None, metadata=_OPTIONAL)
    archives_error: str | None = field(default=None, metadata=_OPTIONAL)

    @property
    def succeeded(self) -> bool:
        """Every tenant done, every row recorded, the archives pruned when asked."""
        return not self.failed_tenants and not self.unrecorded_rows and not self.archives_error


@dataclass(frozen=True, slots=True)
class RetentionDisabled:
    """The figures of a retention pass that did not run (`gcEnabled` is false)."""

    enabled: bool = False
    tenants: tuple[TenantRetention, ...] = ()

    @property
    def succeeded(self) -> bool:
        """Nothing to do is done."""
        return True


async def retention_tick(context: TickContext, dry_run: bool
                         ) -> RetentionFigures | RetentionDisabled:
    """One retention pass over every configured tenant (the `gc` job and `kb-reconcile gc`).
    A dry run deletes nothing and writes no row; it reports what would expire."""
    settings = context.settings
    if not settings.gc.enabled and not dry_run:
        log.info("gc.disabled", message="retention disabled (set gcEnabled = true)")
        return RetentionDisabled()
    deletes = settings.gc.auto_delete and not dry_run
    cap = settings.reconcile.max_deletes_per_tick
    if deletes and "reconciliationMaxDeletesPerTick" in settings.invalid_guards:
        log.warning("gc.guard_config_invalid", message="the delete cap is invalid: this "
                    "retention pass deletes nothing (fails closed)")
    collection = settings.chroma.knowledge_base_collection
    default = resolve_retention(settings.gc.retention)
    tenants = await list_tenants(context.graph)
    try:
        collection_count = await context.vectors.count(collection) if tenants else 0
    except CollectionMissing:
        collection_count, tenants = 0, []
    # The restore holds: retention deletes no held chunk either (every hold in force).
    target = DeletionTarget(context.vectors, collection, settings.tombstones_dir,
                            uuid.uuid4().hex, shared_archives(settings, context.graph),
                            RestoreHolds(context.graph))
    done: list[TenantRetention] = []
    failed = 0
    for tenant in until_stopping(tenants, context.control):
        with structlog.contextvars.bound_contextvars(tenant=tenant.tenant_id):
            result = await _collect_tenant(context, target, tenant,
                                           tenant_retention(default, tenant.stored_policy),
                                           deletes=deletes, cap=cap)
        failed += result.error is not None
        done.append(result)
        context.control.progress()
    deleted = sum(t.deleted_count for t in done)
    defrag = defrag_recommended(threshold=settings.gc.defrag_threshold,
                                collection_count=collection_count, total_deleted=deleted)
    if defrag:
        log.warning("gc.defrag-recommended", deleted=deleted, collectionCount=collection_count,
                    message="this pass deleted more than gcDefragThreshold of the collection: "
                    "compact the vector index when convenient")
    unrecorded = 0 if dry_run else await _record(context, done, settings.gc.auto_delete,
                                                 defrag)
    archives, archives_error = await _prune_archives(context, dry_run)
    return RetentionFigures(
        enabled=settings.gc.enabled, auto_delete=settings.gc.auto_delete,
        collection_count=collection_count, expired_count=sum(t.expired_count for t in done),
        deleted_count=deleted, defrag_recommended=defrag, tenants=tuple(done),
        failed_tenants=failed, unrecorded_rows=unrecorded, archives=archives,
        archives_error=archives_error)


async def _prune_archives(context: TickContext, dry_run: bool
                          ) -> tuple[ArchivePruning | None, str | None]:
    """The pass's archive pruning, unless stopped; a failure is returned, never raised (the
    tenants' work stands)."""
    if context.control.stopping:
        return None, None
    try:
        return await prune_archives(context.settings, context.graph, now=now_ms(),
                                    dry_run=dry_run), None
    except Exception as exc:
        log.error("gc.archives_failed", exc_info=True,
                  message="archives not pruned; the next retention pass tries again")
        return None, f"{type(exc).__name__}: {exc}"


async def tenant_expiry(context: TickContext, tenant: TenantConfig) -> TenantRetention:
    """What retention would take of one tenant now, nothing deleted (`reconcile explain`)."""
    settings = context.settings
    target = DeletionTarget(context.vectors, settings.chroma.knowledge_base_collection,
                            settings.tombstones_dir, "explain")
    retention = tenant_retention(resolve_retention(settings.gc.retention), tenant.stored_policy)
    return await _collect_tenant(context, target, tenant, retention, deletes=False, cap=0,
                                 list_ids=True)


async def _collect_tenant(context: TickContext, target: DeletionTarget, tenant: TenantConfig,
                          retention: Retention, *, deletes: bool, cap: int,
                          list_ids: bool = False) -> TenantRetention:
    """The original's `collectTenant`: read, select, delete when asked; never raises (a
    failure is reported with the tenant)."""
    tenant_id = tenant.tenant_id
    rows: list[tuple[str, dict[str, Any]]] = []
    progress = TombstoneProgress()
    deleted_by_repo: dict[Any, int] = defaultdict(int)
    expired = Expired((), 0)
    try:
        if retention.active:
            def keep(page: Any) -> None:
                rows.extend((r.id, {k: r.metadata.get(k) for k in
                                    ("tenantId", "repoSlug", "ingestedAt")
                                    if k in r.metadata}) for r in page)
            await read_pages(context.vectors.scan(target.collection,
                                                  where={"tenantId": tenant_id},
                                                  include=("metadatas",)),
                             keep, control=context.control)
        read_ms = now_ms()
        expired = select_expired(rows, retention, now=read_ms)
        if deletes and expired.chunks and cap > 0:
            await _delete_expired(context, target, tenant_id, expired, read_ms, cap,
                                  progress, deleted_by_repo)
        error = None
    except Exception as exc:
        log.error("gc.tenant_failed", exc_info=True,
                  message=f"GC failed for tenant {tenant_id}")
        error = f"{type(exc).__name__}: {exc}"
    by_repo: dict[Any, int] = defaultdict(int)
    for chunk in expired.chunks:
        by_repo[chunk.repo_slug] += 1
    repos = tuple(RepoRetention(tenant_id, slug if isinstance(slug, str) else None, n,
                                deleted_by_repo.get(slug, 0))
                  for slug, n in sorted(by_repo.items(), key=lambda kv: str(kv[0])))
    log.info("gc.tenant", evaluated=expired.evaluated_count, expired=expired.expired_count,
             deleted=progress.tombstoned, retention=retention.stored())
    return TenantRetention(tenant_id, retention.stored(), expired.evaluated_count,
                           expired.expired_count, progress.tombstoned, repos,
                           str(progress.archive.path) if progress.archive else None, error,
                           tuple(expired.expired_ids) if list_ids else None)


async def _delete_expired(context: TickContext, target: DeletionTarget, tenant_id: str,
                          expired: Expired, read_ms: int, cap: int,
                          progress: TombstoneProgress, deleted_by_repo: dict[Any, int]) -> None:
    """The oldest `cap` expired chunks (not later than the read), one plan per repo of the
    one engine."""
    chosen: dict[Any, list[ExpiredChunk]] = defaultdict(list)
    for chunk in [c for c in expired.chunks if c.ingested_at <= read_ms][:cap]:
        if isinstance(chunk.repo_slug, str):
            chosen[chunk.repo_slug].append(chunk)
    for slug, chunks in until_stopping(sorted(chosen.items()), context.control):
        newest = max(c.ingested_at for c in chunks)
        before = progress.tombstoned
        try:
            await run_bands(target, DeletionPlan(
                "retention", retention_clauses(tenant_id, slug),
                {tenant_id: TenantRule(retention_rule(tenant_id, slug, newest), read_ms)},
                retention_bands(chunks, band_rows=BAND_ROWS)),
                cap=cap, progress={tenant_id: progress}, control=context.control)
        finally:
            deleted_by_repo[slug] += progress.tombstoned - before


async def _record(context: TickContext, done: list[TenantRetention], auto_delete: bool,
                  defrag: bool) -> int:
    """One `tombstone` row per tenant and repo with expired chunks; returns how many could not
    be written (kept in the spool, which the next reconciliation pass writes first)."""
    rows: list[MetricRow] = []
    for tenant in done:
        for repo in tenant.repos:
            rows.append(new_metric_row(
                tenant_id=tenant.tenant_id, repo_slug=repo.repo_slug,
                event_type=EVENT_TOMBSTONE, chunks_total=repo.expired_count,
                chunks_deleted=repo.deleted_count,
                detail=gc_detail(expired_count=repo.expired_count,
                                 evaluated_count=tenant.evaluated_count,
                                 deleted_count=repo.deleted_count,
                                 retention=Retention(tenant.retention["maxAgeMs"],
                                                     tenant.retention["maxCount"]),
                                 auto_delete=auto_delete, defrag=defrag)))
    if not rows:
        return 0
    try:
        await insert_metric_rows(context.graph, rows)
    except Exception:
        log.error("gc.telemetry_unrecorded", rows=len(rows), exc_info=True,
                  message="kept in the spool; the next reconciliation pass writes them")
        try:
            await MetricSpool(context.settings.telemetry_spool_path).append(rows)
        except Exception:
            for row in rows:
                log.error("gc.telemetry_lost", row=row.as_json(), exc_info=True)
        return len(rows)
    return 0
