"""The pure stale-chunk engine: which chunks are stale, which are actionable, and the
fail-safe answers for everything it cannot classify."""

from __future__ import annotations

from typing import Any

import pytest

from core.reconcile import (
    DEFAULT_ORPHAN_VERSION_GAP,
    EMPTY_DIFF,
    actionable_stamp_ceiling,
    confirm_tombstone_rows,
    diff_tenant_chunks,
    resolve_orphan_version_gap,
    stale_fraction_exceeded,
)
from core.vectors import ChromaRow


def rows(*stamps: Any, ids: str = "abcdefghij") -> list[dict[str, Any]]:
    """`{id, metadata}` rows with the given stamps; `...` leaves the stamp out."""
    return [
        {"id": ids[i], "metadata": {} if s is ... else {"tenantConfigVersion": s}}
        for i, s in enumerate(stamps)
    ]


def test_versions_5_4_3_1_at_current_5_with_gap_2_flag_b_c_d_and_act_on_c_d() -> None:
    diff = diff_tenant_chunks(rows(5, 4, 3, 1), 5, 2)
    assert diff.as_dict() == {
        "staleOrphans": [
            {"id": "b", "tenantConfigVersion": 4, "versionGap": 1},
            {"id": "c", "tenantConfigVersion": 3, "versionGap": 2},
            {"id": "d", "tenantConfigVersion": 1, "versionGap": 4},
        ],
        "staleCount": 3,
        "actionableIds": ["c", "d"],
        "actionableCount": 2,
    }


def test_an_all_current_tenant_has_nothing_stale() -> None:
    assert diff_tenant_chunks(rows(5, 5, 5), 5, 2) == EMPTY_DIFF


def test_a_chunk_stamped_above_the_current_version_is_not_stale() -> None:
    assert diff_tenant_chunks(rows(6, 9), 5, 2) == EMPTY_DIFF


@pytest.mark.parametrize("current", [0, -1, None, "5", True, float("nan"), float("inf"), 0.0])
def test_a_current_version_that_is_not_a_positive_number_gives_the_empty_result(
    current: Any,
) -> None:
    assert diff_tenant_chunks(rows(1, 2, 3), current, 2) == EMPTY_DIFF


@pytest.mark.parametrize(
    "stamp", [..., None, "1", "", True, False, float("nan"), float("-inf"), [1], {"v": 1}]
)
def test_a_missing_null_string_bool_or_non_finite_stamp_is_never_flagged(stamp: Any) -> None:
    assert diff_tenant_chunks(rows(stamp), 5, 1) == EMPTY_DIFF


def test_float_stamps_are_numbers_like_any_other() -> None:
    diff = diff_tenant_chunks(rows(4.5, 2.5), 5, 2)
    assert [(o.id, o.version_gap) for o in diff.stale_orphans] == [("a", 0.5), ("b", 2.5)]
    assert diff.actionable_ids == ("b",)


@pytest.mark.parametrize(
    ("gap", "actionable"),
    [
        (None, ("c", "d")),  # omitted: the default, 2
        (0, ("c", "d")),  # below 1: the default
        (-3, ("c", "d")),
        (1, ("b", "c", "d")),  # no grace: every stale chunk
        (2.5, ("d",)),  # a fractional threshold is used as is
        ("3", ("c", "d")),  # a string is not a number: the default
        (True, ("c", "d")),  # nor is a bool
        (float("inf"), ("c", "d")),
        (float("nan"), ("c", "d")),
    ],
)
def test_the_gap_is_used_when_it_is_a_finite_number_of_at_least_one_else_two(
    gap: Any, actionable: tuple[str, ...]
) -> None:
    diff = diff_tenant_chunks(rows(5, 4, 3, 1), 5, gap)
    assert diff.stale_count == 3
    assert diff.actionable_ids == actionable


