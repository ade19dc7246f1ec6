"""`kb-drain forget DRAINER [--config F] [--json]`: remove a gone drainer's row from the state,
so that status and /metrics stop showing it (`core.drain.rules.drainers`).

Only a gone drainer is forgotten; a live one is exit 2 saying when it would be gone (its next
tick would write its row again), and one that ticked in between keeps its row (exit 1). Its
queue, id file and segment rows are not touched: a host that comes back drains on as before.
A SQLite state has nothing to forget (exit 2).
"""

from __future__ import annotations

import argparse

from core.base.io.clock import now_ms
from core.base.rules.errors import ConfigError, KbError
from core.base.rules.timestamps import iso_from_ms
from core.base.runtime.settings import load_settings
from core.base.state.daemon_state import forget_drainer, last_drainer_ticks
from core.base.state.state import open_graph
from core.drain.rules.drainers import gone_after_ms, is_gone, named_drainer, shown_name
from daemons.cli.commands import EXIT_OK, Parser, add_config_flag, emit_json, write_text

FORGET = "forget"


def build_forget_parser(script: str) -> Parser:
    """`forget DRAINER [--config F] [--json]`."""
    parser = Parser(prog=f"{script} {FORGET}",
                    description="Forget a gone drainer: remove its row from the state, so "
                    "kb-status and /metrics stop showing it. Only a drainer with no tick for "
                    "drainerGoneIntervals x remIntervalMs (kb-status says gone) is forgotten; "
                    "its queue and segment rows are kept, and a drainer that ticks again is "
                    "shown again.")
    parser.add_argument("drainer", metavar="DRAINER",
                        help="as kb-status shows it: its id, a start of it only it has, or "
                        "(single) for a SQLite file's drainer copied by kb-migrate")
    add_config_flag(parser)
    parser.add_argument("--json", action="store_true",
                        help="print exactly one JSON object: the drainer forgotten")
    return parser


async def run_forget(args: argparse.Namespace) -> int:
    """Forget the drainer `args.drainer` names, if it is gone."""
    settings = load_settings(args.config)
    if not settings.state.url:
        raise ConfigError("a SQLite state has one drainer, this host's: nothing to forget "
                          "(kb-drain forget is for a shared PostgreSQL state, stateUrl)")
    graph = await open_graph(settings.state)
    try:
        ticks = {t.queue.drainer: t for t in await last_drainer_ticks(graph)}
        tick = ticks[named_drainer(args.drainer, ticks)]
        name, finished = shown_name(tick.queue.drainer), tick.tick.finished_at
        drain = settings.drain
        window = gone_after_ms(drain.rem_interval_ms, drain.drainer_gone_intervals)
        if not is_gone(finished, now_ms(), interval_ms=settings.drain.rem_interval_ms,
                       intervals=settings.drain.drainer_gone_intervals):
            raise ConfigError(
                f"drainer {name} (host {tick.queue.host}) is not gone: its last tick finished "
                f"at {iso_from_ms(finished)}; it is gone from {iso_from_ms(finished + window)} "
                f"(drainerGoneIntervals = {settings.drain.drainer_gone_intervals} x remIntervalMs)")
        if not await forget_drainer(graph, tick):
            raise KbError(f"drainer {name} ticked while it was being forgotten: its row stays")
    finally:
        await graph.close()
    if args.json:
        emit_json({"ok": True, "drainer": tick.queue.drainer, "host": tick.queue.host,
                   "lastTickFinishedAt": finished})
    else:
        write_text(f"forgot drainer {name} (host {tick.queue.host}, last tick "
                   f"{iso_from_ms(finished)}); kb-status and /metrics no longer show it\n")
    return EXIT_OK
