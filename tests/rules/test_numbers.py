"""What counts as a number (`core.base.rules.numbers`): a bool is never a number, and neither is a
float that is not finite, whatever hands the value over (JSON, TOML, Chroma metadata)."""

from __future__ import annotations

import math
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from core.base.rules.numbers import is_real_number, is_whole_number


@pytest.mark.parametrize("value", [0, -3, 2**80, 0.0, -0.5, 1e308])
def test_finite_ints_and_floats_are_real_numbers(value: Any) -> None:
    assert is_real_number(value)


@pytest.mark.parametrize("value", [True, False, math.nan, math.inf, -math.inf, "1", None,
                                   [1], {"n": 1}, Decimal("1")])
def test_bools_non_finite_floats_and_everything_else_are_not(value: Any) -> None:
    assert not is_real_number(value)


@pytest.mark.parametrize(("value", "whole"), [
    (0, True), (-7, True), (2**80, True), (True, False), (False, False), (1.0, False),
    ("1", False), (None, False),
])
def test_a_whole_number_is_an_int_that_is_not_a_bool(value: Any, whole: bool) -> None:
    assert is_whole_number(value) is whole


@given(st.floats(allow_nan=True, allow_infinity=True))
def test_a_float_is_a_real_number_exactly_when_it_is_finite(value: float) -> None:
    assert is_real_number(value) is math.isfinite(value)
