"""What every command shares: flag parsing with one-line errors, `--json` output, and the one
place where errors become CONTRACT exit codes.

Exit codes: 0 done; 1 the run could not do its work and nothing was lost (a store unreachable,
a lock held, a one-shot run past its time bound); 2 usage or configuration error, one line on
stderr naming the flag or the file:line:col; 128 + the signal's number when SIGINT/SIGTERM
stopped a one-shot run (it finished its current unit of work first).

`--json` holds on every exit path, in this module alone: a command line that asks for it
(`--json`, or an abbreviation argparse accepts) gets exactly one JSON object on stdout however
the command ends. A usage error is reported by `Parser.error`, a `KbError` (a configuration
error, a store down, a lock held), an interrupt or an unexpected exception by `run_main`, each
as `{"ok": false, "error": "..."}` unless the command printed its own object first (a
`--json` run's figures, which carry `ok`). No command writes a failure object of its own.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass
from typing import Any, NoReturn

import structlog

from core.base.rules.errors import LOGGED_NOTE, KbError
from core.base.rules.terminal_text import inert, shown_text
from core.base.runtime.logs import quiet_on_terminal, scrub_shown
from core.base.runtime.process import limit_malloc_arenas, restrict_umask

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2

log = structlog.get_logger(__name__)

#: The flag that asks for one JSON object on stdout.
JSON_FLAG = "--json"
#: The shortest abbreviation of JSON_FLAG argparse accepts (no other flag starts with `--j`).
_JSON_ABBREVIATION_MIN = len("--j")


@dataclass(slots=True)
class _JsonOutput:
    """What this process's command line asked of stdout, and whether the one object is out.
    Set by `Parser` as it parses, read by `emit_json`, `Parser.error` and `run_main`."""

    requested: bool = False
    emitted: bool = False
    #: How many parsers are parsing now (a subcommand's parser runs inside its parent's).
    parsing: int = 0


_output = _JsonOutput()


def asks_for_json(argv: Sequence[str]) -> bool:
    """Whether a command line asks for `--json` (an abbreviation, or `--json=1` by mistake,
    included), read from the raw words so it holds for a line argparse refuses."""
    for word in argv:
        if word == "--":
            return False
        name = word.split("=", 1)[0]
        if len(name) >= _JSON_ABBREVIATION_MIN and JSON_FLAG.startswith(name):
            return True
    return False


def emit_failure(message: str) -> None:
    """The `{"ok": false, "error": ...}` object of a failed `--json` run, unless the run has
    already printed its one object (or did not ask for JSON)."""
    if _output.requested and not _output.emitted:
        emit_json({"ok": False, "error": message})


class Parser(argparse.ArgumentParser):
    """argparse with CONTRACT's error shape (see the module docstring); subcommand parsers
    are Parsers too."""

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None,
    ) -> tuple[argparse.Namespace, list[str]]:
        words = list(sys.argv[1:] if args is None else args)
        # Known before parsing, so that an error argparse reports in the middle knows it;
        # a subcommand's parser adds what its words say to its parent's.
        if _output.parsing == 0:
            _output.requested = _output.emitted = False
        _output.requested = _output.requested or asks_for_json(words)
        _output.parsing += 1
        try:
            parsed, extras = super().parse_known_args(words, namespace)
        finally:
            _output.parsing -= 1
        if _output.parsing == 0:
            _output.requested = bool(getattr(parsed, "json", False)) or asks_for_json(extras)
            quiet_on_terminal(verbose=bool(getattr(parsed, "verbose", False)))
        return parsed, extras

    def error(self, message: str) -> NoReturn:
        write_error(f"{self.prog}: error: {message}\n")
        emit_failure(f"{self.prog}: {message}")
        raise SystemExit(EXIT_USAGE)


def command_name(module: str) -> str:
    """The command as it was typed (`kb-reconcile`, or `daemons.reconcile` under `python -m`),
    for error prefixes and usage lines."""
    typed = os.path.basename(sys.argv[0])
    return typed if typed.startswith("kb-") else module


def split_leading_config(argv: Sequence[str]) -> tuple[str | None, list[str]]:
    """`--config F` given before a subcommand, and the rest of the words (`agreed_config`
    joins it with the one after)."""
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
    """The one config file of `--config` given before and/or after the subcommand; two
    different files are a usage error rather than a silent choice."""
    if before is not None and after is not None and os.path.abspath(before) != os.path.abspath(
            after):
        parser.error(f"argument --config: given twice with different files ({before!r} before "
                     f"the subcommand, {after!r} after it)")
    return after if after is not None else before


def add_config_flag(parser: argparse.ArgumentParser) -> None:
    """`--config F` and `--verbose` (every command takes them, before or after a
    subcommand)."""
    parser.add_argument(
        "--config",
        metavar="F",
        help="TOML file with a [knowledgeBase] table "
        "(default: $KB_CONFIG, else config/kb.toml when present, else built-in defaults)",
    )
    parser.add_argument(
        "--verbose", action="store_true", default=argparse.SUPPRESS,
        help="on a terminal, log every event (by default a command there logs only warnings "
        "and errors before its summary; off a terminal every event is logged)",
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


def write_text(text: str) -> None:
    """Text for a person on stdout, scrubbed of the configuration's secrets and made inert
    (`core.base.rules.terminal_text`): quoted control characters are shown, never obeyed."""
    sys.stdout.write(inert(scrub_shown(text)))


def write_error(text: str) -> None:
    """An error or a note on stderr, scrubbed and made inert like `write_text`."""
    sys.stderr.write(inert(scrub_shown(text)))


def emit_json(figures: Any) -> None:
    """The one JSON object of a `--json` run, on stdout, scrubbed of the configuration's
    secrets. A second object is logged instead (it would break every reader of the first)."""
    if _output.emitted:
        log.error("cli.second_json_object_dropped", keys=sorted(figures)[:20]
                  if isinstance(figures, dict) else type(figures).__name__)
        return
    _output.emitted = True
    sys.stdout.write(json.dumps(scrub_shown(figures), default=str, sort_keys=True) + "\n")
    sys.stdout.flush()


def unexpected_error(exc: BaseException) -> str:
    """How an exception nobody raised on purpose is reported in one line (and under `--json`):
    its type and message, the message one inert, bounded line (`shown_text`)."""
    return f"unexpected {type(exc).__name__}: {shown_text(str(exc))}"


def run_main(prog: str, main: Callable[[], Coroutine[Any, Any, int]]) -> NoReturn:
    """Run a command's coroutine and exit with CONTRACT's code for how it ended (see the
    module docstring); an unexpected exception is logged once, scrubbed, and is exit 1. The
    process first gets its owner-only umask and malloc arena cap (`core.base.runtime.process`)."""
    restrict_umask()
    limit_malloc_arenas()
    prog = command_name(prog)
    try:
        code = asyncio.run(main())
    except KbError as exc:
        write_error(f"{prog}: error: {exc}\n")
        emit_failure(str(exc))
        code = exc.exit_code
    except KeyboardInterrupt:
        write_error(f"{prog}: interrupted\n")
        emit_failure("interrupted")
        code = 130
    except Exception as exc:
        # Unexpected (a bug, or a fault nothing names yet, e.g. a folder where a file should
        # be): the traceback once in the log, without locals and scrubbed, then one line.
        if LOGGED_NOTE not in getattr(exc, "__notes__", ()):
            log.error("command.failed", exc_info=True)
        write_error(f"{prog}: error: {unexpected_error(exc)}\n")
        emit_failure(unexpected_error(exc))
        code = EXIT_FAILED
    raise SystemExit(code)
