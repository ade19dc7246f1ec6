"""Text that comes from outside (a store's error message, an exception's text) made safe to
show an operator (pure): bounded, and inert on a terminal.

A store's reason for refusing a row may quote the row back (a nested metadata value, a
document's text) and an exception's text may hold anything; printed raw, a control character
in it could clear the screen or retitle the terminal, and a long one could bury the line that
names what happened. So every such text goes through `shown_text` before it reaches stderr,
stdout or a `--json` object.
"""

from __future__ import annotations

import unicodedata
from typing import Final

#: How much of a store's reason or an unexpected error's text is kept: enough to tell one
#: reason from another ("Collection expecting embedding with dimension of 384, got 768"),
#: short enough that a row quoted back whole cannot flood a report.
SHOWN_TEXT_MAX_CHARS: Final = 300
#: Marks where a text was cut.
CUT_MARK: Final = "…"
#: Characters that are not control characters (category Cc) yet change how a terminal shows
#: what follows: line and paragraph separators, and the bidirectional overrides and isolates.
_INVISIBLE_FORMATTING: Final = frozenset(
    "\u2028\u2029\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


def _visible(char: str) -> str:
    """`char` itself, or its escape (`\\x1b`, `\\u202e`) when a terminal would act on it."""
    if unicodedata.category(char) != "Cc" and char not in _INVISIBLE_FORMATTING:
        return char
    code = ord(char)
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def shown_text(text: str, *, limit: int = SHOWN_TEXT_MAX_CHARS) -> str:
    """`text` with every control character written as a visible escape (newlines and tabs
    included, so the result is one line), cut after `limit` characters of the result with
    `CUT_MARK` at the cut; an escape is never cut in half."""
    out: list[str] = []
    length = 0
    for char in text:
        shown = _visible(char)
        if length + len(shown) > limit:
            out.append(CUT_MARK)
            break
        out.append(shown)
        length += len(shown)
    return "".join(out)
