"""`python -m daemons.status [--json] [--config F]`: queue depth, dead letters, last ticks,
per-tenant drift and recent alerts. `--health [--days N] [--markdown]`: the original's
`KB Multi-Tenant Health` table per tenant and repo over the last N days (default 7).

Read-only and Chroma-free (see `core.suite.status`), so it works beside running daemons, including
on an embedded store they hold. A table on stdout; with `--json` exactly one JSON object.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import NoReturn

from core.alerting.reports.health import gather_health, render_health_markdown, render_health_text
from core.alerting.rules.health import DEFAULT_HEALTH_DAYS, parse_days
from core.base.reports.tables import output_width
from core.base.rules.camel_json import to_json
from core.base.runtime.settings import load_settings
from core.suite.status import gather_status
from core.suite.status_text import render_status_text
from daemons.cli.commands import EXIT_OK, Parser, add_config_flag, emit_json, run_main, write_text

PROG = "daemons.status"
SCRIPT = "kb-status"


def build_parser() -> Parser:
    """Flags of the status command."""
    parser = Parser(prog=SCRIPT,
                    description="Show the lazy-edge queue, dead letters, each daemon's last "
                    "tick, each tenant's config version and stale count, and recent alerts. "
                    "Reads only; never opens Chroma.")
    add_config_flag(parser)
    parser.add_argument("--json", action="store_true",
                        help="print exactly one JSON object on stdout instead of the tables")
    parser.add_argument("--health", action="store_true",
                        help="show the KB Multi-Tenant Health table instead: telemetry events "
                        "by kind, errors, error rate, chunks embedded and deleted, per tenant "
                        "and repo over the last N days")
    parser.add_argument("--days", metavar="N", type=_days,
                        help="with --health: the window in days, a whole number >= 1 "
                        f"(default {DEFAULT_HEALTH_DAYS})")
    parser.add_argument("--markdown", action="store_true",
                        help="with --health: print the table as a GitHub Markdown section")
    return parser


def _days(text: str) -> int:
    """`--days` (see `core.alerting.rules.health.parse_days`): a bad value is a usage error, exit
    2."""
    try:
        return parse_days(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _check_flags(parser: Parser, args: argparse.Namespace) -> None:
    """`--days` and `--markdown` belong to `--health`; `--markdown` and `--json` each ask for
    the whole of stdout. Either mistake is a usage error (exit 2), never a silent choice."""
    if not args.health:
        for flag, given in (("--days", args.days is not None), ("--markdown", args.markdown)):
            if given:
                parser.error(f"argument {flag}: only with --health")
    if args.markdown and args.json:
        parser.error("argument --markdown: not allowed with argument --json")


async def show_status(config: str | None, *, as_json: bool) -> int:
    """Gather and print."""
    status = await gather_status(load_settings(config))
    if as_json:
        emit_json(to_json(status))
    else:
        write_text(render_status_text(status, width=output_width(sys.stdout)))
    return EXIT_OK


async def show_health(config: str | None, *, days: int, as_json: bool, markdown: bool) -> int:
    """Gather the health view of the last `days` days and print it (text, Markdown or JSON)."""
    report = await gather_health(load_settings(config), days=days)
    if as_json:
        emit_json(to_json(report))
    elif markdown:
        write_text(render_health_markdown(report))
    else:
        write_text(render_health_text(report, width=output_width(sys.stdout)))
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> NoReturn:
    """Entry point."""
    parser = build_parser()
    args = parser.parse_args(argv)
    _check_flags(parser, args)
    if args.health:
        days = args.days if args.days is not None else DEFAULT_HEALTH_DAYS
        run_main(PROG, lambda: show_health(args.config, days=days, as_json=args.json,
                                           markdown=args.markdown))
    else:
        run_main(PROG, lambda: show_status(args.config, as_json=args.json))


if __name__ == "__main__":
    main()
