"""`core.rules.text.shown_text`: text from outside shown bounded and inert."""

from __future__ import annotations

from core.rules.text import CUT_MARK, SHOWN_TEXT_MAX_CHARS, shown_text


def test_control_and_direction_characters_are_written_as_visible_escapes() -> None:
    assert shown_text("a\x1b[2Jb\nc\td\x7f\x85e\u202ef") == \
        "a\\x1b[2Jb\\x0ac\\x09d\\x7f\\x85e\\u202ef"


def test_ordinary_text_is_unchanged() -> None:
    text = "Collection expecting embedding with dimension of 4, got 3 — ünïcode ✓"
    assert shown_text(text) == text


def test_a_long_text_is_cut_with_a_mark_and_never_inside_an_escape() -> None:
    assert shown_text("x" * 1000) == "x" * SHOWN_TEXT_MAX_CHARS + CUT_MARK
    assert shown_text("abc\x1bdef", limit=5) == "abc" + CUT_MARK
    assert shown_text("abcdef", limit=6) == "abcdef"
