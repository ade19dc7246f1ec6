"""`core.base.rules.state.write_rounds`: a batch of keyed writes split into rounds of distinct
keys gives, round after round, exactly what the rows give one by one."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from core.base.rules.state.write_rounds import distinct_key_rounds


def first(row: tuple[str, int]) -> str:
    return row[0]


def test_the_nth_write_of_a_key_goes_to_round_n_and_each_round_keeps_the_order() -> None:
    rows = [("b", 1), ("a", 2), ("b", 3), ("c", 4), ("b", 5), ("a", 6)]
    assert distinct_key_rounds(rows, first) == [
        [("b", 1), ("a", 2), ("c", 4)],
        [("b", 3), ("a", 6)],
        [("b", 5)],
    ]


def test_distinct_keys_make_one_round_in_their_order_and_no_rows_make_none() -> None:
    rows = [("z", 1), ("a", 2), ("m", 3)]
    assert distinct_key_rounds(rows, first) == [rows]
    assert distinct_key_rounds([], first) == []


@given(st.lists(st.tuples(st.sampled_from("abcde"), st.integers(-5, 5)), max_size=40))
def test_applying_the_rounds_in_turn_is_applying_the_rows_one_by_one(
    rows: list[tuple[str, int]],
) -> None:
    # A write that depends on what it finds (as a reinforced weight does): order matters.
    def apply(state: dict[str, int], batch: list[tuple[str, int]]) -> None:
        for key, value in batch:
            state[key] = state.get(key, 1) * 3 + value

    one_by_one: dict[str, int] = {}
    apply(one_by_one, rows)
    by_rounds: dict[str, int] = {}
    rounds = distinct_key_rounds(rows, first)
    for batch in rounds:
        assert len({key for key, _ in batch}) == len(batch)
        apply(by_rounds, batch)
    assert by_rounds == one_by_one
    assert sorted(row for batch in rounds for row in batch) == sorted(rows)
