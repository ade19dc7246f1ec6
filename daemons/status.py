"""`python -m daemons.status [--json] [--config F]`: queue depth, dead letters, last ticks,
per-tenant drift and recent alerts.

Read-only and Chroma-free (see `core.reports.status`), so it works beside running daemons, including
on an embedded store they hold. A table on stdout; with `--json` exactly one JSON object.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import NoReturn

from core.reports.status import gather_status
from core.reports.status_text import render_status_text
from core.reports.tables import output_width
from core.rules.camel_json import to_json
from core.runtime.settings import load_settings
from daemons._cli import EXIT_OK, Parser, add_config_flag, emit_json, run_main, write_text

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
    return parser


async def show_status(config: str | None, *, as_json: bool) -> int:
    """Gather and print."""
    status = await gather_status(load_settings(config))
    if as_json:
        emit_json(to_json(status))
    else:
        write_text(render_status_text(status, width=output_width(sys.stdout)))
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> NoReturn:
    """Entry point."""
    args = build_parser().parse_args(argv)
    run_main(PROG, lambda: show_status(args.config, as_json=args.json))


if __name__ == "__main__":
    main()
