"""`python -m daemons.reconcile`: the reconciliation daemon, its one-shot pass and restore.

    python -m daemons.reconcile [--config F] [--tick] [--dry-run] [--json]
    python -m daemons.reconcile restore ARCHIVE [--config F] [--json]
    python -m daemons.reconcile explain TENANT [--config F] [--json]
    python -m daemons.reconcile gc [--config F] [--dry-run] [--json]
    python -m daemons.reconcile archives [TENANT] [--config F] [--json]

`--tick` runs the daemon's jobs once, through the scheduler's own path (`core.suite`): one
pass, then one alerting pass when alerting is enabled.

Exit 0 done; 1 a store unreachable, a tenant failed, or telemetry rows the pass could not
write (spooled; the `--json` object is printed first); 2 usage, configuration or archive
errors (a restore's refused lines are each named on stderr, the others still restored);
128 + the signal's number when a signal stopped the run.

`explain` prints one tenant's plan from the pass's own scan, rules and guards, nothing written
(`core.reconcile.explain_tenant`). `archives` lists the tombstone archives, this host's and the
shared copies, each unusable one with its problem (`core.reconcile.archives.listing`).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import NoReturn

from core.alerting.alerting_pass import alerting_tick
from core.base.chroma import VectorStore
from core.base.config.config import Settings
from core.base.reports.tables import output_width
from core.base.rules.camel_json import Figures, to_json
from core.base.rules.errors import ConfigError
from core.base.runtime.settings import load_settings
from core.base.state.state import open_graph
from core.reconcile.archives.listing import list_archives
from core.reconcile.archives.restore import RestoreResult, restore_archive
from core.reconcile.explain_tenant import explain_tenant
from core.reconcile.reports.archives import render_archives
from core.reconcile.reports.explain import render_plan
from core.reconcile.retention import RetentionDisabled, RetentionFigures, retention_tick
from core.reconcile.rules.reconcile_outcome import ReconcileDisabled, ReconcileFigures
from core.reconcile.rules.restore_holds import release_command
from core.reconcile.run_pass import reconcile_tick
from core.reconcile.stores.archives.files import ensure_archive_file
from core.reconcile.stores.archives.shared import shared_archive_content
from core.reconcile.stores.restore_holds import RestoreHoldWriter
from core.suite.oneshot import OneShot, graceful_stop, within
from core.suite.scheduler import DaemonSpec
from core.suite.tick import Job, open_context
from daemons.cli.commands import (
    EXIT_OK,
    EXIT_USAGE,
    Parser,
    add_config_flag,
    add_run_flags,
    agreed_config,
    command_name,
    emit_json,
    run_main,
    split_leading_config,
    write_error,
    write_text,
)
from daemons.cli.serving import serve_main, tick_once
from daemons.cli.summaries import reconcile_tick_summary
from daemons.cli.tenant_parser import tenant_argument

PROG = "daemons.reconcile"
SCRIPT = "kb-reconcile"
DAEMON = "reconcile"
ALERTING = "alerting"
#: Jitter of the pass: up to 1% of the interval, at most a minute (36 s on the hourly default).
RECONCILE_JITTER_FRACTION = 0.01
RECONCILE_JITTER_MAX_S = 60.0
RESTORE = "restore"
EXPLAIN = "explain"
GC = "gc"
ARCHIVES = "archives"


def build_parser() -> Parser:
    """The pass/daemon flags."""
    parser = Parser(
        prog=SCRIPT,
        description="Find the knowledge-base chunks that no longer belong, tenant by tenant, "
        "report them and (opt-in) archive then tombstone the actionable ones. The signals: "
        "config-stale chunks (stamped with an older tenant-config version than the tenant's; "
        "actionable once the gap reaches orphanVersionGap), manifest orphans (paths the repo's "
        "manifest no longer claims; actionable past manifestGraceMs), generation orphans "
        "(parsed by an older parser or extraction identity than the repo declares: superseded "
        "once the new generation's chunk exists, or no longer yielded), and missing paths "
        "(claimed by the manifest with no chunk: reported, never acted on). Guards hold a "
        "tenant whose pass would delete too much.",
        epilog=f"Put tombstoned chunks back: {SCRIPT} {RESTORE} ARCHIVE [--config F] [--json]. "
        f"Read one tenant's plan: {SCRIPT} {EXPLAIN} TENANT [--config F] [--json]. "
        f"List the archives: {SCRIPT} {ARCHIVES} [TENANT] [--config F] [--json].",
    )
    add_run_flags(parser, tick=True)
    return parser


def build_restore_parser() -> Parser:
    """`restore ARCHIVE [--config F]`."""
    parser = Parser(prog=f"{SCRIPT} {RESTORE}",
                    description="Put back the chunks of a tombstone archive that are absent "
                    "now (preserve-live: a live chunk is never overwritten; idempotent).")
    parser.add_argument("archive", metavar="ARCHIVE", type=Path,
                        help="a tombstone archive (.jsonl), at any path: reconcile writes "
                        "them under <dataDir>/tombstones/, and a copy kept elsewhere is "
                        "accepted as well; with stateUrl, when no such file exists here, "
                        "the archive of that file name any host wrote is read from the "
                        "database; each line is checked against the archive's "
                        "header and checksum, and a refused line is named on stderr while the "
                        "others are restored")
    add_config_flag(parser)
    parser.add_argument("--json", action="store_true",
                        help="print exactly one JSON object with the restore's figures")
    return parser


def build_explain_parser() -> Parser:
    """`explain TENANT [--config F] [--json]`."""
    parser = Parser(prog=f"{SCRIPT} {EXPLAIN}",
                    description="One tenant's reconciliation plan, chunk by chunk, without "
                    "changing anything: why each chunk is stale or orphaned, whether it is "
                    "actionable, the missing paths, and which guard would hold the pass.")
    parser.add_argument("tenant", metavar="TENANT", type=tenant_argument,
                        help="tenant id (a leading @ is dropped)")
    add_config_flag(parser)
    parser.add_argument("--json", action="store_true",
                        help="print exactly one JSON object: the whole plan, every chunk")
    return parser


def build_gc_parser() -> Parser:
    """`gc [--config F] [--dry-run] [--json]`."""
    parser = Parser(prog=f"{SCRIPT} {GC}",
                    description="One retention pass over every tenant (gcRetention and each "
                    "tenant's gcMaxAgeMs / gcMaxCount): report what expired and, with "
                    "gcAutoDelete, archive and delete it (at most "
                    "reconciliationMaxDeletesPerTick per tenant).")
    add_config_flag(parser)
    parser.add_argument("--dry-run", action="store_true",
                        help="report what would expire; write nothing (works when gcEnabled "
                        "is false)")
    parser.add_argument("--json", action="store_true",
                        help="print exactly one JSON object with the pass's figures")
    return parser


def build_archives_parser() -> Parser:
    """`archives [TENANT] [--config F] [--json]`."""
    parser = Parser(prog=f"{SCRIPT} {ARCHIVES}",
                    description="List the tombstone archives: this host's files under "
                    "<dataDir>/tombstones/ and, with stateUrl, the copies in the shared "
                    "state; per archive its tenant, time, chunks and how many of them a "
                    "restore could still put back (by the archive's own lines: neither "
                    "withdrawn nor refused). An archive that cannot be used is listed with "
                    "its problem. Reads only; never opens Chroma.")
    parser.add_argument("tenant", metavar="TENANT", nargs="?", type=tenant_argument,
                        help="only this tenant's archives (a leading @ is dropped); an "
                        "archive whose tenant cannot be read is listed as well")
    add_config_flag(parser)
    parser.add_argument("--json", action="store_true",
                        help="print exactly one JSON object: every archive and its figures")
    return parser


async def run_archives(args: argparse.Namespace) -> int:
    """`archives`: the listing, as a table or one JSON object."""
    listing = await list_archives(load_settings(args.config), args.tenant)
    if args.json:
        emit_json({"ok": True, **to_json(listing)})
    else:
        write_text(render_archives(listing, width=output_width(sys.stdout)))
    return EXIT_OK


def retention_job(settings: Settings) -> Job:
    """The retention job: its own interval (`gcIntervalMs`)."""
    return Job(GC, retention_tick, settings.gc.interval_ms)


async def run_gc(args: argparse.Namespace) -> int:
    """`gc`: the retention job once, as the daemon runs it. Exit 1 when a tenant failed or a
    telemetry row could not be written."""
    settings = load_settings(args.config)

    def summarize(figures: Mapping[str, Figures]) -> str:
        return reconcile_tick_summary(figures, dry_run=args.dry_run,
                                      config_source=settings.source)

    return await tick_once(DaemonSpec(DAEMON, (retention_job(settings),), elected=True),
                           settings, dry_run=args.dry_run, as_json=args.json,
                           summarize=summarize, succeeded=gc_succeeded)


def gc_succeeded(figures: Figures) -> bool:
    """Whether the retention pass did its work."""
    return isinstance(figures, RetentionFigures | RetentionDisabled) and figures.succeeded


async def run_explain(args: argparse.Namespace) -> int:
    """Print the plan (the graph opened read-only; Chroma only read)."""
    settings = load_settings(args.config)
    async with open_context(settings, dry_run=True) as context:
        try:
            plan = await explain_tenant(context, args.tenant)
        except LookupError as exc:
            raise ConfigError(str(exc).strip("'\"")) from None
    if args.json:
        emit_json(to_json(plan))
    else:
        write_text(render_plan(plan))
    return EXIT_OK


async def run_one_pass(args: argparse.Namespace) -> int:
    """`--tick`: the daemon's jobs, each run once as its scheduler runs them.

    With `--json`, one object: the reconcile figures with `ok`, the alerting figures under
    `alerting`.
    """
    settings = load_settings(args.config)

    def summarize(figures: Mapping[str, Figures]) -> str:
        return reconcile_tick_summary(figures, dry_run=args.dry_run,
                                      config_source=settings.source)

    return await tick_once(reconcile_daemon(settings), settings, dry_run=args.dry_run,
                           as_json=args.json, summarize=summarize, succeeded=pass_succeeded)


def pass_succeeded(figures: Figures) -> bool:
    """Whether the pass did its work (`ReconcileFigures.succeeded`)."""
    return isinstance(figures, ReconcileFigures | ReconcileDisabled) and figures.succeeded


async def run_restore(args: argparse.Namespace) -> int:
    """`restore ARCHIVE`: put back the absent chunks, into the knowledge-base collection only
    (idempotent: a run stopped after a batch is finished by running it again)."""
    settings = load_settings(args.config)
    archive: Path = args.archive
    # A file here is read as today; with the state shared (`stateUrl`) and no such file, the
    # archive any host wrote is read from the database by its file name.
    content: bytes | None = None
    if settings.state.url and not archive.is_file():
        content = await shared_archive_content(settings, archive)
    else:
        ensure_archive_file(archive)
    pass_job = reconcile_daemon(settings).jobs[0]
    with graceful_stop(OneShot()) as run:
        graph = await open_graph(settings.state)
        try:
            vectors = await VectorStore.open(settings.chroma)
            try:
                result = await within(
                    restore_archive(vectors, archive,
                                    collection=settings.chroma.knowledge_base_collection,
                                    stopping=lambda: run.control.stopping, content=content,
                                    hold=RestoreHoldWriter(graph, archive.name)),
                    timeout_s=pass_job.effective_timeout_s, what="the restore")
            finally:
                await vectors.close()
        finally:
            await graph.close()
    for problem in (*result.unreadable, *result.refused):
        chunk = f" (chunk {problem.chunk_id!r})" if problem.chunk_id else ""
        write_error(f"{command_name(PROG)}: error: {archive}:{problem.line_number}: "
                    f"{problem.reason}{chunk}\n")
    if args.json:
        failure = {} if result.clean else {"error": restore_problems(result)}
        emit_json({"ok": result.clean, **failure, **to_json(result.figures())})
    else:
        write_text(restore_summary(result) + "\n")
    if run.stopped_exit_code is not None:
        write_error(f"{command_name(PROG)}: stopped before the end of {archive}; run it "
                    "again to restore the rest\n")
        return run.stopped_exit_code
    return EXIT_OK if result.clean else EXIT_USAGE


def restore_problems(result: RestoreResult) -> str:
    """The `error` of a restore with lines not applied: how many, and that the others were."""
    return (f"{len(result.refused)} line(s) refused and {len(result.unreadable)} unreadable "
            f"(each listed under problems); the other lines read were restored or kept live")


def restore_summary(result: RestoreResult) -> str:
    """`restored 2, kept live 10, refused 1, unreadable 0 (chunks of tenant acme) from X`,
    then, when it put chunks back, that they are held and how to lift the hold."""
    withdrawn = (f", withdrawn {result.withdrawn} (archived, not deleted: never put back)"
                 if result.withdrawn else "")
    held = (f"\nheld {result.held_count}: no pass deletes them until the tenant's version is "
            f"raised again or its manifest or yield snapshot replaced; "
            f"{release_command(result.tenant_id or '')} lifts the hold"
            if result.held_count else "")
    return (f"restored {result.restored}, kept live {result.kept_live}, refused "
            f"{len(result.refused)}, unreadable {len(result.unreadable)}{withdrawn} (chunks "
            f"of tenant {result.tenant_id}) from {result.path}{held}")


def reconcile_daemon(settings: Settings) -> DaemonSpec:
    """The reconcile daemon: a pass every `reconciliationIntervalMs` (jittered, so hosts do
    not scan one Chroma server in step), and the alerting job when enabled. Disabled, the
    pass job still ticks and says so: the daemon idles, visibly."""
    interval = settings.reconcile.interval_ms
    jobs = [Job(DAEMON, reconcile_tick, interval,
                jitter_s=min(interval / 1000 * RECONCILE_JITTER_FRACTION, RECONCILE_JITTER_MAX_S))]
    if settings.alerting.enabled:
        jobs.append(Job(ALERTING, alerting_tick, settings.alerting.interval_ms))
    if settings.gc.enabled:  # retention, on its own schedule (#11641)
        jobs.append(retention_job(settings))
    return DaemonSpec(DAEMON, tuple(jobs), elected=True)  # one host at a time (stateUrl)


def main(argv: Sequence[str] | None = None) -> NoReturn:
    """Parse, then hand over to exactly one of: restore, explain, one pass, the daemon."""
    # Dispatch on the first word rather than argparse subparsers: a subparser's defaults
    # (here --config) would silently override the same flag given before the subcommand.
    # `--config F` may come before the subcommand or after it (the same file, if both).
    before, argv = split_leading_config(sys.argv[1:] if argv is None else argv)
    if argv[:1] == [RESTORE]:
        restore_parser = build_restore_parser()
        restore_args = restore_parser.parse_args(argv[1:])
        restore_args.config = agreed_config(restore_parser, before, restore_args.config)
        run_main(PROG, lambda: run_restore(restore_args))
    if argv[:1] == [EXPLAIN]:
        explain_parser = build_explain_parser()
        explain_args = explain_parser.parse_args(argv[1:])
        explain_args.config = agreed_config(explain_parser, before, explain_args.config)
        run_main(PROG, lambda: run_explain(explain_args))
    if argv[:1] == [ARCHIVES]:
        archives_parser = build_archives_parser()
        archives_args = archives_parser.parse_args(argv[1:])
        archives_args.config = agreed_config(archives_parser, before, archives_args.config)
        run_main(PROG, lambda: run_archives(archives_args))
    if argv[:1] == [GC]:
        gc_parser = build_gc_parser()
        gc_args = gc_parser.parse_args(argv[1:])
        gc_args.config = agreed_config(gc_parser, before, gc_args.config)
        run_main(PROG, lambda: run_gc(gc_args))
    parser = build_parser()
    args = parser.parse_args(argv)
    args.config = agreed_config(parser, before, args.config)
    if not args.tick:
        if args.json:
            build_parser().error("argument --json: only with --tick (a daemon logs its figures)")
        serve_main(PROG, config=args.config, build_specs=lambda s: [reconcile_daemon(s)],
                   dry_run=args.dry_run,
                   metrics_port=lambda s: ("reconcileMetricsPort", s.reconcile.metrics_port))
    run_main(PROG, lambda: run_one_pass(args))


if __name__ == "__main__":
    main()
