"""Text made inert for a terminal (pure): control characters shown, never obeyed.

Tenant ids, repo slugs, manifest paths, chunk ids, dead-letter reasons and anything else a
tenant or a producer wrote can carry bytes a terminal acts on: ESC sequences (clear the screen,
recolour, retitle the window, hyperlinks), a carriage return or backspace that overwrites what
was printed, C1 controls (U+0080-U+009F: CSI, OSC on some terminals), and bidi overrides
(U+202A-U+202E, U+2066-U+2069) that make `a.py` read as something else. Every text renderer
passes what it prints through `inert`, so such a character shows as its escape (`\\x1b`,
`\\u202e`) instead. JSON output needs none of this: `json.dumps` escapes control characters
itself, and a JSON reader sees the real string.

`inert` is idempotent (its output has no character it would escape), and keeps newlines by
default: a rendered report is many lines, and one value cannot add a line to a table cell
because every cell goes through it with `keep_newlines=False`.

Text from outside (a store's reason for refusing a row, which may quote the row back; an
exception's text) is also bounded: `shown_text` makes it one inert line and cuts it, so a row
quoted back whole cannot bury the line that names what happened.
"""

from __future__ import annotations

import re
from typing import Final

#: C0 controls but the newline, DEL, the C1 controls, the direction marks, the bidi
#: embeddings, overrides and isolates, the line and paragraph separators, and the invisible
#: byte order mark. A tab is escaped too: it moves the cursor, and tables align by width.
_UNSAFE: Final = re.compile(
    "[\x00-\x09\x0b-\x1f\x7f-\x9f\u200e\u200f\u2028-\u202e\u2066-\u2069\ufeff]")
#: The same, with the newline.
_UNSAFE_LINE: Final = re.compile(
    "[\x00-\x1f\x7f-\x9f\u200e\u200f\u2028-\u202e\u2066-\u2069\ufeff]")
#: How much of a text from outside `shown_text` keeps: enough to tell one reason from another
#: ("Collection expecting embedding with dimension of 384, got 768"), short enough that a row
#: quoted back whole cannot flood a report.
SHOWN_TEXT_MAX_CHARS: Final = 300
#: Marks where a text was cut.
CUT_MARK: Final = "…"


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def inert(text: str, *, keep_newlines: bool = True) -> str:
    """`text` with every control character (C0 but the newline unless `keep_newlines` is
    False, DEL, C1) and every bidi override or isolate written as a visible escape."""
    pattern = _UNSAFE if keep_newlines else _UNSAFE_LINE
    if pattern.search(text) is None:  # the common case: nothing to copy
        return text
    return pattern.sub(_escape, text)


def shown_text(text: str, *, limit: int = SHOWN_TEXT_MAX_CHARS) -> str:
    """`text` from outside as one inert line (`inert` with `keep_newlines=False`), cut after
    `limit` characters of the result with `CUT_MARK` at the cut; an escape is never cut in
    half."""
    out: list[str] = []
    length = 0
    for char in text:
        shown = inert(char, keep_newlines=False)
        if length + len(shown) > limit:
            out.append(CUT_MARK)
            break
        out.append(shown)
        length += len(shown)
    return "".join(out)
