"""Retention (pure): which knowledge-base chunks have expired, exactly as the original's GC
engine decides (#11641, `kbGarbageCollectionEngine`), and the figures a retention pass reports.

- `resolve_retention`: `maxAgeMs` a finite number > 0, `maxCount` an integer >= 0 (0 keeps
  none); anything else turns that rule off.
- `select_expired`: a chunk expires by age when `now - ingestedAt > maxAgeMs`, by count when
  it is beyond the newest `maxCount` of its (tenant, repo) (ties: the smaller id is kept); the
  result is the union. A chunk without a numeric `ingestedAt` never expires.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from core.base.rules.camel_json import omitted_when_none
from core.base.rules.numbers import is_real_number
from core.base.rules.numbers import valid_max_age as valid_max_age
from core.base.rules.numbers import valid_max_count as valid_max_count
from core.reconcile.rules.tombstone_bands import Band, store_bound

TENANT_KEY: Final = "tenantId"
REPO_KEY: Final = "repoSlug"
INGESTED_KEY: Final = "ingestedAt"
#: The per-tenant overrides in `reconciliationPolicy` (CONTRACT "Graph store").
POLICY_MAX_AGE: Final = "gcMaxAgeMs"
POLICY_MAX_COUNT: Final = "gcMaxCount"

_OPTIONAL = omitted_when_none()


@dataclass(frozen=True, slots=True)
class Retention:
    """What expires: by age (ms, strictly older), by count per tenant and repo; None: off."""

    max_age_ms: float | None = None
    max_count: int | None = None

    @property
    def active(self) -> bool:
        """Whether any rule is set."""
        return self.max_age_ms is not None or self.max_count is not None

    def stored(self) -> dict[str, Any]:
        """As the original's `resolveRetention` returns it (a `tombstone` row's `retention`)."""
        return {"maxAgeMs": self.max_age_ms, "maxCount": self.max_count}


def resolve_retention(value: Any) -> Retention:
    """The original's `resolveRetention`: each rule kept when valid, else off."""
    if not isinstance(value, Mapping):
        return Retention()
    age, count = value.get("maxAgeMs"), value.get("maxCount")
    return Retention(age if valid_max_age(age) else None,
                     count if valid_max_count(count) else None)


def tenant_retention(pass_retention: Retention, stored_policy: Any) -> Retention:
    """The retention in force for a tenant: its stored overrides over the pass's. An invalid
    stored value expires nothing by that rule (a destructive setting fails closed)."""
    if not isinstance(stored_policy, Mapping):
        return pass_retention
    age, count = pass_retention.max_age_ms, pass_retention.max_count
    if POLICY_MAX_AGE in stored_policy:
        value = stored_policy[POLICY_MAX_AGE]
        age = value if valid_max_age(value) else None
    if POLICY_MAX_COUNT in stored_policy:
        value = stored_policy[POLICY_MAX_COUNT]
        count = value if valid_max_count(value) else None
    return Retention(age, count)


@dataclass(frozen=True, slots=True)
class RepoRetention:
    """One tenant's repo in a retention pass: what expired and what went."""

    tenant_id: str
    repo_slug: str | None
    expired_count: int
    deleted_count: int


@dataclass(frozen=True, slots=True)
class TenantRetention:
    """One tenant's retention figures (`gc --json`'s `tenants`)."""

    tenant_id: str
    retention: dict[str, Any]
    evaluated_count: int
    expired_count: int
    deleted_count: int
    repos: tuple[RepoRetention, ...] = ()
    archive: str | None = field(default=None, metadata=_OPTIONAL)
    error: str | None = field(default=None, metadata=_OPTIONAL)
    #: The expired chunks' ids, oldest first (`explain` only).
    expired_ids: tuple[str, ...] | None = field(default=None, metadata=_OPTIONAL)


@dataclass(frozen=True, slots=True)
class ExpiredChunk:
    """One expired chunk: what the deletion needs to find it again, and why it expired."""

    id: str
    repo_slug: Any
    ingested_at: int | float
    by_age: bool
    by_count: bool


