"""`core.base.rules.state.verified_copy`: what "copied exactly" means for kb-migrate (pure)."""

from __future__ import annotations

import pytest

from core.base.rules.state.verified_copy import (
    SchemaMismatch,
    TableTally,
    check_table,
    first_mismatch,
    is_strict_json,
    mismatch_reason,
    plan_table,
    row_digest,
)


def tally(*rows: tuple[object, ...]) -> TableTally:
    made = TableTally()
    for row in rows:
        made.add(row)
    return made


def test_equal_tables_read_in_any_order_have_the_same_checksum() -> None:
    rows = [("a", 1, 1.5, '{"x": 1}'), ("b", 2, None, "{}"), ("c", 3, 0.1, "[]")]
    assert tally(*rows).checksum == tally(*reversed(rows)).checksum
    assert check_table("nodes", tally(*rows), tally(*reversed(rows))).matches


def test_a_changed_lost_or_duplicated_row_is_a_mismatch_naming_the_table() -> None:
    rows = [("a", 1.0), ("b", 2.0)]
    changed = check_table("edges", tally(*rows), tally(("a", 1.0), ("b", 2.5)))
    lost = check_table("edges", tally(*rows), tally(("a", 1.0)))
    doubled = check_table("edges", tally(("a", 1.0)), tally(("a", 1.0), ("a", 1.0)))
    assert not changed.matches and not lost.matches and not doubled.matches
    assert mismatch_reason(changed) == "table edges: checksums differ (2 rows each)"
    assert mismatch_reason(lost) == "table edges: 2 rows in the source, 1 in the target"
    assert first_mismatch([check_table("nodes", tally(*rows), tally(*rows)), changed]) is changed
    assert first_mismatch([check_table("nodes", tally(*rows), tally(*rows))]) is None


def test_values_are_compared_with_their_type() -> None:
    assert row_digest((1,)) != row_digest(("1",))
    assert row_digest((1,)) != row_digest((1.0,))
    assert row_digest((None,)) != row_digest(("",))
    assert row_digest((True,)) == row_digest((1,))  # SQLite has no boolean
    assert row_digest((b"\x00",)) != row_digest(("\x00",))


def test_strict_json_refuses_what_jsonb_refuses() -> None:
    assert is_strict_json('{"a": [1, 2.5, null, true]}')
    assert is_strict_json(None)
    for text in ('{"w": Infinity}', '{"w": NaN}', "-Infinity", "{", "", "{'a': 1}"):
        assert not is_strict_json(text), text
    assert not is_strict_json(3)


def test_a_target_only_column_must_be_filled_by_the_copy_or_by_the_database() -> None:
    plan = plan_table("drain_generations", source_columns=["generation", "committed_offset"],
                      target_columns=["generation", "committed_offset", "drainer"],
                      defaulted=["drainer"], filled={"drainer": "ab" * 16})
    assert plan.columns == ("generation", "committed_offset")
    assert plan.filled == {"drainer": "ab" * 16}
    seq = plan_table("kb_ingestion_metrics", source_columns=["id"],
                     target_columns=["id", "seq"], defaulted=["seq"], filled={})
    assert seq.columns == ("id",) and seq.filled == {}
    with pytest.raises(SchemaMismatch, match="nothing to put in target column extra"):
        plan_table("nodes", source_columns=["id"], target_columns=["id", "extra"],
                   defaulted=[], filled={})


def test_a_source_column_the_target_lacks_refuses_the_copy() -> None:
    with pytest.raises(SchemaMismatch, match="table nodes: the target has no column newer"):
        plan_table("nodes", source_columns=["id", "newer"], target_columns=["id"],
                   defaulted=[], filled={})
