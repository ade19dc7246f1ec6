"""The alerting pass's records: the cooldown stamps and every alert fired (`alerts_fired`).

Nothing stored holds a webhook's secrets: `alerts_fired.channel` is the redacted label, its
`error` is scrubbed, and `alert_cooldowns.channel` is `channel_key` (label + fingerprint).
Rows an earlier version stored with the full URL are rewritten by `scrub_stored_channels`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

import structlog

from core.alerting.rules.alert_evaluation import Alert, CooldownKey, Delivery, scope_of
from core.base.config.alert_channels import (
    channel_key,
    is_channel_key,
    redact_channel,
    scrub_secrets,
)
from core.base.state.graph_db import GraphDB

log = structlog.get_logger(__name__)

#: How many recent alerts `status` lists unless asked for another number: a screenful.
RECENT_ALERTS_LIMIT: Final = 20



async def load_cooldowns(graph: GraphDB, *, since_ms: int) -> dict[CooldownKey, int]:
    """The cooldown stamps later than `since_ms` (older ones suppress nothing any more)."""
    rows = await graph.query(graph.sql.cooldowns, (since_ms,))
    return {CooldownKey(r[0], r[1], r[2], r[3], r[4]): int(r[5]) for r in rows}


async def record_deliveries(graph: GraphDB, deliveries: Sequence[Delivery]) -> None:
    """Record every alert in `alerts_fired` and stamp the cooldown of each one delivered, in
    one transaction (so `status` never shows a stamp without its alert, or the reverse)."""
    fired = [_fired_row(d) for d in deliveries]
    stamps = [_stamp_row(d.alert) for d in deliveries if d.delivered]
    async with graph.write() as tx:
        await tx.executemany(tx.sql.insert_fired, fired)
        if stamps:
            await tx.executemany(tx.sql.stamp_cooldown, stamps)


def _stamp_row(alert: Alert) -> tuple[Any, ...]:
    key = alert.key
    return (key.tenant_id, key.repo_slug, key.metric, key.severity, key.channel,
            alert.fired_at_ms)


def _fired_row(delivery: Delivery) -> tuple[Any, ...]:
    a = delivery.alert
    error = scrub_secrets(delivery.error, a.channel) if delivery.error else None
    return (a.fired_at_ms, a.tenant_id, a.repo_slug, a.metric, a.value, a.threshold,
            a.severity, redact_channel(a.channel), delivery.subject, int(delivery.delivered),
            error)


async def scrub_stored_channels(graph: GraphDB) -> None:
    """Rewrite rows stored with a full channel spec (by versions before redaction): the
    label in `alerts_fired` (its error scrubbed of that spec's secrets), `channel_key` in
    `alert_cooldowns` (the later stamp kept when two rows meet). A no-op once done."""
    fired = [str(r[0]) for r in await graph.query(graph.sql.fired_channels)]
    cooling = [str(r[0]) for r in await graph.query(graph.sql.cooling_channels)]
    raw_fired = [c for c in fired if redact_channel(c) != c]
    raw_cooling = [c for c in cooling if not is_channel_key(c)]
    if not raw_fired and not raw_cooling:
        return
    async with graph.write() as tx:
        for spec in raw_fired:
            rows = await tx.query(tx.sql.fired_by_channel, (spec,))
            await tx.executemany(
                tx.sql.redact_fired,
                [(redact_channel(spec), scrub_secrets(error, spec) if error else None, row_id)
                 for row_id, error in rows])
        for spec in raw_cooling:
            await tx.execute(tx.sql.rekey_cooldowns, (channel_key(spec), spec))
            await tx.execute(tx.sql.drop_cooldowns, (spec,))
    log.info("alerting.stored_channels_redacted", alerts=len(raw_fired),
             cooldowns=len(raw_cooling))


async def recent_alerts(graph: GraphDB, limit: int = RECENT_ALERTS_LIMIT) -> list[Delivery]:
    """The latest `limit` recorded alerts, newest first (for the status command). A recorded
    alert's channel is its stored label, its delivery mode is not recorded (None)."""
    rows = await graph.query(graph.sql.recent_alerts, (limit,))
    return [
        Delivery(Alert(tenant_id=r[1], repo_slug=r[2], metric=r[3], value=float(r[4]),
                       threshold=float(r[5]), severity=r[6], channel=r[7], delivery_mode=None,
                       scope=scope_of(r[2]), fired_at_ms=int(r[0])),
                 subject=r[8], delivered=bool(r[9]), error=r[10])
        for r in rows
    ]
