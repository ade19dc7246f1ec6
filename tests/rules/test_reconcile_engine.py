"""The pure stale-chunk engine: which chunks are stale, which are actionable, the fail-safe
answers for everything it cannot classify, and the pure half of tombstoning (which chunks a
band may hold, how bands are cut, what their predicate says)."""

from __future__ import annotations

import math
from typing import Any

import pytest

from core.base.rules.camel_json import to_json
from core.base.rules.rows import ChromaRow, ColumnPage
from core.reconcile.rules.reconcile import actionable_stamp_ceiling, stale_fraction_exceeded
from core.reconcile.rules.tombstone_bands import (
    FLOAT_BOUND_SLACK_ULPS,
    Band,
    OldestIngested,
    band_where,
    deletion_bound,
    plan_bands,
    rule_violations,
    store_bound,
)
from tests.oracles import (
    DEFAULT_ORPHAN_VERSION_GAP,
    EMPTY_DIFF,
    diff_tenant_chunks,
    is_actionable_stamp,
    resolve_orphan_version_gap,
)


def rows(*stamps: Any, ids: str = "abcdefghij") -> list[dict[str, Any]]:
    """`{id, metadata}` rows with the given stamps; `...` leaves the stamp out."""
    return [
        {"id": ids[i], "metadata": {} if s is ... else {"tenantConfigVersion": s}}
        for i, s in enumerate(stamps)
    ]


def test_versions_5_4_3_1_at_current_5_with_gap_2_flag_b_c_d_and_act_on_c_d() -> None:
    diff = diff_tenant_chunks(rows(5, 4, 3, 1), 5, 2)
    assert to_json(diff) == {
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
        (None, ()),  # missing: fails closed, nothing actionable by version
        (0, ()),  # below 1: fails closed (a looser default could delete what was kept)
        (-3, ()),
        (1, ("b", "c", "d")),  # no grace: every stale chunk
        (2, ("c", "d")),
        (2.5, ("d",)),  # a fractional threshold is used as is
        ("3", ()),  # a string is not a number: fails closed
        (True, ()),  # nor is a bool
        (float("inf"), ()),  # what the config reader gives an invalid value
        (float("nan"), ()),
    ],
)
def test_the_gap_is_used_when_it_is_a_finite_number_of_at_least_one_else_nothing_is_actionable(
    gap: Any, actionable: tuple[str, ...]
) -> None:
    diff = diff_tenant_chunks(rows(5, 4, 3, 1), 5, gap)
    assert diff.stale_count == 3
    assert diff.actionable_ids == actionable


def test_the_default_gap_comes_from_the_configuration_table() -> None:
    from core.base.config.config import KEYS_BY_NAME

    assert KEYS_BY_NAME["reconciliationOrphanVersionGap"].default == DEFAULT_ORPHAN_VERSION_GAP
    assert resolve_orphan_version_gap(DEFAULT_ORPHAN_VERSION_GAP) == 2
    assert resolve_orphan_version_gap(None) is None


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


@pytest.mark.parametrize("stamp", [7.233242648200938e-216, 5e-324, 1e-300])
def test_a_stamp_the_stores_ceiling_excludes_is_not_actionable_whatever_the_rounding(
    stamp: float,
) -> None:
    # 2 - 7e-216 rounds to 2, so "gap >= 2" held, yet the delete's `where` (stamp <= 0) never
    # selects this chunk: the rule must agree with the predicate the store evaluates.
    assert stamp > actionable_stamp_ceiling(2, 2)
    assert is_actionable_stamp(stamp, 2, 2) is False
    assert diff_tenant_chunks(rows(stamp), 2, 2).actionable_count == 0
    assert diff_tenant_chunks(rows(stamp), 2, 2).stale_count == 1


@pytest.mark.parametrize(
    ("stamp", "actionable"),
    [(1, True), (3, True), (3.5, False), (4, False), (5, False), (True, False), ("1", False),
     (None, False), (float("nan"), False), (-1, True)],
)
def test_one_stamp_is_actionable_exactly_when_the_engine_would_act_on_its_row(
    stamp: Any, actionable: bool
) -> None:
    assert is_actionable_stamp(stamp, 5, 2) is actionable
    assert is_actionable_stamp(stamp, 5, 2) is (diff_tenant_chunks(rows(stamp), 5, 2)
                                                .actionable_count == 1)


