"""What every command shares: flag parsing with one-line errors, config loading, logging set-up,
`--json` output, and the one place where errors become CONTRACT exit codes.

Exit codes: 0 done; 1 the run could not do its work and nothing was lost (a store unreachable,
a lock held); 2 usage or configuration error, one line on stderr naming the flag or the
file:line:col.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Callable, Coroutine, Mapping, Sequence
from typing import Any, NoReturn

import structlog

from core.jobs.context import open_stores
from core.logs import configure_logging
from core.rules.config import ConfigWarning, LoadedConfig, Settings, load_config
from core.rules.errors import KbError
from core.ticks import TickFn, run_tick

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2

log = structlog.get_logger(__name__)


class Parser(argparse.ArgumentParser):
    """argparse with CONTRACT's error shape: one line on stderr, exit 2."""

    def error(self, message: str) -> NoReturn:
        sys.stderr.write(f"{self.prog}: error: {message}\n")
        raise SystemExit(EXIT_USAGE)


def add_config_flag(parser: argparse.ArgumentParser) -> None:
    """`--config F` (every command takes it, subcommands too)."""
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


def log_config_warnings(warnings: Sequence[ConfigWarning]) -> None:
    """One warning line per ignored or defaulted key."""
    for warning in warnings:
        log.warning("config.warning", key=warning.key or None, message=warning.message)


def load_settings(config: str | None) -> Settings:
    """Load the config, set up logging in its format, and log its warnings."""
    configure_logging("auto")
    loaded: LoadedConfig = load_config(config)
    configure_logging(loaded.settings.log_format)
    log_config_warnings(loaded.warnings)
    return loaded.settings


def counted(number: int, noun: str, plural: str | None = None) -> str:
    """`1 session`, `2 sessions`, `0 summaries` (pass `plural` where adding an s is wrong)."""
    return f"{number:,} {noun if number == 1 else (plural or noun + 's')}"


def emit_json(figures: Any) -> None:
    """The one JSON object of a `--json` run, on stdout."""
    sys.stdout.write(json.dumps(figures, default=str, sort_keys=True) + "\n")
    sys.stdout.flush()


def run_main(prog: str, main: Callable[[], Coroutine[Any, Any, int]]) -> NoReturn:
    """Run a command's coroutine and exit with CONTRACT's code for how it ended."""
    try:
        code = asyncio.run(main())
    except KbError as exc:
        sys.stderr.write(f"{prog}: error: {exc}\n")
        code = exc.exit_code
    except KeyboardInterrupt:
        sys.stderr.write(f"{prog}: interrupted\n")
        code = 130
    raise SystemExit(code)


async def run_one_tick(
    daemon: str,
    tick: TickFn,
    *,
    config: str | None,
    dry_run: bool,
    as_json: bool,
    followers: Callable[[Settings], Sequence[tuple[str, TickFn]]] = lambda _settings: (),
    succeeded: Callable[[Mapping[str, Any]], bool] = lambda _figures: True,
) -> bool:
    """The `--tick` path of a daemon: load settings, open the stores, run the same tick the
    scheduler runs (then each follower tick the settings call for, its figures under its
    name), and print the figures with `--json`. Returns whether the run did its work
    (`succeeded` of the figures). A failure still prints one JSON object
    (`{"ok": false, "error": ...}`) before it propagates to its exit code."""
    settings = load_settings(config)
    try:
        async with open_stores(settings, dry_run=dry_run) as stores:
            figures = await run_tick(daemon, stores, tick, dry_run=dry_run)
            for name, follower in followers(settings):
                figures[name] = await run_tick(name, stores, follower, dry_run=dry_run)
    except KbError as exc:
        if as_json:
            emit_json({"ok": False, "error": str(exc)})
        raise
    ok = succeeded(figures)
    if as_json:
        emit_json({"ok": ok, **figures})
    return ok
