"""Tables for a person, drawn by rich, as plain text (pure: rows in, text out).

The commands print to a terminal, a pipe or a log alike, so the text carries no colour or
escape codes; rich does the column widths, alignment and wrapping of long cells. Every cell
and the whole text are made inert (`core.rules.terminal_text`): a tenant's id, path or slug
shows its control characters and cannot break a cell into lines.
"""

from __future__ import annotations

import io
import shutil
from collections.abc import Sequence
from typing import Any, TextIO

from rich import box
from rich.console import Console
from rich.table import Table

from core.rules.terminal_text import inert

#: Columns of the text off a terminal (a pipe, a log, a test): wide enough that a URL or a
#: path in a cell is not folded across lines (a table takes only the width it needs).
DEFAULT_WIDTH = 200


def output_width(stream: TextIO) -> int:
    """The terminal's width when `stream` is one, else DEFAULT_WIDTH."""
    if hasattr(stream, "isatty") and stream.isatty():
        return shutil.get_terminal_size((DEFAULT_WIDTH, 24)).columns
    return DEFAULT_WIDTH


def table(title: str | None, headers: Sequence[str], rows: Sequence[Sequence[Any]], *,
          numeric: Sequence[str] = ()) -> Table:
    """A table with `headers`, one row per item (None shows as `-`); the `numeric` columns are
    right-aligned with thousands separators."""
    drawn = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False,
                  show_edge=False)
    for header in headers:
        drawn.add_column(header, justify="right" if header in numeric else "left",
                         overflow="fold")
    for row in rows:
        drawn.add_row(*(_cell(value) for value in row))
    return drawn


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    return inert(str(value), keep_newlines=False)


def as_text(*parts: Any, width: int = DEFAULT_WIDTH) -> str:
    """Render tables and strings one after another as plain text, `width` columns wide.
    Strings are made inert before rich sees them: rich drops some control characters itself
    (a bell, a backspace), so escaping only its output would hide what a value really holds."""
    buffer = io.StringIO()
    console = Console(file=buffer, width=width, color_system=None, force_terminal=False,
                      highlight=False, markup=False, emoji=False)
    for part in parts:
        console.print(inert(part) if isinstance(part, str) else part)
    return inert(buffer.getvalue())
