"""`python -m daemons.drain [--config F] [--tick] [--dry-run] [--json]`: the drain daemon;
`python -m daemons.drain forget DRAINER`: forget a gone drainer (`daemons.cli.drainer_forget`).

Each REM tick live-ingests newly summarized sessions, then drains the lazy-edge queue
(`core.drain.rem_tick.rem_tick`). `--tick` runs one tick and exits; without it the daemon runs on
its schedule until SIGTERM or Ctrl-C.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from typing import NoReturn

from core.base.config.config import Settings
from core.base.rules.camel_json import Figures
from core.base.runtime.settings import load_settings
from core.base.state.daemon_state import DRAIN_JOB
from core.drain.rem_tick import RemTickFigures, rem_tick
from core.drain.stores.drainer_queue import read_drainer_queue
from core.drain.stores.queue_files import refuse_symlinked_queue
from core.suite.scheduler import DaemonSpec
from core.suite.tick import Job
from daemons.cli.commands import (
    Parser,
    add_run_flags,
    agreed_config,
    run_main,
    split_leading_config,
)
from daemons.cli.drainer_forget import FORGET, build_forget_parser, run_forget
from daemons.cli.serving import serve_main, tick_once
from daemons.cli.summaries import drain_tick_summary

PROG = "daemons.drain"
SCRIPT = "kb-drain"
DAEMON = DRAIN_JOB


def build_parser() -> Parser:
    """Flags of the drain daemon."""
    parser = Parser(prog=SCRIPT, description="The drain daemon: each REM tick live-ingests "
                    "newly summarized sessions, then drains the lazy-edge queue.",
                    epilog=f"Forget a gone drainer: {SCRIPT} {FORGET} DRAINER [--config F] "
                    "[--json].")
    add_run_flags(parser, tick=True)
    return parser


def draining_left(settings: Settings) -> bool:
    """Whether an earlier drain left a `.draining` file (stopped, crashed): its lines wait
    for the next tick, which then runs at once."""
    return settings.drain.draining_path.exists()


def drain_spec(settings: Settings) -> DaemonSpec:
    """The drain daemon's job: one REM tick every `remIntervalMs` (and bounded by it), at
    once after a start that finds a `.draining` file left behind."""
    return DaemonSpec(DAEMON, (Job(DAEMON, rem_tick, settings.drain.rem_interval_ms,
                                   work_left=draining_left, drainer=read_drainer_queue),))


def drain_daemon(settings: Settings) -> DaemonSpec:
    """The drain daemon. A symlinked queue path is refused at start (exit 2, one line), and
    again by every tick should one appear later."""
    refuse_symlinked_queue(settings.drain.lazy_edges_queue_path)
    return drain_spec(settings)


async def tick_once_now(config: str | None, *, dry_run: bool, as_json: bool) -> int:
    """`--tick`: one REM tick, as the scheduler runs it (re-queued edges still count as
    done)."""
    settings = load_settings(config)

    def summarize(figures: Mapping[str, Figures]) -> str:
        tick = figures[DAEMON]
        assert isinstance(tick, RemTickFigures)
        return drain_tick_summary(tick, dry_run=dry_run,
                                  dead_letter_path=settings.drain.dead_letter_path)

    return await tick_once(drain_spec(settings), settings, dry_run=dry_run, as_json=as_json,
                           summarize=summarize)


def main(argv: Sequence[str] | None = None) -> NoReturn:
    """Entry point: `forget DRAINER`, one tick, or the daemon."""
    before, argv = split_leading_config(sys.argv[1:] if argv is None else argv)
    if argv[:1] == [FORGET]:
        forget_parser = build_forget_parser(SCRIPT)
        forget_args = forget_parser.parse_args(argv[1:])
        forget_args.config = agreed_config(forget_parser, before, forget_args.config)
        run_main(PROG, lambda: run_forget(forget_args))
    parser = build_parser()
    args = parser.parse_args(argv)
    args.config = agreed_config(parser, before, args.config)
    if args.tick:
        run_main(PROG, lambda: tick_once_now(args.config, dry_run=args.dry_run,
                                                as_json=args.json))
    if args.json:
        build_parser().error("argument --json: only with --tick (a daemon logs its figures)")
    serve_main(PROG, config=args.config, build_specs=lambda s: [drain_daemon(s)],
               dry_run=args.dry_run,
               metrics_port=lambda s: ("drainMetricsPort", s.drain.metrics_port))


if __name__ == "__main__":
    main()
