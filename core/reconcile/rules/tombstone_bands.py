"""The bands a tenant's tombstoning deletes by (pure; the engine's guarantees:
`core.reconcile.deletion`).

A band is `ids = [...] AND tenantId = T AND <the reason's clauses> AND ingestedAt <= newest`
(`id_bands`): a re-stamped chunk no longer matches the stamp, a re-ingested one carries a later
`ingestedAt` (CONTRACT: epoch ms). An actionable chunk with a numeric `ingestedAt` later than
the pass's read is held; a legacy one is deleted by id in a legacy band (`legacy_bands`).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

from core.base.rules.numbers import is_real_number
from core.base.rules.rows import ColumnPage

TENANT_KEY: Final = "tenantId"
STAMP_KEY: Final = "tenantConfigVersion"
INGESTED_KEY: Final = "ingestedAt"

Number = int | float

#: Ulps a band's float bounds are moved up as the store's operands: Chroma reads floats up to
#: 1 ulp off (docs/performance.md, "Float bounds"), and without the slack such a chunk fits no
#: band: actionable on every pass, deleted by none.
FLOAT_BOUND_SLACK_ULPS: Final = 2


def deletion_bound(metadata: Any, *, read_ms: int) -> Number | None:
    """The chunk's `ingestedAt` when a band can take it (a real number not after the pass's
    read); None for a held chunk."""
    if not isinstance(metadata, Mapping):
        return None
    value: Any = metadata.get(INGESTED_KEY)
    return value if is_real_number(value) and value <= read_ms else None


class _Later:
    """A key with its order reversed: `heapq`'s min-heap of these is a max-heap of the keys."""

    __slots__ = ("key",)

    def __init__(self, key: tuple[Any, ...]) -> None:
        self.key = key

    def __lt__(self, other: _Later) -> bool:
        return bool(self.key > other.key)


class OldestKeys:
    """The smallest `capacity` `(ingestedAt, id, ...)` keys offered, in bounded memory: the
    chunks a capped pass deletes first (CONTRACT "Tombstones")."""

    def __init__(self, capacity: int) -> None:
        self.capacity = max(0, capacity)
        self._heap: list[_Later] = []

    def offer_key(self, key: tuple[Any, ...]) -> None:
        """Keep `key` if it is among the smallest `capacity` seen."""
        if self.capacity == 0:
            return
        item = _Later(key)
        if len(self._heap) < self.capacity:
            heapq.heappush(self._heap, item)
        elif item.key < self._heap[0].key:
            heapq.heapreplace(self._heap, item)

    def kept(self) -> list[tuple[Any, ...]]:
        """The kept keys, smallest (oldest) first."""
        return sorted(item.key for item in self._heap)

    def __len__(self) -> int:
        return len(self._heap)


class OldestIngested(OldestKeys):
    """The (`ingestedAt`, id) of the oldest `capacity` chunks offered."""

    def offer(self, value: Number, row_id: str = "") -> None:
        """Keep the chunk if it is among the oldest `capacity` seen (ties: the smaller id)."""
        self.offer_key((value, row_id))

    def sorted(self) -> list[Number]:
        """The kept `ingestedAt` values, oldest first."""
        return [key[0] for key in self.kept()]


@dataclass(frozen=True, slots=True)
class Band:
    """The chunks whose `ingestedAt` is in (after, through]; `planned` of them were seen;
    `extra` clauses narrow it (a manifest band's paths)."""

    after: Number | None
    through: Number
    planned: int
    extra: tuple[Mapping[str, Any], ...] = ()
    #: The delete request names them beside the `where`: nothing outside the selection goes.
    ids: tuple[str, ...] = ()
    #: Its rows carry no numeric `ingestedAt` (`legacy_bands`).
    legacy: bool = False


def plan_bands(values: Sequence[Number], *, band_rows: int) -> list[Band]:
    """Cut sorted `ingestedAt` values into bands of at most `band_rows` (pure).

    Equal values are never split (a band boundary must be a value change, or the predicate
    could not tell them apart): a band ends before a run of equal values that would overflow
    it, and a run longer than `band_rows` is a band of its own.
    """
    bands: list[Band] = []
    start, count = 0, len(values)
    while start < count:
        end = min(start + band_rows, count)
        if end < count and values[end] == values[end - 1]:
            run_start = end - 1
            while run_start > start and values[run_start - 1] == values[end - 1]:
                run_start -= 1
            if run_start > start:
                end = run_start
            else:
                while end < count and values[end] == values[end - 1]:
                    end += 1
        bands.append(Band(values[start - 1] if start else None, values[end - 1], end - start))
        start = end
    return bands


def id_bands(chunks: Sequence[tuple[Number, str]], *, band_rows: int,
             extra: Callable[[Sequence[tuple[Number, str]]], tuple[Mapping[str, Any], ...]]
             = lambda _part: ()) -> list[Band]:
    """Bands of selected (`ingestedAt`, id) chunks in deletion order: each names its ids and
    is bounded by `ingestedAt <=` the newest it read; `extra(part)` adds the band's own clauses."""
    bands: list[Band] = []
    for start in range(0, len(chunks), band_rows):
        part = chunks[start:start + band_rows]
        newest = max(value for value, _ in part)
        bands.append(Band(None, newest, len(part),
                          ({INGESTED_KEY: {"$lte": store_bound(newest)}},
                           *_from_oldest(min(value for value, _ in part)), *extra(part)),
                          tuple(row_id for _, row_id in part)))
    return bands


