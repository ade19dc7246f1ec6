"""The drainers rule (`core.drain.rules.drainers`): when a drainer is gone, how it is shown,
and which drainer an operator's name means."""

from __future__ import annotations

import pytest

from core.base.rules.errors import ConfigError
from core.drain.rules.drainers import SINGLE, gone_after_ms, is_gone, named_drainer, shown_name

A = "0123456789abcdef0123456789abcdef"
B = "01234567ffffffff0123456789abcdef"
C = "fedcba9876543210fedcba9876543210"


def test_a_drainer_is_gone_only_strictly_after_its_intervals_without_a_tick() -> None:
    assert gone_after_ms(1_000, 3) == 3_000
    assert not is_gone(10_000, 13_000, interval_ms=1_000, intervals=3)
    assert is_gone(10_000, 13_001, interval_ms=1_000, intervals=3)
    assert not is_gone(10_000, 10_000, interval_ms=1_000, intervals=1)


def test_a_drainer_is_shown_by_its_ids_first_characters_or_as_single() -> None:
    assert shown_name(A) == A[:12]
    assert shown_name("") == SINGLE


def test_a_drainer_is_named_by_its_id_a_prefix_only_it_has_or_single() -> None:
    known = [A, B, C, ""]
    assert named_drainer(A, known) == A
    assert named_drainer(A.upper(), known) == A
    assert named_drainer("fedc", known) == C
    assert named_drainer(A[:12], known) == A
    assert named_drainer(SINGLE, known) == ""
    assert named_drainer("", known) == ""


def test_a_prefix_two_drainers_share_is_refused_naming_both() -> None:
    with pytest.raises(ConfigError, match="start of 2 drainers") as refused:
        named_drainer("01234567", [A, B, C])
    assert A in str(refused.value) and B in str(refused.value)


@pytest.mark.parametrize("name", ["beef", SINGLE, "x"])
def test_a_name_no_drainer_has_is_refused_naming_the_drainers_there_are(name: str) -> None:
    with pytest.raises(ConfigError, match="no drainer") as refused:
        named_drainer(name, [A, C])
    assert A[:12] in str(refused.value) and C[:12] in str(refused.value)


def test_no_drainer_at_all_is_said() -> None:
    with pytest.raises(ConfigError, match="none has ticked"):
        named_drainer(A, [])
