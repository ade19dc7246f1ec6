"""`python -m daemons.migrate --to postgresql://host[:port]/db [--config F] [--json]`: copy the
SQLite state of the configuration into an empty PostgreSQL database, verified per table, in
one transaction (`core.suite.migrate`).

Exit 0: copied and verified. 1: a daemon holds the state, a store is unreachable, or a table
could not be copied exactly (the target is left empty; the table is named). 2: the flags or
configuration are wrong, the source is missing, or the target is not empty (one line).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import NoReturn

from core.base.config.state_url import InvalidStateUrl, parse_state_url
from core.base.reports.tables import as_text, output_width, table
from core.base.rules.camel_json import to_json
from core.base.runtime.settings import load_settings
from core.suite.migrate import MigrationFigures, migrate_state
from daemons.cli.commands import (
    EXIT_FAILED,
    EXIT_OK,
    Parser,
    add_config_flag,
    emit_json,
    run_main,
    write_error,
    write_text,
)

PROG = "daemons.migrate"
SCRIPT = "kb-migrate"


def _state_url(text: str) -> str:
    """`--to`, checked as `stateUrl` is (`core.base.config.state_url`); the message never quotes
    the value (it may hold a password)."""
    try:
        return parse_state_url(text)
    except InvalidStateUrl as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def build_parser() -> Parser:
    """Flags of the migrate command."""
    parser = Parser(prog=SCRIPT,
                    description="Copy the SQLite state (graph, telemetry, tenants, manifests, "
                    "policies, drain offsets, alert history) into an empty PostgreSQL "
                    "database, check every table's rows and checksum, and commit only when "
                    "all match. Stop the daemons first.")
    add_config_flag(parser)
    parser.add_argument("--to", metavar="URL", required=True, type=_state_url,
                        help="the target: postgresql://host[:port]/database, no password "
                        "(PGPASSWORD / PGPASSFILE)")
    parser.add_argument("--json", action="store_true",
                        help="print exactly one JSON object on stdout")
    return parser


def render_text(figures: MigrationFigures, *, width: int) -> str:
    """The per-table table, then one line saying what happened."""
    rows = [(t.table, t.rows, t.checksum[:16], t.matches, t.invalid_json)
            for t in figures.tables]
    drawn = table(f"{figures.source} -> {figures.target}",
                  ("table", "rows", "checksum", "match", "invalid JSON kept"), rows,
                  numeric=("rows", "invalid JSON kept"))
    verdict = ("copied and verified; point stateUrl at the target" if figures.ok
               else f"not migrated: {figures.error}")
    return as_text(drawn, verdict, width=width)


async def migrate(config: str | None, *, target: str, as_json: bool) -> int:
    """Run the migration and print its figures."""
    figures = await migrate_state(load_settings(config), target_url=target)
    if as_json:
        emit_json(to_json(figures))
    else:
        write_text(render_text(figures, width=output_width(sys.stdout)))
    if not figures.ok:
        write_error(f"{SCRIPT}: error: {figures.error}\n")
    return EXIT_OK if figures.ok else EXIT_FAILED


def main(argv: Sequence[str] | None = None) -> NoReturn:
    """Entry point."""
    args = build_parser().parse_args(argv)
    run_main(PROG, lambda: migrate(args.config, target=args.to, as_json=args.json))


if __name__ == "__main__":
    main()
