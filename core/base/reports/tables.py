"""Tables for a person, drawn by rich, as plain text (pure: rows in, text out).

The commands print to a terminal, a pipe or a log alike, so the text carries no colour or
escape codes; rich does the column widths, alignment and wrapping of long cells. Every cell
and the whole text are made inert (`core.base.rules.terminal_text`): a tenant's id, path or slug
shows its control characters and cannot break a cell into lines.
"""

from __future__ import annotations

import io
import shutil
import textwrap
from collections.abc import Sequence
from typing import Any, TextIO

from rich import box
from rich.console import Console
from rich.measure import Measurement
from rich.table import Table

from core.base.rules.terminal_text import inert

#: Columns of the text off a terminal (a pipe, a log, a test): wide enough that a URL or a
#: path in a cell is not folded across lines (a table takes only the width it needs).
DEFAULT_WIDTH = 200
#: A width no table reaches, to measure one's natural width.
UNLIMITED = 100_000


def output_width(stream: TextIO) -> int:
    """The terminal's width when `stream` is one, else DEFAULT_WIDTH."""
    if hasattr(stream, "isatty") and stream.isatty():
        return shutil.get_terminal_size((DEFAULT_WIDTH, 24)).columns
    return DEFAULT_WIDTH


class TextTable(Table):
    """A rich table that keeps its cells as text, so that `as_text` can lay it out as records
    when it is wider than the page."""

    def __init__(self, title: str | None, headers: Sequence[str],
                 cells: Sequence[Sequence[str]]) -> None:
        super().__init__(title=title, title_justify="left", box=box.SIMPLE_HEAD,
                         pad_edge=False, show_edge=False)
        self.record_title = title
        self.headers = tuple(headers)
        self.cells = tuple(tuple(row) for row in cells)


def table(title: str | None, headers: Sequence[str], rows: Sequence[Sequence[Any]], *,
          numeric: Sequence[str] = ()) -> TextTable:
    """A table with `headers`, one row per item (None shows as `-`); the `numeric` columns are
    right-aligned with thousands separators."""
    cells = [[_cell(value) for value in row] for row in rows]
    drawn = TextTable(title, headers, cells)
    for index, header in enumerate(headers):
        # Never narrower than its longest word: rich then wraps a cell only between words.
        longest = max((len(word) for text in (header, *(row[index] for row in cells
                                                          if index < len(row)))
                       for word in text.split()), default=1)
        drawn.add_column(header, justify="right" if header in numeric else "left",
                         overflow="fold", min_width=longest)
    for row in cells:
        drawn.add_row(*row)
    return drawn


def records(drawn: TextTable, *, width: int) -> str:
    """The table as records, for a page narrower than its columns' longest words: each row's
    first cell on a line of its own, then `header: value` a line each, wrapped between words
    under the value, so no word or time is cut in two."""
    lines = (textwrap.wrap(drawn.record_title, width, break_long_words=False,
                           break_on_hyphens=False) if drawn.record_title else [])
    for row in drawn.cells:
        lines += textwrap.wrap(row[0] if row else "-", width, initial_indent="  ",
                               subsequent_indent="    ")
        for header, value in zip(drawn.headers[1:], row[1:], strict=False):
            lines += textwrap.wrap(f"{header}: {value}", width, initial_indent="    ",
                                   subsequent_indent="      ", break_long_words=False,
                                   break_on_hyphens=False)
    return "\n".join(lines)


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    return inert(str(value), keep_newlines=False)


def _narrowest(console: Console, drawn: TextTable) -> int:
    """The fewest columns `drawn` takes with every cell wrapped between words."""
    return Measurement.get(console, console.options.update_width(UNLIMITED), drawn).minimum


def as_text(*parts: Any, width: int = DEFAULT_WIDTH) -> str:
    """Render tables and strings one after another as plain text, `width` columns wide; a
    table whose longest words do not fit side by side is laid out as records (`records`):
    nothing is folded mid-word.
    Strings are made inert before rich sees them: rich drops some control characters itself
    (a bell, a backspace), so escaping only its output would hide what a value really holds."""
    buffer = io.StringIO()
    console = Console(file=buffer, width=width, color_system=None, force_terminal=False,
                      highlight=False, markup=False, emoji=False)
    for part in parts:
        if isinstance(part, TextTable) and _narrowest(console, part) > width:
            part = records(part, width=width)
        console.print(inert(part) if isinstance(part, str) else part)
    return inert(buffer.getvalue())
