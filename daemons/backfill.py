"""`python -m daemons.backfill --days N [--dry-run] [--skip-drain] [--json] [--config F]`:
live-ingest every session summarized in the last N days, then drain the lazy-edge queue.

The work is `core.drain.eager_backfill`, run once through the runtime's one-shot path; this
module parses the flags, shows progress and turns the outcome into CONTRACT's exit codes
(`daemons.cli.commands`; 1 also when a session failed, each listed).
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Sequence
from typing import NoReturn

from core.base.config.config import Settings
from core.base.reports.progress import choose_progress
from core.base.runtime.context import Progress, TickContext
from core.base.runtime.settings import load_settings
from core.drain.eager_backfill import (
    EagerBackfillFigures,
    eager_backfill,
)
from core.suite.oneshot import run_jobs_once
from core.suite.tick import Job
from daemons.cli.commands import (
    Parser,
    add_run_flags,
    emit_json,
    run_main,
    write_text,
)
from daemons.cli.serving import exit_code
from daemons.cli.summaries import backfill_summary

PROG = "daemons.backfill"
SCRIPT = "kb-backfill"
#: The name this run is recorded under in `daemon_ticks`, so `daemons.status` shows when the
#: last eager back-fill ran and what it did.
TICK_NAME = "backfill"

#: The window when `--days` is not given: a month, the platform's usual look-back.
DEFAULT_DAYS = 30

_WHOLE_NUMBER = re.compile(r"[0-9]+")


def positive_days(text: str) -> int:
    """`--days`: a whole number >= 1; anything else is a usage error (exit 2), never a silent
    month of back-fill nobody asked for."""
    if not _WHOLE_NUMBER.fullmatch(text) or int(text) < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number of days >= 1, got {text!r}")
    return int(text)


def build_parser() -> Parser:
    """Flags of the back-fill command; `--help` documents every one."""
    parser = Parser(
        prog=SCRIPT,
        description="Live-ingest every session whose summary was created in the last N days "
        "(its summary, memories and ORIGINATES_IN edges), then drain the lazy-edge queue.",
        epilog="exit codes: 0 done; 1 a session failed (each is listed) or a store was "
        "unreachable or locked; 2 a usage or configuration error",
    )
    parser.add_argument("--days", metavar="N", type=positive_days, default=DEFAULT_DAYS,
                        help="window in days, a whole number >= 1 (default "
                        f"{DEFAULT_DAYS}): sessions whose "
                        "summary createdAt (else its timestamp, as the original's rows "
                        "carry; ISO-8601 or epoch ms/s, compared as a time) is "
                        "within the last N days are ingested")
    parser.add_argument("--skip-drain", action="store_true",
                        help="do not drain the lazy-edge queue after ingesting")
    add_run_flags(parser)
    return parser


def backfill_job(settings: Settings, args: argparse.Namespace, progress: Progress) -> Job:
    """The back-fill as one recorded tick of its own, bounded like a drain tick (it ends with
    one): at most max(`remIntervalMs`, MIN_TICK_TIMEOUT_S)."""

    async def tick(context: TickContext, dry_run: bool) -> EagerBackfillFigures:
        report = await eager_backfill(context, days=args.days, dry_run=dry_run,
                                      skip_drain=args.skip_drain, progress=progress)
        return report.figures()

    return Job(TICK_NAME, tick, settings.drain.rem_interval_ms)


async def backfill(args: argparse.Namespace) -> int:
    """Run the back-fill once through the runtime's one-shot path, report, pick the exit
    code (128 + the signal's number when a stop signal ended it after its current batch)."""
    settings = load_settings(args.config)
    progress = choose_progress(sys.stderr, event="backfill.progress")
    done = await run_jobs_once(settings, [backfill_job(settings, args, progress)],
                               dry_run=args.dry_run)
    result = done.figures[TICK_NAME]
    figures = result.figures
    assert isinstance(figures, EagerBackfillFigures)
    if args.json:
        emit_json(result.json())
    else:
        write_text(backfill_summary(figures))
    return exit_code(ok=figures.ok, run=done.run)


def main(argv: Sequence[str] | None = None) -> NoReturn:
    """Entry point."""
    args = build_parser().parse_args(argv)
    run_main(PROG, lambda: backfill(args))


if __name__ == "__main__":
    main()