@dataclass(frozen=True, slots=True)
class Expired:
    """`select_expired`'s answer, the chunks oldest first, then by id."""

    chunks: tuple[ExpiredChunk, ...]
    evaluated_count: int

    @property
    def expired_ids(self) -> list[str]:
        return [c.id for c in self.chunks]

    @property
    def expired_count(self) -> int:
        return len(self.chunks)


def select_expired(rows: Sequence[tuple[str, Mapping[str, Any]]], retention: Retention, *,
                   now: int | float | None) -> Expired:
    """The original's `selectExpiredChunks` over (id, metadata) rows; `now` None turns the age
    rule off."""
    if not rows:
        return Expired((), 0)
    if not retention.active:
        return Expired((), len(rows))
    stamped: list[tuple[str, Mapping[str, Any], int | float]] = [
        (row_id, m, m[INGESTED_KEY]) for row_id, m in rows
        if is_real_number(m.get(INGESTED_KEY))]
    by_age: set[str] = set()
    max_age = retention.max_age_ms
    if max_age is not None and now is not None and is_real_number(now):
        by_age = {row_id for row_id, _m, at in stamped if now - at > max_age}
    by_count: set[str] = set()
    if retention.max_count is not None:
        buckets: dict[tuple[Any, Any], list[tuple[Any, str]]] = defaultdict(list)
        for row_id, m, at in stamped:
            buckets[(_key_part(m.get(TENANT_KEY)), _key_part(m.get(REPO_KEY)))].append(
                (at, row_id))
        for bucket in buckets.values():
            bucket.sort(key=lambda item: (-item[0], item[1]))
            by_count.update(row_id for _at, row_id in bucket[retention.max_count:])
    chunks = sorted((ExpiredChunk(row_id, m.get(REPO_KEY), at, row_id in by_age,
                                  row_id in by_count)
                     for row_id, m, at in stamped if row_id in by_age or row_id in by_count),
                    key=lambda c: (c.ingested_at, c.id))
    return Expired(tuple(chunks), len(rows))


def _key_part(value: Any) -> Any:
    """A bucket key part: the original joins `tenantId|repoSlug` as strings (a missing one
    is `undefined`); a value of another type is kept apart by its repr."""
    return value if isinstance(value, str) else repr(value)


def defrag_recommended(*, threshold: Any, collection_count: int, total_deleted: int) -> bool:
    """The original's hint: `threshold > 0 && count > 0 && deleted / count > threshold`."""
    return (is_real_number(threshold) and threshold > 0 and collection_count > 0
            and total_deleted / collection_count > threshold)


def gc_detail(*, expired_count: int, evaluated_count: int, deleted_count: int,
              retention: Retention, auto_delete: bool, defrag: bool) -> dict[str, Any]:
    """The original's `formatGcDetail`: the `detail` of a `tombstone` telemetry row."""
    return {"expiredCount": expired_count, "evaluatedCount": evaluated_count,
            "deletedCount": deleted_count, "retention": retention.stored(),
            "gcAutoDelete": auto_delete is True, "defragRecommended": defrag is True}


def retention_bands(chunks: Sequence[ExpiredChunk], *, band_rows: int) -> list[Band]:
    """Bands of one repo's expired chunks (oldest first), as `tombstone_bands.id_bands`."""
    bands: list[Band] = []
    for start in range(0, len(chunks), band_rows):
        part = chunks[start:start + band_rows]
        newest = max(c.ingested_at for c in part)
        bands.append(Band(None, newest, len(part), (
            {INGESTED_KEY: {"$lte": store_bound(newest)}},), tuple(c.id for c in part)))
    return bands


def retention_rule(tenant_id: str, repo_slug: Any, newest: int | float
                   ) -> Callable[[Mapping[str, Any]], bool]:
    """The rule on a fetched row of a repo's retention plan: this tenant's and repo's, not
    re-ingested since the read."""
    def may_delete(m: Mapping[str, Any]) -> bool:
        at = m.get(INGESTED_KEY)
        return (m.get(TENANT_KEY) == tenant_id and m.get(REPO_KEY) == repo_slug
                and is_real_number(at) and at <= newest)
    return may_delete


def retention_clauses(tenant_id: str, repo_slug: Any) -> tuple[dict[str, Any], ...]:
    """What every band of a repo's retention plan shares: the tenant and the repo."""
    return ({TENANT_KEY: tenant_id}, {REPO_KEY: repo_slug})