def _from_oldest(oldest: Number) -> tuple[Mapping[str, Any], ...]:
    """`ingestedAt >=` the band's oldest value, floored (an integer operand compares exactly):
    it changes no row of the band but bounds the store's evaluation of the `where` beside the
    ids to about the band's rows (docs/performance.md)."""
    if not math.isfinite(oldest):
        return ()
    return ({INGESTED_KEY: {"$gte": math.floor(oldest)}},)


def legacy_order(value: Any) -> float:
    """Where a legacy chunk sorts in the one deletion order: an ISO-8601 string at its time in
    epoch ms (zone-less read as UTC), anything else first, at minus infinity."""
    if isinstance(value, str):
        try:
            moment = datetime.fromisoformat(value.strip())
        except ValueError:
            return -math.inf
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=UTC)
        return moment.timestamp() * 1000
    return -math.inf


def stale_clauses(tenant_id: str, ceiling: Number) -> tuple[dict[str, Any], ...]:
    """What every config-stale band shares: the tenant, and an actionable stamp."""
    return ({TENANT_KEY: tenant_id}, {STAMP_KEY: {"$lte": ceiling}})


def store_bound(value: Number) -> Number:
    """A band bound as the store's operand: an int as it is; a float moved up by
    FLOAT_BOUND_SLACK_ULPS. A band's `after` is the previous band's `through` and both move
    alike, so every chunk still falls in exactly one band; one taken in through the slack is in
    the band's snapshot read, so it is archived before it goes. (Against integer values Chroma
    truncates a fractional operand, so the slack never reaches an integer `ingestedAt`.)"""
    if isinstance(value, float) and math.isfinite(value):
        for _ in range(FLOAT_BOUND_SLACK_ULPS):
            value = math.nextafter(value, math.inf)
    return value


def ingested_range(band: Band) -> list[dict[str, Any]]:
    """A band's `ingestedAt` range as `where` clauses: (after, through], by `store_bound`."""
    clauses = [] if band.after is None else [{INGESTED_KEY: {"$gt": store_bound(band.after)}}]
    return [*clauses, {INGESTED_KEY: {"$lte": store_bound(band.through)}}]


def predicate_where(clauses: Sequence[Mapping[str, Any]], band: Band) -> dict[str, Any]:
    """A band's predicate, as Chroma `where`: the shared `clauses`, the band's own, and its
    `ingestedAt` range. (Chroma truncates a fractional operand toward zero against integers:
    `$lte 2.5` is `<= 2`, `$gt 2.5` is `> 2`.)"""
    if band.ids:  # its ids go with the request
        return {"$and": [*clauses, *band.extra]}
    return {"$and": [*clauses, *band.extra, *ingested_range(band)]}


def is_legacy_ingested(value: Any) -> bool:
    """A legacy `ingestedAt` (CONTRACT "Chroma data"): absent, or an ISO-8601 string."""
    return value is None or type(value) is str


def legacy_bands(chunks: Sequence[tuple[str, Any]], *, band_rows: int) -> list[Band]:
    """Bands of legacy (id, `ingestedAt` as read) chunks in deletion order, each naming its ids.
    ISO strings first, narrowed to `ingestedAt $in` the strings read (a row rewritten with a
    number no longer matches); then the absent ones (a `where` cannot say "absent": their rule
    refuses a fetched row that gained a number)."""
    texts = [c for c in chunks if isinstance(c[1], str)]
    absent = [c for c in chunks if c[1] is None]
    bands: list[Band] = []
    for group, narrowed in ((texts, True), (absent, False)):
        for start in range(0, len(group), band_rows):
            part = group[start:start + band_rows]
            extra = ({INGESTED_KEY: {"$in": sorted({str(v) for _, v in part})}},) \
                if narrowed else ()
            bands.append(Band(None, 0, len(part), extra, tuple(i for i, _ in part), True))
    return bands


def band_where(tenant_id: str, ceiling: Number, band: Band) -> dict[str, Any]:
    """A config-stale band's predicate (`predicate_where` over `stale_clauses`)."""
    return predicate_where(stale_clauses(tenant_id, ceiling), band)


def rows_refused(
    page: ColumnPage, *, may_delete: Callable[[Mapping[str, Any]], bool], read_ms: int,
    by_id: bool = False,
) -> list[str]:
    """Ids in a page the rule would not delete (pure): `may_delete` says no, or no numeric
    `ingestedAt` or one after the pass's read."""
    if by_id:  # a legacy band: its rule says what `ingestedAt` it may carry
        return [row_id for row_id, metadata in zip(page.ids, page.metadatas, strict=True)
                if not may_delete(metadata)]
    return [row_id for row_id, metadata in zip(page.ids, page.metadatas, strict=True)
            if not may_delete(metadata) or deletion_bound(metadata, read_ms=read_ms) is None]


def stale_rule(tenant_id: str, is_actionable: Callable[[Any], bool]
               ) -> Callable[[Mapping[str, Any]], bool]:
    """The config-stale rule on one row's metadata: this tenant's, an actionable stamp."""
    return lambda m: m.get(TENANT_KEY) == tenant_id and is_actionable(m.get(STAMP_KEY))


def legacy_stale_rule(tenant_id: str, is_actionable: Callable[[Any], bool]
                      ) -> Callable[[Mapping[str, Any]], bool]:
    """The rule of a legacy band's rows: config-stale and still a legacy `ingestedAt`."""
    stale = stale_rule(tenant_id, is_actionable)
    return lambda m: stale(m) and is_legacy_ingested(m.get(INGESTED_KEY))


def rule_violations(
    page: ColumnPage, *, tenant_id: str, is_actionable: Callable[[Any], bool], read_ms: int
) -> list[str]:
    """`rows_refused` under the config-stale rule (`stale_rule`)."""
    return rows_refused(page, may_delete=stale_rule(tenant_id, is_actionable), read_ms=read_ms)
