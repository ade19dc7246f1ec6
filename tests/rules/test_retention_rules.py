"""The retention rule (`core.reconcile.rules.retention`) on the original's GC engine anchors
(#11641,
`kbGarbageCollectionEngine.spec.mjs`): age is strict, count is per tenant and repo with the
newest kept and ties to the smaller id, the two rules are a union, unstamped chunks never
expire; and the per-tenant override, which the original promised and never built."""

from __future__ import annotations

from typing import Any

import pytest

from core.reconcile.rules.retention import (
    Retention,
    defrag_recommended,
    gc_detail,
    resolve_retention,
    select_expired,
    tenant_retention,
)


def row(row_id: str, at: Any = ..., *, repo: str = "a",
        tenant: str = "t") -> tuple[str, dict[str, Any]]:
    metadata: dict[str, Any] = {"tenantId": tenant, "repoSlug": repo}
    if at is not ...:
        metadata["ingestedAt"] = at
    return row_id, metadata


def test_age_expiry_is_strictly_older_than_max_age() -> None:
    rows = [row("old", 90_000), row("edge", 95_000), row("new", 98_000)]
    expired = select_expired(rows, Retention(max_age_ms=5_000), now=100_000)
    assert (expired.expired_ids, expired.evaluated_count) == (["old"], 3)


def test_count_expiry_keeps_the_newest_max_count() -> None:
    rows = [row("r1", 5), row("r2", 4), row("r3", 3), row("r4", 2)]
    assert sorted(select_expired(rows, Retention(max_count=2), now=10).expired_ids) == [
        "r3", "r4"]


def test_count_expiry_is_per_tenant_and_repo() -> None:
    rows = [row("a1", 2, repo="a"), row("a2", 1, repo="a"), row("b1", 2, repo="b"),
            row("x1", 1, repo="a", tenant="other")]
    assert select_expired(rows, Retention(max_count=1), now=10).expired_ids == ["a2"]


def test_ties_keep_the_smaller_id() -> None:
    rows = [row("c", 100), row("a", 100), row("b", 100)]
    assert sorted(select_expired(rows, Retention(max_count=1), now=200).expired_ids) == [
        "b", "c"]


def test_age_and_count_expire_their_union() -> None:
    rows = [row("time-out", 1, repo="x"), row("count-out", 90_000, repo="y"),
            row("keep", 95_000, repo="y")]
    expired = select_expired(rows, Retention(max_age_ms=50_000, max_count=1), now=100_000)
    assert sorted(expired.expired_ids) == ["count-out", "time-out"]


@pytest.mark.parametrize("at", [..., "2024-01-01T00:00:00Z", True, None])
def test_unstamped_chunks_never_expire(at: Any) -> None:
    rows = [row("legacy", at), row("newer", 10), row("newest", 11)]
    expired = select_expired(rows, Retention(max_age_ms=1, max_count=0), now=1_000_000)
    assert (sorted(expired.expired_ids), expired.evaluated_count) == (["newer", "newest"], 3)


def test_no_rows_or_no_rule_expire_nothing() -> None:
    assert (select_expired([], Retention(max_count=0), now=1).evaluated_count) == 0
    assert select_expired([row("a", 1)], Retention(), now=10**9).expired_ids == []
    assert select_expired([row("a", 1)], Retention(), now=10**9).evaluated_count == 1


@pytest.mark.parametrize(("value", "expected"), [
    ({"maxAgeMs": 5_000, "maxCount": 0}, Retention(5_000, 0)),
    ({"maxAgeMs": 0, "maxCount": -1}, Retention()),
    ({"maxAgeMs": float("inf"), "maxCount": 2.0}, Retention()),
    ({"maxAgeMs": True, "maxCount": True}, Retention()),
    ([], Retention()), ({}, Retention()),
])
def test_resolve_retention_keeps_each_valid_rule(value: Any, expected: Retention) -> None:
    assert resolve_retention(value) == expected


def test_a_tenant_override_replaces_each_rule_it_names_and_an_invalid_one_fails_closed() -> None:
    default = Retention(max_age_ms=1_000, max_count=5)
    assert tenant_retention(default, None) == default
    assert tenant_retention(default, {"gcMaxCount": 1}) == Retention(1_000, 1)
    assert tenant_retention(default, {"gcMaxAgeMs": 10, "gcMaxCount": 0}) == Retention(10, 0)
    assert tenant_retention(default, {"gcMaxAgeMs": -1}) == Retention(None, 5)


def test_defrag_is_recommended_past_the_threshold_only() -> None:
    assert defrag_recommended(threshold=0.10, collection_count=100, total_deleted=20)
    assert not defrag_recommended(threshold=0.10, collection_count=100, total_deleted=5)
    assert not defrag_recommended(threshold=0, collection_count=100, total_deleted=100)
    assert not defrag_recommended(threshold=0.10, collection_count=0, total_deleted=0)


def test_the_detail_has_the_original_shape() -> None:
    assert gc_detail(expired_count=3, evaluated_count=10, deleted_count=2,
                     retention=Retention(max_count=1), auto_delete=True, defrag=False) == {
        "expiredCount": 3, "evaluatedCount": 10, "deletedCount": 2,
        "retention": {"maxAgeMs": None, "maxCount": 1}, "gcAutoDelete": True,
        "defragRecommended": False}
