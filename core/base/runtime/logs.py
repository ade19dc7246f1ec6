"""Logging: structlog events and the standard library's (APScheduler, chromadb) through one
renderer on stderr. JSON lines when stderr is not a terminal (journald, files, tools); readable
console output on one. `daemon`, `tick` and `tenant` are bound through contextvars, so every
line of a unit of work carries them without threading them through each call.

Secrets: logs travel further than the config (the journal, a log shipper), so
- a traceback is logged without any frame's local variables (structlog's defaults show them
  for JSON and for rich console output, and a local is often the settings, with every webhook
  URL in them): plain frames and the exception's message only;
- every line, the stdlib's included, is scrubbed of every form of every secret of the
  configuration (`Secrets`), before rendering (JSON escapes would hide a secret from a text
  search) and after (what the console renderer adds).

The process's secrets are registered here once the configuration is read (`configure_logging`
with `secrets=`), and `scrub_shown` applies them to anything else the process prints
(`--json`, `status`, error lines): one list of secrets, one scrubber.
"""

from __future__ import annotations

import logging
import sys
from typing import Any, TextIO

import structlog
from structlog.tracebacks import ExceptionDictTransformer

from core.base.rules.secrets import NO_SECRETS, Secrets
from core.base.rules.terminal_text import inert

#: Third-party loggers that are chatty at INFO; their warnings and errors still come through.
QUIET_LOGGERS = ("chromadb", "httpx", "httpcore", "apscheduler", "urllib3")

_HANDLER_NAME = "kb-daemons"

#: The secrets of the configuration this process runs under (see `configure_logging`).
_secrets: Secrets = NO_SECRETS


def process_secrets() -> Secrets:
    """The secrets registered by the last `configure_logging` (none before the config is read)."""
    return _secrets


def scrub_shown(value: Any) -> Any:
    """`value` (a `--json` object, a line of text) with every form of every secret of the
    process's configuration hidden: what the process prints goes through this."""
    return _secrets.scrub_value(value)


def _scrub_event(_logger: Any, _name: str, event_dict: Any) -> Any:
    """Processor: every string of the event (the formatted traceback included) scrubbed."""
    return _secrets.scrub_value(event_dict)


def _scrub_rendered(_logger: Any, _name: str, rendered: Any) -> Any:
    """Processor after the renderer: the line as written, scrubbed once more."""
    return _secrets.scrub(rendered) if isinstance(rendered, str) else rendered


class _StderrHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """A handler that writes to whatever `sys.stderr` is at emit time (pytest swaps it)."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)
        self.set_name(_HANDLER_NAME)

    @property
    def stream(self) -> TextIO:
        return sys.stderr

    @stream.setter
    def stream(self, _value: Any) -> None:
        pass


def _inert_strings(_logger: Any, _name: str, event: dict[str, Any]) -> dict[str, Any]:
    """Console logs only: every string value (a tenant id, a dead-letter reason, an alert's
    text on the `console` channel) made inert for the terminal. Other values are rendered
    with `repr`, which already escapes control characters; JSON logs escape them too."""
    return {key: inert(value) if type(value) is str else value for key, value in event.items()}


def wants_json(log_format: str, stream: TextIO | None = None) -> bool:
    """JSON for "json", console for "console", and for "auto" JSON unless on a terminal."""
    if log_format == "json":
        return True
    if log_format == "console":
        return False
    stream = stream or sys.stderr
    return not (hasattr(stream, "isatty") and stream.isatty())


#: The level this process logs at: INFO, but WARNING for a one-shot command on a terminal
#: (`quiet_on_terminal`), whose few summary lines are the answer.
_level = logging.INFO


def quiet_on_terminal(*, verbose: bool) -> None:
    """A one-shot command run on a terminal logs its warnings and errors only, unless
    `--verbose`: its summary comes first, not after a screen of info events. Off a terminal (a
    pipe, a unit, a CI log) every event is still written; a daemon never calls this."""
    global _level
    on_terminal = hasattr(sys.stderr, "isatty") and sys.stderr.isatty()
    _level = logging.WARNING if on_terminal and not verbose else logging.INFO


def configure_logging(
    log_format: str = "auto", *, level: int | None = None, secrets: Secrets | None = None
) -> None:
    """Set up structlog and the stdlib root logger (idempotent; call again after the config
    is read to switch format and register its `secrets`; None keeps those registered). The
    level is the process's (`quiet_on_terminal`) unless given."""
    global _secrets
    if secrets is not None:
        _secrets = secrets
    shared: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_logger_name,
        structlog.stdlib.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        structlog.stdlib.ExtraAdder(),
    ]
    # Exceptions become data before the scrubber sees the event: a traceback's frames (file,
    # line, function) and its message, never a frame's locals.
    exceptions: Any
    renderer: Any
    if wants_json(log_format):
        exceptions = structlog.processors.ExceptionRenderer(
            ExceptionDictTransformer(show_locals=False))
        renderer = structlog.processors.JSONRenderer(default=str)
        terminal: list[Any] = []
    else:
        exceptions = structlog.processors.format_exc_info
        renderer = structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty(),
                                                 exception_formatter=structlog.dev.plain_traceback)
        terminal = [_inert_strings]
    final: list[Any] = [exceptions, _scrub_event, *terminal, renderer, _scrub_rendered]

    structlog.configure(
        processors=[*shared, structlog.stdlib.ProcessorFormatter.wrap_for_formatter],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=False,
    )
    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=shared,
        processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, *final],
    )
    root = logging.getLogger()
    for handler in list(root.handlers):
        if handler.get_name() == _HANDLER_NAME:
            root.removeHandler(handler)
    handler = _StderrHandler()
    handler.setFormatter(formatter)
    root.addHandler(handler)
    root.setLevel(_level if level is None else level)
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING)
