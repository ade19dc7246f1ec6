"""Telemetry's vocabulary (pure): event types and the metric names a rollup carries.

`KNOWN_METRICS` is the one list of rollup figures an alert rule may name; the rollup query
(`core.stores.telemetry`) produces them in this order.
"""

from __future__ import annotations

from typing import Literal

EVENT_INGEST = "ingest"
EVENT_TOMBSTONE = "tombstone"
EVENT_RECONCILE = "reconcile"
EVENT_ERROR = "error"
EVENT_TYPES: tuple[str, ...] = (EVENT_INGEST, EVENT_TOMBSTONE, EVENT_RECONCILE, EVENT_ERROR)
DEFAULT_EVENT_TYPE = EVENT_INGEST

#: Every figure a rollup row carries, in the order the alerting rules and docs list them.
#: The single list of metric names an alert rule may refer to.
KNOWN_METRICS: tuple[str, ...] = (
    "eventCount",
    "ingestEvents",
    "tombstoneEvents",
    "reconcileEvents",
    "errorEvents",
    "chunksEmbedded",
    "chunksDeleted",
    "chunksTotal",
    "errorRate",
)

RollupScope = Literal["repo", "tenant"]
