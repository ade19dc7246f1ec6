"""`python -m daemons.enqueue [--config F]`: append edge JSON lines from stdin to the queue.

All or nothing (`core.drain.stores.queue_files.enqueue_edges`): a malformed line appends none
(exit 2, each bad line named by its number on stderr); a failed write leaves the queue as it
was (exit 1). A `_drain` key is stripped, so every line is a new one.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import NoReturn

import structlog

from core.base.runtime.settings import load_settings
from core.drain.stores.queue_files import enqueue_edges
from daemons.cli.commands import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_USAGE,
    Parser,
    add_config_flag,
    command_name,
    emit_json,
    run_main,
    write_error,
    write_text,
)
from daemons.cli.summaries_admin import enqueue_summary

PROG = "daemons.enqueue"
SCRIPT = "kb-enqueue"
log = structlog.get_logger(__name__)


def build_parser() -> Parser:
    """Flags of the producer command."""
    parser = Parser(prog=SCRIPT, description="Append edge JSON lines from stdin to the lazy-edge "
                    "queue: all of them, or none when one is malformed (each is named).")
    add_config_flag(parser)
    parser.add_argument("--json", action="store_true",
                        help="print exactly one JSON object (lines appended, or the malformed "
                        "ones) on stdout")
    return parser


async def enqueue_stdin(config: str | None, *, as_json: bool = False) -> int:
    """Read stdin, check it, append it (all or nothing)."""
    settings = load_settings(config)
    lines = sys.stdin.buffer.read().split(b"\n")
    name = command_name(PROG)
    try:
        problems = enqueue_edges(settings.drain.lazy_edges_queue_path, lines)
    except OSError as exc:
        write_error(f"{name}: nothing appended: {exc}\n")
        if as_json:
            emit_json({"ok": False, "appended": 0, "error": f"nothing appended: {exc}"})
        return EXIT_FAILED
    if problems:
        for problem in problems:
            write_error(f"{name}: line {problem.number}: {problem.detail}\n")
        write_error(f"{name}: nothing appended ({len(problems)} malformed line(s))\n")
        if as_json:
            emit_json({"ok": False, "appended": 0,
                       "error": f"nothing appended ({len(problems)} malformed line(s))",
                       "malformedLines": [{"line": p.number, "detail": p.detail}
                                          for p in problems]})
        return EXIT_USAGE
    appended = sum(1 for line in lines if line.strip())
    log.info("enqueue.appended", lines=appended, queue=str(settings.drain.lazy_edges_queue_path))
    if as_json:
        emit_json({"ok": True, "appended": appended,
                   "queue": str(settings.drain.lazy_edges_queue_path)})
    else:
        write_text(enqueue_summary(appended, settings.drain.lazy_edges_queue_path))
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> NoReturn:
    """Entry point."""
    args = build_parser().parse_args(argv)
    run_main(PROG, lambda: enqueue_stdin(args.config, as_json=args.json))


if __name__ == "__main__":
    main()
