"""The migration from the old line identity: the drain's only code for earlier versions' queues.

Earlier versions identified a queue line by the SHA-256 of its bytes, kept 30 days in
`applied_lines` (`LEGACY_APPLIED_LINES`). When that table exists, a `.draining` they left (no
sidecar: its generation is marked `legacy`) and the lines they re-queued (an edge line with a
`legacy_id`) are checked against it once, so a line they settled is never applied twice; the
lines settled now are recorded in it in the batch's own transaction, and after the first
complete tick (every line an earlier version could have settled has been read and settled
under the new identities) the table is dropped. Without the table, every method here is a
no-op and costs no query.

The pure part (which identity a line had) is `core.drain.rules.drain_plan.legacy_id_of`; the
statements are `core.drain.stores.drain_state`'s.

Removal: this module, `legacy_id_of`, `Known.legacy_*`, `BatchPlan.legacy_settled`,
`Generation.legacy` and the `legacy_*` statements may go in 0.2.0. An installation that
upgrades from a version that kept `applied_lines` must first run one complete drain tick on a
0.1.x release (which drops the table), which the 0.2.0 release notes must say.
"""

from __future__ import annotations

from collections.abc import Sequence

import structlog

from core.base.state.graph_db import GraphDB, Transaction
from core.base.state.schema import LEGACY_APPLIED_LINES
from core.drain.rules.drain_plan import BatchPlan, Parsed, legacy_id_of
from core.drain.stores import drain_state

log = structlog.get_logger(__name__)


class LineIdentityMigration:
    """One tick's view of the old identity table: whether it exists, and the old identities
    this tick has settled so far (so a later batch of the tick never settles one again before
    its commit is visible to the next query)."""

    def __init__(self) -> None:
        #: Whether `applied_lines` exists (read at the start of the tick).
        self.active = False
        #: Old identities settled in this tick.
        self.seen: set[str] = set()

    async def detect(self, graph: GraphDB) -> bool:
        """Read whether the old table exists; the rest of the tick follows this answer."""
        self.active = await drain_state.legacy_table_exists(graph)
        return self.active

    async def settled(self, graph: GraphDB, parsed: Sequence[Parsed], *,
                      legacy_file: bool) -> set[str]:
        """The old identities among `parsed` already settled, by an earlier version (one query)
        or earlier in this tick; only this tick's when the table is gone."""
        if not self.active:
            return self.seen
        ids = [i for p in parsed if (i := legacy_id_of(p, legacy_file=legacy_file))]
        if not ids:
            return self.seen
        return self.seen | await drain_state.legacy_settled(graph, ids)

    async def record(self, tx: Transaction, plan: BatchPlan, *, now_ms: int) -> None:
        """Record the old identities this batch settles, in the batch's transaction, so a crash
        before the commit records none of them and after it all of them."""
        if self.active:
            await drain_state.settle_legacy(tx, plan.legacy_settled, now_ms=now_ms)

    def remember(self, plan: BatchPlan) -> None:
        """After a batch: the old identities it settled count as seen for the rest of the tick."""
        self.seen.update(legacy_id for legacy_id, _ in plan.legacy_settled)

    async def finish(self, graph: GraphDB) -> None:
        """After the first complete tick, drop the old table: every line an earlier version
        could have settled has now been read and settled under the new identities. Call only
        when the tick was not interrupted."""
        if not self.active:
            return
        async with graph.write() as tx:
            await drain_state.drop_legacy_table(tx)
        self.active = False
        log.info("drain.legacy_identities_dropped", table=LEGACY_APPLIED_LINES)