@pytest.mark.parametrize(
    ("metadata", "bound"),
    [({"ingestedAt": 5}, 5), ({"ingestedAt": 5.5}, 5.5), ({"ingestedAt": 1_000}, 1_000),
     ({"ingestedAt": 1_001}, None),  # written after the pass started reading
     ({}, None), ({"ingestedAt": "5"}, None), ({"ingestedAt": True}, None),
     ({"ingestedAt": float("nan")}, None), ({"ingestedAt": float("-inf")}, None),
     (None, None)],
)
def test_a_chunk_a_band_can_hold_has_a_numeric_ingested_at_not_after_the_read(
    metadata: Any, bound: Any
) -> None:
    assert deletion_bound(metadata, read_ms=1_000) == bound


def test_the_oldest_keeps_only_the_capacity_smallest_values() -> None:
    oldest = OldestIngested(3)
    for value in (9, 1, 7, 3, 3, 8, 2):
        oldest.offer(value)
    assert oldest.sorted() == [1, 2, 3]
    none = OldestIngested(0)
    none.offer(1)
    assert none.sorted() == []


def test_bands_cover_every_value_once_and_never_split_equal_values() -> None:
    values = [1, 2, 2, 2, 3, 4, 5, 5, 6]
    bands = plan_bands(values, band_rows=3)
    # A band ends before a run of equal values that would overflow it.
    assert bands == [Band(None, 1, 1), Band(1, 2, 3), Band(2, 4, 2), Band(4, 6, 3)]
    for band in bands:
        inside = [v for v in values if (band.after is None or v > band.after) and v <= band.through]
        assert len(inside) == band.planned
    assert sum(b.planned for b in bands) == len(values)


def test_a_run_of_equal_values_longer_than_a_band_is_a_band_of_its_own() -> None:
    assert plan_bands([1, 7, 7, 7, 7, 7, 9], band_rows=2) == [
        Band(None, 1, 1), Band(1, 7, 5), Band(7, 9, 1)]
    assert plan_bands([], band_rows=2) == []
    assert plan_bands([4, 4, 4], band_rows=10) == [Band(None, 4, 3)]


def test_a_band_predicate_is_tenant_actionable_stamp_and_ingested_range() -> None:
    assert band_where("acme", 3, Band(None, 10, 1)) == {"$and": [
        {"tenantId": "acme"}, {"tenantConfigVersion": {"$lte": 3}},
        {"ingestedAt": {"$lte": 10}}]}
    assert band_where("acme", 2.5, Band(10, 20.5, 1)) == {"$and": [
        {"tenantId": "acme"}, {"tenantConfigVersion": {"$lte": 2.5}},
        {"ingestedAt": {"$gt": 10}}, {"ingestedAt": {"$lte": store_bound(20.5)}}]}


def test_float_bounds_get_the_slack_of_the_stores_rounding_and_integers_none() -> None:
    # Chroma keeps and parses floats up to 1 ulp off; integers exactly.
    assert store_bound(1_714_000_000_000) == 1_714_000_000_000
    up = 20.5
    for _ in range(FLOAT_BOUND_SLACK_ULPS):
        up = math.nextafter(up, math.inf)
    assert store_bound(20.5) == up > 20.5
    # Consecutive bands still take every value exactly once: both ends move alike (here a
    # band ends at 0.2 and the value one ulp above it is taken in by the slack).
    values = [1e-300, 0.1, 0.2, math.nextafter(0.2, 1.0), 0.30000000000000004, 5.0]
    bands = plan_bands(values, band_rows=3)
    assert [b.through for b in bands] == [0.2, 5.0]
    for value in values:
        holders = [b for b in bands
                   if (b.after is None or value > store_bound(b.after))
                   and value <= store_bound(b.through)]
        assert len(holders) == 1, (value, holders)


def test_rows_the_rule_would_keep_are_named_whatever_the_store_returned() -> None:
    page = ColumnPage(
        ["ok", "other-tenant", "restamped", "undated", "future"],
        [{"tenantId": "t", "tenantConfigVersion": 1, "ingestedAt": 5},
         {"tenantId": "u", "tenantConfigVersion": 1, "ingestedAt": 5},
         {"tenantId": "t", "tenantConfigVersion": 5, "ingestedAt": 5},
         {"tenantId": "t", "tenantConfigVersion": 1},
         {"tenantId": "t", "tenantConfigVersion": 1, "ingestedAt": 2_000}],
        [None] * 5, None)
    assert rule_violations(page, tenant_id="t", read_ms=1_000,
                           is_actionable=lambda stamp: is_actionable_stamp(stamp, 5, 2)) == [
        "other-tenant", "restamped", "undated", "future"]
