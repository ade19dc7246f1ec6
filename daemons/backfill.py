"""`python -m daemons.backfill --days N [--dry-run] [--skip-drain] [--json] [--config F]`:
live-ingest every session summarized in the last N days, then drain the lazy-edge queue.

Run it before a workload that reaches into many historical sessions, so the workload does not
pay a lazy back-fill per request. The work is `core.priority_backfill`; this module parses the
flags, shows progress and turns the outcome into CONTRACT's exit codes: 0 done, 1 a session
failed (listed) or a store was unreachable, 2 a usage or configuration error.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

from core.cli import (
    EXIT_FAILED,
    EXIT_OK,
    Parser,
    add_run_flags,
    counted,
    emit_json,
    load_settings,
    run_main,
)
from core.jobs.context import Stores, open_stores
from core.jobs.eager_backfill import priority_backfill
from core.reports.progress import choose_progress
from core.rules.errors import KbError
from core.ticks import run_tick

PROG = "daemons.backfill"
#: The name this run is recorded under in `daemon_ticks`, so `daemons.status` shows when the
#: last eager back-fill ran and what it did.
TICK_NAME = "backfill"

#: The window when `--days` is not given: the original `priorityBackfill --days` default.
DEFAULT_DAYS = 30

_WHOLE_NUMBER = re.compile(r"[0-9]+")


def positive_days(text: str) -> int:
    """`--days`: a whole number >= 1. The original silently used 30 for anything else, so an
    operator's typo back-filled a month they did not ask for."""
    if not _WHOLE_NUMBER.fullmatch(text) or int(text) < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number of days >= 1, got {text!r}")
    return int(text)


def build_parser() -> Parser:
    """Flags of the back-fill command; `--help` documents every one."""
    parser = Parser(
        prog=f"python -m {PROG}",
        description="Live-ingest every session whose summary was created in the last N days "
        "(its summary, memories and ORIGINATES_IN edges), then drain the lazy-edge queue.",
        epilog="exit codes: 0 done; 1 a session failed (each is listed) or a store was "
        "unreachable or locked; 2 a usage or configuration error",
    )
    parser.add_argument("--days", metavar="N", type=positive_days, default=DEFAULT_DAYS,
                        help="window in days, a whole number >= 1 (default "
                        f"{DEFAULT_DAYS}, as the original's priorityBackfill): sessions whose "
                        "summary createdAt (ISO-8601 or epoch ms/s, compared as a time) is "
                        "within the last N days are ingested")
    parser.add_argument("--skip-drain", action="store_true",
                        help="do not drain the lazy-edge queue after ingesting")
    add_run_flags(parser)
    return parser


async def backfill(args: argparse.Namespace) -> int:
    """Open the stores, run the back-fill as one recorded tick, report, pick the exit code."""
    settings = load_settings(args.config)
    progress = choose_progress(sys.stderr, event="backfill.progress")

    async def tick(stores: Stores, dry_run: bool) -> dict[str, Any]:
        report = await priority_backfill(stores, days=args.days, dry_run=dry_run,
                                         skip_drain=args.skip_drain, progress=progress)
        return report.figures()

    try:
        async with open_stores(settings, dry_run=args.dry_run) as stores:
            figures = await run_tick(TICK_NAME, stores, tick, dry_run=args.dry_run)
    except KbError as exc:
        if args.json:
            emit_json({"ok": False, "error": str(exc)})
        raise
    if args.json:
        emit_json(figures)
    else:
        sys.stdout.write(render_summary(figures))
    return EXIT_OK if figures["ok"] else EXIT_FAILED


def render_summary(figures: dict[str, Any]) -> str:
    """A few lines for a person at a terminal (`--json` is for programs)."""
    live = figures["liveIngest"]
    verb = "would ingest" if figures["dryRun"] else "ingested"
    lines = [f"back-fill of the last {figures['days']} day(s) (since {figures['cutoff']})"
             + (" [dry run: nothing written]" if figures["dryRun"] else "")]
    if "skipped" in live:
        lines.append(f"  live ingestion skipped: {live['skipped']}")
    else:
        lines.append(
            f"  {counted(live['summariesScanned'], 'summary', 'summaries')} scanned, "
            f"{counted(live['sessionsFound'], 'session')} in the window; {verb} "
            f"{counted(live['sessionsUpserted'], 'session')} and "
            f"{counted(live['memoriesUpserted'], 'memory', 'memories')} "
            f"({counted(live['sessionsSkipped'], 'session')} and "
            f"{counted(live['memoriesSkipped'], 'memory', 'memories')} already up to date)")
        if live["unparseableCreatedAt"]:
            named = ", ".join(str(r.get("rowId")) for r in live["unparseableRows"])
            lines.append(f"  {counted(live['unparseableCreatedAt'], 'summary', 'summaries')} "
                         f"with an unparseable createdAt were not considered: {named}")
    drain = figures["drain"]
    if "skipped" in drain:
        lines.append(f"  drain skipped ({drain['skipped']})")
    elif "error" in drain:
        lines.append(f"  drain failed: {drain['error']}")
    else:
        lines.append(
            f"  queue: {counted(drain['totalLines'], 'line')}, {drain['succeeded']:,} linked, "
            f"{drain['requeued']:,} re-queued, {drain['deadLettered']:,} dead-lettered"
            + (" (dry run: counted only)" if figures["dryRun"] else ""))
    if figures["failureCount"]:
        lines.append(f"  {figures['failureCount']} failure(s):")
        lines.extend(f"    {failure}" for failure in figures["failures"])
        hidden = figures["failureCount"] - len(figures["failures"])
        if hidden > 0:
            lines.append(f"    ... and {hidden} more (see the log)")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> NoReturn:
    """Entry point."""
    args = build_parser().parse_args(argv)
    run_main(PROG, lambda: backfill(args))


if __name__ == "__main__":
    main()
