"""What a command says to a person when it is not `--json`: one to five lines of what was
done, what is left and where to look next (pure: figures in, text out).

Programs read `--json`; these lines are for the operator at a terminal, so they use words, not
`key=value` pairs, give counts with their nouns ("1 session", "2 sessions"), and name the
command to run next (the console scripts, `kb-status` and friends).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from core.alerting.alerting_pass import AlertingDisabled, AlertingFigures
from core.base.rules.camel_json import Figures
from core.drain.eager_backfill import (
    DrainFailed,
    DrainSkipped,
    EagerBackfillFigures,
    EagerIngestFigures,
)
from core.drain.rem_tick import RemTickFigures
from core.drain.rules.drain_plan import DrainStats
from core.drain.rules.ingest import LiveIngestFigures, LiveIngestSkipped
from core.reconcile.retention import RetentionDisabled, RetentionFigures
from core.reconcile.rules.reconcile_outcome import (
    ReconcileDisabled,
    ReconcileFigures,
    TenantFigures,
)
from daemons.cli.summaries_admin import counted

DRY_RUN_NOTE = " [dry run: nothing written]"
#: Tenants named one per line in a pass's summary; the rest are counted (`kb-status` lists all).
TENANTS_NAMED = 5
#: Archives a pass's summary names (`--json` and `kb-reconcile archives` list every one).
ARCHIVES_NAMED = 3


def ingest_line(live: LiveIngestFigures | LiveIngestSkipped, *, dry_run: bool) -> str:
    """What live ingestion did, in one line."""
    if isinstance(live, LiveIngestSkipped):
        return f"live ingestion skipped: {live.skipped}"
    verb = "would ingest" if dry_run else "ingested"
    line = (f"{counted(live.summaries_scanned, 'summary', 'summaries')} scanned, "
            f"{counted(live.sessions_found, 'session')} in the window; {verb} "
            f"{counted(live.sessions_upserted, 'session')} and "
            f"{counted(live.memories_upserted, 'memory', 'memories')} "
            f"({counted(live.sessions_skipped, 'session')} and "
            f"{counted(live.memories_skipped, 'memory', 'memories')} already up to date)")
    if live.errors:
        line += f"; {counted(live.errors, 'session')} could not be synced (see the log)"
    return line


def drain_line(drain: DrainStats | DrainFailed | DrainSkipped, *, dry_run: bool) -> str:
    """What the drain did with the queue, in one line."""
    if isinstance(drain, DrainSkipped):
        return f"drain skipped ({drain.skipped})"
    if isinstance(drain, DrainFailed):
        return f"drain failed: {drain.error} (the queue stays for the next drain)"
    if not drain.total_lines:
        return "queue: empty, nothing to link"
    line = (f"queue: {counted(drain.total_lines, 'line')} read, {drain.succeeded:,} linked, "
            f"{drain.requeued:,} re-queued, {drain.dead_lettered:,} dead-lettered")
    return line + (" (dry run: counted only)" if dry_run else "")


def _drain_left(drain: DrainStats, dead_letter_path: Path) -> str | None:
    """What the drain left for later, or None when it left nothing."""
    if drain.interrupted:
        return ("stopped after its current batch: the rest waits in .draining and the next "
                "start drains it at once")
    parts = []
    if drain.requeued:
        parts.append(f"{counted(drain.requeued, 'line')} re-queued wait for their endpoints "
                     "(next tick)")
    if drain.dead_lettered:
        parts.append(f"{counted(drain.dead_lettered, 'dead letter')} in {dead_letter_path} "
                     "(kb-status shows them by reason; README \"Producing edges\" says what "
                     "each means)")
    return "left: " + "; ".join(parts) if parts else None


def drain_tick_summary(figures: RemTickFigures, *, dry_run: bool,
                       dead_letter_path: Path) -> str:
    """`kb-drain --tick`: live ingestion, the queue, and what is left."""
    lines = ["drain tick" + (DRY_RUN_NOTE if dry_run else "") + ": "
             + ingest_line(figures.live_ingest, dry_run=dry_run),
             drain_line(figures.drain, dry_run=dry_run)]
    left = _drain_left(figures.drain, dead_letter_path)
    lines.append(left if left is not None else "nothing left for later; kb-status shows the "
                 "graph and the queue")
    return "\n".join(lines) + "\n"


def _tenant_line(tenant: TenantFigures) -> str:
    line = (f"  {tenant.tenant_id}: version {tenant.current_version}, "
            f"{counted(tenant.stale_count, 'stale chunk')} of {tenant.scanned:,} scanned")
    if tenant.tombstoned_count:
        line += f", {tenant.tombstoned_count:,} tombstoned"
    if tenant.held_count:
        line += f", {tenant.held_count:,} held"
    if tenant.malformed_count:
        line += (f", {counted(tenant.malformed_count, 'malformed chunk')} skipped "
                 f"(kb-reconcile explain {tenant.tenant_id})")
    if tenant.manifest_orphan_count:
        line += (f", {counted(tenant.manifest_orphan_count, 'chunk')} of paths no longer in "
                 "the manifest")
    if tenant.missing_path_count:
        line += (f", {counted(tenant.missing_path_count, 'manifest path')} with no chunks "
                 f"(kb-reconcile explain {tenant.tenant_id})")
    if tenant.guard:
        line += f" (guard: {tenant.guard})"
    return line


def _clean(tenant: TenantFigures) -> bool:
    """Nothing to say of the tenant: no drift, no hold, nothing deleted."""
    return not (tenant.stale_count or tenant.total_orphan_count or tenant.missing_path_count
                or tenant.malformed_count or tenant.tombstoned_count or tenant.held_count
                or tenant.guard)


def _most_drifted_first(tenant: TenantFigures) -> tuple[bool, int, str]:
    """Guarded tenants first, then the most chunks to act on, then by id."""
    return (tenant.guard is None,
            -(tenant.stale_count + tenant.total_orphan_count + tenant.missing_path_count
              + tenant.malformed_count), tenant.tenant_id)


def _pass_summary(figures: ReconcileFigures, *, dry_run: bool) -> list[str]:
    if not figures.tenants and not figures.stopped:
        return ["reconcile pass" + (DRY_RUN_NOTE if dry_run else "")
                + ": no tenants configured, nothing to scan; add one with "
                "kb-tenants set-config TENANT --repo-slug R"]
    mode = ("tombstoning on" if figures.auto_tombstone
            else "report only: autoTombstone is off")
    if not figures.enabled:
        mode = "reconciliation is disabled: this dry run shows what a pass would find"
    lines = [f"reconcile pass over {counted(len(figures.tenants), 'tenant')} ({mode})"
             + (DRY_RUN_NOTE if dry_run else "") + ": "
             f"{counted(figures.stale_count, 'stale chunk')}, "
             + (f"{counted(figures.manifest_orphan_count, 'chunk')} orphaned by path, "
                if figures.manifest_orphan_count else "")
             + f"{figures.tombstoned_count:,} tombstoned"
             + (f", {counted(figures.failed_tenants, 'tenant')} failed (see the log)"
                if figures.failed_tenants else "")]
    drifted = sorted((t for t in figures.tenants if not _clean(t)), key=_most_drifted_first)
    lines += [_tenant_line(t) for t in drifted[:TENANTS_NAMED]]
    more = len(drifted) - TENANTS_NAMED
    clean = len(figures.tenants) - len(drifted)
    if more > 0 or clean:
        lines.append("  " + "; ".join(
            ([f"and {counted(more, 'more tenant')} with drift (kb-status)"] if more > 0 else [])
            + ([f"{counted(clean, 'tenant')} clean"] if clean else [])))
    lines += [f"  archive: {path}" for path in figures.archives[:ARCHIVES_NAMED]]
    if len(figures.archives) > ARCHIVES_NAMED:
        lines.append(f"  and {counted(len(figures.archives) - ARCHIVES_NAMED, 'more archive')} "
                     "(the --json output and kb-reconcile archives list every one)")
    if figures.stopped:
        lines.append("stopped between tenants: the next start runs a full pass at once")
    elif figures.unrecorded_rows:
        lines.append(f"{counted(figures.unrecorded_rows, 'telemetry row')} not in SQLite yet "
                     "(kept in the spool; the next pass writes them)")
    elif figures.tombstoned_count:
        lines.append("tombstoned chunks are archived under tombstones/ first (kb-reconcile "
                     "restore ARCHIVE puts them back); kb-status shows each tenant's drift")
    elif (figures.stale_count or figures.total_orphan_count) and not figures.auto_tombstone:
        # total_orphan_count is every reason's union: a chunk stale and orphaned counts once.
        kinds = [f"{figures.stale_count:,} stale"] if figures.stale_count else []
        if figures.manifest_orphan_count:
            kinds.append(f"{figures.manifest_orphan_count:,} orphaned by path")
        lines.append(f"left: {counted(figures.total_orphan_count, 'chunk')} "
                     f"({', '.join(kinds)}) stay until reconciliationAutoTombstone = true; "
                     "kb-status shows each tenant's drift")
    else:
        lines.append("kb-status shows each tenant's drift")
    return lines


def reconcile_tick_summary(figures: Mapping[str, Figures], *, dry_run: bool,
                           config_source: Path | None) -> str:
    """`kb-reconcile --tick`: the pass (or why none ran), and the alerting pass."""
    lines: list[str] = []
    for figure in figures.values():
        if isinstance(figure, ReconcileDisabled):
            where = str(config_source) if config_source is not None else "config/kb.toml"
            lines += ["reconciliation is disabled: no pass ran, nothing was scanned",
                      f"to run passes, set reconciliationEnabled = true under [knowledgeBase] "
                      f"in {where}; kb-reconcile --tick --dry-run reports drift without it"]
        elif isinstance(figure, ReconcileFigures):
            lines += _pass_summary(figure, dry_run=dry_run)
        elif isinstance(figure, AlertingFigures):
            lines.append(f"alerting: {counted(figure.fired, 'alert')} "
                         f"{'would fire' if dry_run else 'fired'} "
                         f"({figure.delivered:,} delivered, {figure.failed:,} failed, "
                         f"{figure.suppressed:,} suppressed) from "
                         f"{counted(figure.rules, 'rule')}")
        elif isinstance(figure, AlertingDisabled):
            continue
        elif isinstance(figure, RetentionFigures | RetentionDisabled):
            lines.append(retention_line(figure, dry_run=dry_run))
    return "\n".join(lines) + "\n"


def retention_line(figure: RetentionFigures | RetentionDisabled, *, dry_run: bool) -> str:
    """The retention pass (`kb-reconcile gc`, or the daemon's `gc` job) in one line."""
    if isinstance(figure, RetentionDisabled):
        return "retention is disabled (gcEnabled is false; kb-reconcile gc --dry-run reports " \
               "what would expire)"
    return (f"retention: {counted(figure.expired_count, 'chunk')} "
            f"{'would expire' if dry_run else 'expired'} over "
            f"{counted(len(figure.tenants), 'tenant')}; deleted {figure.deleted_count:,}"
            + ("" if figure.auto_delete or dry_run else " (gcAutoDelete is false)")
            + ("; defrag recommended" if figure.defrag_recommended else "")
            + (f"; {counted(figure.failed_tenants, 'tenant')} failed"
               if figure.failed_tenants else "")
            + _archives_phrase(figure, dry_run=dry_run))


def _archives_phrase(figure: RetentionFigures, *, dry_run: bool) -> str:
    """`; archives: 3 pruned, 1 kept (unreadable: see the log)`, when archiveMaxAgeMs asks."""
    if figure.archives_error is not None:
        return f"; archives not pruned: {figure.archives_error}"
    if figure.archives is None:
        return ""
    places = [p for p in (figure.archives.local, figure.archives.shared) if p is not None]
    done = sum(len(p.expired) - len(p.kept) if dry_run else len(p.pruned) for p in places)
    kept = sum(len(p.kept) for p in places)
    return (f"; archives: {done:,} {'would be pruned' if dry_run else 'pruned'}"
            + (f", {kept:,} kept (cannot be read whole: see the log)" if kept else ""))


def backfill_summary(figures: EagerBackfillFigures) -> str:
    """`kb-backfill`: the window, what was ingested, the queue, the failures."""
    lines = [f"back-fill of the last {counted(figures.days, 'day')} (since {figures.cutoff})"
             + (DRY_RUN_NOTE if figures.dry_run else "")]
    lines.append("  " + ingest_line(figures.live_ingest, dry_run=figures.dry_run))
    live = figures.live_ingest
    if isinstance(live, EagerIngestFigures) and live.unparseable_created_at:
        named = ", ".join(str(r.get("rowId")) for r in live.unparseable_rows)
        lines.append(f"  {counted(live.unparseable_created_at, 'summary', 'summaries')} "
                     f"without a readable createdAt or timestamp were not considered: {named}")
    lines.append("  " + drain_line(figures.drain, dry_run=figures.dry_run))
    if figures.failure_count:
        lines.append(f"  {counted(figures.failure_count, 'failure')}:")
        lines.extend(f"    {failure}" for failure in figures.failures)
        hidden = figures.failure_count - len(figures.failures)
        if hidden > 0:
            lines.append(f"    ... and {hidden} more (see the log)")
    return "\n".join(lines) + "\n"
