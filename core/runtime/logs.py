"""Logging: structlog events and the standard library's (APScheduler, chromadb) through one
renderer on stderr. JSON lines when stderr is not a terminal (journald, files, tools); readable
console output on one. `daemon`, `tick` and `tenant` are bound through contextvars, so every
line of a unit of work carries them without threading them through each call.
"""

from __future__ import annotations

import logging
import sys
from typing import Any, TextIO

import structlog

from core.rules.terminal_text import inert

#: Third-party loggers that are chatty at INFO; their warnings and errors still come through.
QUIET_LOGGERS = ("chromadb", "httpx", "httpcore", "apscheduler", "urllib3")

_HANDLER_NAME = "kb-daemons"


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


def configure_logging(log_format: str = "auto", *, level: int = logging.INFO) -> None:
    """Set up structlog and the stdlib root logger (idempotent; call again after the config
    is read to switch format)."""
    shared: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_logger_name,
        structlog.stdlib.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        structlog.stdlib.ExtraAdder(),
    ]
    renderer: Any
    if wants_json(log_format):
        renderer = structlog.processors.JSONRenderer(default=str)
        final: list[Any] = [structlog.processors.dict_tracebacks, renderer]
    else:
        renderer = structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty())
        final = [_inert_strings, renderer]

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
    root.setLevel(level)
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING)
