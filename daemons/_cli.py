"""What every command shares: flag parsing with one-line errors, `--json` output, and the one
place where errors become CONTRACT exit codes.

Exit codes: 0 done; 1 the run could not do its work and nothing was lost (a store unreachable,
a lock held, a one-shot run past its time bound); 2 usage or configuration error, one line on
stderr naming the flag or the file:line:col; 128 + the signal's number when SIGINT/SIGTERM
stopped a one-shot run (it finished its current unit of work first).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from collections.abc import Callable, Coroutine, Mapping, Sequence
from typing import Any, NoReturn

import structlog

from core.rules.config import Settings
from core.rules.errors import KbError
from core.rules.figures import Figures
from core.runtime.oneshot import OneShot, run_jobs_once
from core.runtime.process import limit_malloc_arenas
from core.runtime.scheduler import DaemonSpec, RuntimeOptions, serve
from core.runtime.settings import load_settings

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2

log = structlog.get_logger(__name__)


class Parser(argparse.ArgumentParser):
    """argparse with CONTRACT's error shape: one line on stderr, exit 2."""

    def error(self, message: str) -> NoReturn:
        sys.stderr.write(f"{self.prog}: error: {message}\n")
        raise SystemExit(EXIT_USAGE)


def command_name(module: str) -> str:
    """The command as it was typed, for error prefixes and usage lines: the console script's
    name (`kb-reconcile`) when run as one, else the module (`daemons.reconcile`, as in
    `python -m daemons.reconcile`)."""
    typed = os.path.basename(sys.argv[0])
    return typed if typed.startswith("kb-") else module


def split_leading_config(argv: Sequence[str]) -> tuple[str | None, list[str]]:
    """`--config F` (or `--config=F`) given before a subcommand, and the rest of the words.
    A command's own parser reads the `--config` after its subcommand; `agreed_config`
    joins the two."""
    words = list(argv)
    before: str | None = None
    while words[:1] and (words[0] == "--config" or words[0].startswith("--config=")):
        if words[0] == "--config":
            if len(words) < 2:
                break  # let the parser name the missing value
            before, words = words[1], words[2:]
        else:
            before, words = words[0].split("=", 1)[1], words[1:]
    return before, words


def agreed_config(parser: argparse.ArgumentParser, before: str | None,
                  after: str | None) -> str | None:
    """The one config file of a command given `--config` before and/or after its subcommand:
    either alone, or both when they name the same file; two different files are a usage error
    (exit 2) rather than a silent choice between them."""
    if before is not None and after is not None and os.path.abspath(before) != os.path.abspath(
            after):
        parser.error(f"argument --config: given twice with different files ({before!r} before "
                     f"the subcommand, {after!r} after it)")
    return after if after is not None else before


def add_config_flag(parser: argparse.ArgumentParser) -> None:
    """`--config F` (every command takes it, before or after a subcommand)."""
    parser.add_argument(
        "--config",
        metavar="F",
        help="TOML file with a [knowledgeBase] table "
        "(default: $KB_CONFIG, else config/kb.toml when present, else built-in defaults)",
    )


def add_run_flags(parser: argparse.ArgumentParser, *, tick: bool = False) -> None:
    """The flags of the daemon-style commands."""
    add_config_flag(parser)
    if tick:
        parser.add_argument("--tick", action="store_true",
                            help="run one tick now and exit instead of running as a daemon")
    parser.add_argument("--dry-run", action="store_true",
                        help="compute the figures but write nothing (graph, queue, Chroma, "
                        "telemetry)")
    parser.add_argument("--json", action="store_true",
                        help="print exactly one JSON object with the run's figures on stdout")


def emit_json(figures: Any) -> None:
    """The one JSON object of a `--json` run, on stdout."""
    sys.stdout.write(json.dumps(figures, default=str, sort_keys=True) + "\n")
    sys.stdout.flush()


def run_main(prog: str, main: Callable[[], Coroutine[Any, Any, int]]) -> NoReturn:
    """Run a command's coroutine and exit with CONTRACT's code for how it ended. The process
    first gets its malloc arena cap (`core.runtime.process`), before any thread or store."""
    limit_malloc_arenas()
    prog = command_name(prog)
    try:
        code = asyncio.run(main())
    except KbError as exc:
        sys.stderr.write(f"{prog}: error: {exc}\n")
        code = exc.exit_code
    except KeyboardInterrupt:
        sys.stderr.write(f"{prog}: interrupted\n")
        code = 130
    raise SystemExit(code)


async def tick_once(
    daemon: DaemonSpec,
    settings: Settings,
    *,
    dry_run: bool,
    as_json: bool,
    summarize: Callable[[Mapping[str, Figures]], str],
    succeeded: Callable[[Figures], bool] = lambda _figures: True,
) -> int:
    """A daemon's `--tick`: each of its jobs once, as its scheduler runs them (the first job's
    figures, then each other job's under its name), printed as one JSON object with `--json`,
    else as the few lines `summarize` makes of the figures by job name.
    Exit 0 when `succeeded` says the run did its work, 1 when not, 128 + the signal's number
    when a stop signal ended it early. A failure still prints one JSON object
    (`{"ok": false, "error": ...}`) before it propagates to its exit code."""
    try:
        done = await run_jobs_once(settings, daemon.jobs, dry_run=dry_run)
    except KbError as exc:
        if as_json:
            emit_json({"ok": False, "error": str(exc)})
        raise
    main = done.figures[daemon.jobs[0].name]
    shown = main.json()
    for job in daemon.jobs[1:]:
        if job.name in done.figures:
            shown[job.name] = done.figures[job.name].json()
    ok = succeeded(main.figures)
    if as_json:
        emit_json({"ok": ok, **shown})
    else:
        sys.stdout.write(summarize({name: result.figures for name, result in done.figures.items()}))
        sys.stdout.flush()
    return exit_code(ok=ok, run=done.run)


def exit_code(*, ok: bool, run: OneShot) -> int:
    """CONTRACT's code for a one-shot run: stopped by a signal (128 + its number), else 0 or 1."""
    stopped = run.stopped_exit_code
    if stopped is not None:
        return stopped
    return EXIT_OK if ok else EXIT_FAILED


def serve_main(
    prog: str,
    *,
    config: str | None,
    build_specs: Callable[[Settings], Sequence[DaemonSpec]],
    dry_run: bool = False,
) -> NoReturn:
    """The daemon-mode entry point of a `daemons.*` module: load the config, serve, exit."""

    async def main() -> int:
        settings = load_settings(config)
        return await serve(settings, build_specs(settings),
                           options=RuntimeOptions(dry_run=dry_run))

    run_main(prog, main)
