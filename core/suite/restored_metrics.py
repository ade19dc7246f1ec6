"""What the metrics exporter serves at start, before any tick: the last recorded state (pure).

A restarted daemon's next tick may be an interval away; until then `/metrics` would carry no
last success and no per-tenant figures, and an alert on `time() -
kb_last_success_timestamp_seconds` would see no series at all. SQLite keeps both (the latest
tick of each job with its figures, and each job's last success), so the exporter starts from
them. This module decides, from those records, what each restored series says:

- a job's last success: the stamp `record_tick` keeps beside the latest tick, else (state
  written before that stamp existed) the latest tick's end when it was ok; a job that never
  succeeded has no value (no series: there is no honest timestamp to show);
- each tenant's gauges: the tenants of the latest recorded tick that carries per-tenant figures
  (a reconcile pass that returned, complete or not), with its pass id; a tick that raised or
  was cancelled records none, and then no tenant gauge is restored until the next pass;
- nothing else: counters and the duration histogram start at 0 at every start, as Prometheus
  counters do (`rate()` and `increase()` treat the start as a reset).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from core.base.rules.camel_json import camel_case
from core.reconcile.rules.reconcile_outcome import TenantFigures


class RecordedTick(Protocol):
    """The latest recorded tick of a job, as `daemon_ticks` keeps it."""

    @property
    def ok(self) -> bool: ...

    @property
    def finished_at(self) -> int: ...

    @property
    def figures(self) -> Mapping[str, Any]: ...


@dataclass(frozen=True, slots=True)
class RestoredMetrics:
    """The recorded state the exporter serves before the first tick."""

    #: Epoch seconds of each served job's last successful tick (jobs that never succeeded are
    #: absent).
    last_success_s: Mapping[str, float] = dataclasses.field(default_factory=dict)
    #: Each tenant's figures from the latest recorded pass that had them.
    tenants: tuple[TenantFigures, ...] = ()
    #: That pass's id (None when it recorded none), so its tombstones are counted once.
    pass_id: str | None = None


def restored_metrics(
    jobs: Iterable[str],
    *,
    ticks: Mapping[str, RecordedTick],
    success_stamps_ms: Mapping[str, int],
) -> RestoredMetrics:
    """The state to serve for `jobs` (the jobs this process runs: another process's jobs are
    its own exporter's), from each job's latest recorded tick and last-success stamp."""
    last_success: dict[str, float] = {}
    tenants: tuple[TenantFigures, ...] = ()
    pass_id: str | None = None
    for job in jobs:
        tick = ticks.get(job)
        candidates = [success_stamps_ms[job]] if job in success_stamps_ms else []
        if tick is not None and tick.ok:
            candidates.append(tick.finished_at)
        if candidates:
            last_success[job] = max(candidates) / 1000
        if tick is not None and isinstance(tick.figures.get("tenants"), list):
            tenants = tuple(t for t in map(tenant_figures_from_json, tick.figures["tenants"])
                            if t is not None)
            recorded_id = tick.figures.get("passId")
            pass_id = recorded_id if isinstance(recorded_id, str) and recorded_id else None
    return RestoredMetrics(last_success, tenants, pass_id)


#: TenantFigures' fields that may be None in its JSON.
_OPTIONAL_TEXT = frozenset({"repo_slug", "guard"})


def tenant_figures_from_json(value: Any) -> TenantFigures | None:
    """A tenant's entry of a recorded pass read back (the inverse of its `to_json`), or None
    when it is not one: a record changed by hand or by another version is skipped, never
    shown with made-up numbers."""
    if not isinstance(value, Mapping):
        return None
    fields: dict[str, Any] = {}
    for spec in dataclasses.fields(TenantFigures):
        item = value.get(camel_case(spec.name))
        if spec.name in _OPTIONAL_TEXT:
            if item is not None and not isinstance(item, str):
                return None
        elif spec.default is None:  # a count left out of the JSON when there is none
            if item is not None and (not isinstance(item, int) or isinstance(item, bool)):
                return None
        elif spec.name == "tenant_id":
            if not isinstance(item, str) or not item:
                return None
        elif not isinstance(item, int) or isinstance(item, bool):
            return None
        fields[spec.name] = item
    return TenantFigures(**fields)
