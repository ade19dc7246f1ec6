"""Tables on a narrow terminal (80 columns): a cell wraps only between words, and a table whose
longest words cannot stand side by side becomes records, so no word, path or timestamp is
ever cut in two; a table that fits stays a table."""

from __future__ import annotations

import re

from core.base.reports.tables import as_text, table

STAMP = "2026-12-02T04:39:05Z (57s ago)"
WIDE = table("Drainers", ["drainer", "host", "last tick", "result", "what it did",
                          "queue lines", ".draining", "dead letters"],
             [["(single) (this host)", "vm", STAMP, "ok",
               "3 sessions and 9 memories ingested; 13 lines: 8 linked, 2 re-queued", 2,
               False, 3]])
NARROW = table("Last ticks", ["job", "started", "what it did"],
               [["drain", STAMP, "3 sessions and 9 memories ingested; 13 lines: 8 linked, "
                 "2 re-queued, 3 dead-lettered"]])


def words(text: str) -> set[str]:
    return set(re.findall(r"\S+", text))


def test_a_table_too_wide_for_80_columns_becomes_records_with_every_word_whole() -> None:
    text = as_text(WIDE, width=80)
    assert max(len(line) for line in text.splitlines()) <= 80
    assert "  (single) (this host)" in text.splitlines()
    assert f"    last tick: {STAMP}" in text.splitlines()
    cells = words("(single) (this host) vm " + STAMP + " ok 3 sessions and 9 memories "
                  "ingested; 13 lines: 8 linked, 2 re-queued")
    assert cells <= words(text), "every word whole"


def test_a_table_whose_words_fit_stays_a_table_wrapped_between_words() -> None:
    text = as_text(NARROW, width=80)
    lines = text.splitlines()
    assert lines[1].split() == ["job", "started", "what", "it", "did"], "still a table"
    assert max(len(line.rstrip()) for line in lines) <= 80
    cells = words("drain " + STAMP + " 3 sessions and 9 memories ingested; 13 lines: 8 linked, "
                  "2 re-queued, 3 dead-lettered")
    assert cells <= words(text), "every word whole"


def test_off_a_terminal_the_wide_table_is_drawn_as_one() -> None:
    text = as_text(WIDE, width=200)
    assert text.splitlines()[1].split()[:2] == ["drainer", "host"]