def test_the_default_gap_comes_from_the_configuration_table() -> None:
    from core.config import KEYS_BY_NAME

    assert KEYS_BY_NAME["reconciliationOrphanVersionGap"].default == DEFAULT_ORPHAN_VERSION_GAP
    assert resolve_orphan_version_gap(None) == DEFAULT_ORPHAN_VERSION_GAP


@pytest.mark.parametrize("not_rows", [None, "abc", 42, {"id": "a"}, {"a", "b"}])
def test_rows_that_are_not_a_list_give_the_empty_result(not_rows: Any) -> None:
    assert diff_tenant_chunks(not_rows, 5, 2) == EMPTY_DIFF


def test_malformed_rows_in_the_list_are_skipped() -> None:
    mixed: list[Any] = [
        None,
        "a",
        {"metadata": {"tenantConfigVersion": 1}},  # no id
        {"id": 7, "metadata": {"tenantConfigVersion": 1}},  # id not a string
        {"id": "x", "metadata": "v=1"},  # metadata not a mapping
        {"id": "ok", "metadata": {"tenantConfigVersion": 1}},
    ]
    assert diff_tenant_chunks(mixed, 5, 2).actionable_ids == ("ok",)


def test_a_duplicated_id_counts_once() -> None:
    duplicated = rows(1, 1, 3, ids="aab")
    diff = diff_tenant_chunks(duplicated, 5, 2)
    assert diff.stale_count == 2
    assert diff.actionable_ids == ("a", "b")


def test_the_input_order_is_kept() -> None:
    diff = diff_tenant_chunks(rows(1, 3, 2, 4, ids="zyxw"), 5, 1)
    assert diff.actionable_ids == ("z", "y", "x", "w")
    assert [o.id for o in diff.stale_orphans] == ["z", "y", "x", "w"]


def test_chroma_rows_are_accepted_as_well_as_mappings() -> None:
    chroma = [ChromaRow("a", {"tenantConfigVersion": 1}), ChromaRow("b", {})]
    assert diff_tenant_chunks(chroma, 5, 2).actionable_ids == ("a",)


@pytest.mark.parametrize(
    ("actionable", "total", "fraction", "exceeded"),
    [
        (0, 0, 0.5, False),
        (5, 10, 0.5, False),  # exactly at the limit is allowed
        (6, 10, 0.5, True),
        (10, 10, 1.0, False),
        (1, 0, 1.0, True),  # chunks vanished between reads: when in doubt, delete nothing
    ],
)
def test_the_stale_fraction_guard_trips_only_above_the_limit(
    actionable: int, total: int, fraction: float, exceeded: bool
) -> None:
    assert stale_fraction_exceeded(
        actionable=actionable, total=total, max_fraction=fraction
    ) is exceeded


def test_the_actionable_ceiling_is_a_whole_number_when_it_can_be() -> None:
    assert actionable_stamp_ceiling(5, 2) == 3
    assert isinstance(actionable_stamp_ceiling(5, 2.0), int)
    assert actionable_stamp_ceiling(5, 2.5) == 2.5
    # Below zero it is floored: Chroma truncates a fractional operand for integer stamps.
    assert actionable_stamp_ceiling(1, 1.5) == -1


def test_confirmation_keeps_only_this_tenants_still_actionable_rows() -> None:
    fresh = [
        ChromaRow("a", {"tenantId": "t", "tenantConfigVersion": 1}),
        ChromaRow("b", {"tenantId": "other", "tenantConfigVersion": 1}),  # id re-used
        ChromaRow("c", {"tenantId": "t", "tenantConfigVersion": 5}),  # re-ingested meanwhile
        ChromaRow("d", {"tenantConfigVersion": 1}),  # no tenant at all
        ChromaRow("a", {"tenantId": "t", "tenantConfigVersion": 1}),  # duplicate
    ]
    confirmed = confirm_tombstone_rows(
        fresh, tenant_id="t", current_version=5, orphan_version_gap=2
    )
    assert [r.id for r in confirmed] == ["a"]
