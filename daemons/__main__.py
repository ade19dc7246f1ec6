"""`python -m daemons [--config F]`: both daemons in one process (what `make run-daemons` runs).

One process can share one embedded Chroma store between the two daemons; each keeps its own
scheduler and SQLite connection, and one failing never stops the other.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NoReturn

from daemons.cli.commands import Parser, add_config_flag
from daemons.cli.serving import serve_main
from daemons.drain import drain_daemon
from daemons.reconcile import reconcile_daemon

PROG = "daemons"
SCRIPT = "kb-daemons"


def build_parser() -> Parser:
    """Flags of the combined process."""
    parser = Parser(prog=SCRIPT, description="Run both daemons (drain and reconcile) in one "
                    "process, in the foreground, until SIGTERM or Ctrl-C.")
    add_config_flag(parser)
    return parser


def main(argv: Sequence[str] | None = None) -> NoReturn:
    """Entry point."""
    args = build_parser().parse_args(argv)
    serve_main(PROG, config=args.config,
               build_specs=lambda s: [drain_daemon(s), reconcile_daemon(s)])


if __name__ == "__main__":
    main()
