"""The restore holds in the state (`restore_holds`, on every backend): written by a restore,
read by the pass, `explain`, `status` and the deletion engine, lifted by `tenants release`
(what a hold means: `core.reconcile.rules.restore_holds`).

**Ordering is what makes a restore race-safe.** `RestoreHoldWriter` commits a batch's holds
BEFORE the restore writes those chunks back, and the engine re-reads the holds of a band's ids
right before its delete (`RestoreHolds.withhold`): a pass can only archive a restored chunk by
reading it after it was written, so after its hold was committed.

A state of an earlier version has no `restore_holds` table until its next writable open; a
read-only open (a dry run, `status`, `explain`) of one reads no hold.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final, Protocol

import orjson
import structlog

from core.base.io.clock import now_ms
from core.base.rules.tenants import NO_CONFIG_VERSION
from core.base.state.graph_db import GraphDB, Reader
from core.base.state.tenants import tenant_config
from core.reconcile.rules.restore_holds import (
    HoldEvidence,
    RestoreHold,
    holds_in_force,
    tenant_evidence,
)
from core.reconcile.stores.tenant_manifests import tenant_manifests

log = structlog.get_logger(__name__)

HOLDS_TABLE: Final = "restore_holds"
#: Chunk ids per statement: a restore of many thousand chunks holds them in a few statements.
HOLD_BATCH_ROWS: Final = 5_000


@dataclass(frozen=True, slots=True)
class TenantHolds:
    """One tenant's holds, counted (`status`)."""

    tenant_id: str
    chunks: int
    archives: int
    latest_restored_at_ms: int


async def _has_table(reader: Reader) -> bool:
    return bool(await reader.query(reader.sql.table_exists, (HOLDS_TABLE,)))


def _ids_json(ids: Sequence[str]) -> str:
    return orjson.dumps(list(ids)).decode()


def _hold(tenant_id: str, row: Sequence[object]) -> RestoreHold:
    chunk, archive, restored_at, version, fingerprint, evidence_at = row
    return RestoreHold(tenant_id, str(chunk), str(archive), int(str(restored_at)),
                       HoldEvidence(int(str(version)), str(fingerprint), int(str(evidence_at))))


async def current_evidence(reader: GraphDB, tenant_id: str) -> HoldEvidence:
    """The tenant's evidence as the state holds it now (version 0 without a config)."""
    config = await tenant_config(reader, tenant_id)
    version = config.version if config is not None else NO_CONFIG_VERSION
    return tenant_evidence(version, await tenant_manifests(reader, tenant_id))


async def hold_chunks(graph: GraphDB, *, tenant_id: str, archive: str, restored_at_ms: int,
                      evidence: HoldEvidence, ids: Sequence[str]) -> None:
    """Hold these chunks of the tenant (replacing an earlier hold), in one transaction."""
    if not ids:
        return
    async with graph.write() as tx:
        for start in range(0, len(ids), HOLD_BATCH_ROWS):
            await tx.execute(tx.sql.hold_chunks, (
                tenant_id, archive, restored_at_ms, evidence.version, evidence.fingerprint,
                evidence.updated_at_ms, _ids_json(ids[start:start + HOLD_BATCH_ROWS])))


async def tenant_holds(reader: Reader, tenant_id: str) -> list[RestoreHold]:
    """Every hold of the tenant, by chunk id ([] for a state without holds)."""
    if not await _has_table(reader):
        return []
    return [_hold(tenant_id, row)
            for row in await reader.query(reader.sql.tenant_holds, (tenant_id,))]


async def holds_of_chunks(reader: Reader, tenant_id: str,
                          ids: Sequence[str]) -> list[RestoreHold]:
    """The holds of these chunks of the tenant."""
    if not ids or not await _has_table(reader):
        return []
    found: list[RestoreHold] = []
    for start in range(0, len(ids), HOLD_BATCH_ROWS):
        rows = await reader.query(reader.sql.holds_of_chunks,
                                  (tenant_id, _ids_json(ids[start:start + HOLD_BATCH_ROWS])))
        found += [_hold(tenant_id, row) for row in rows]
    return found


async def hold_counts(reader: Reader) -> dict[str, TenantHolds]:
    """Per tenant with holds: how many chunks, from how many archives (one aggregate query)."""
    if not await _has_table(reader):
        return {}
    return {str(t): TenantHolds(str(t), int(n), int(a), int(latest))
            for t, n, a, latest in await reader.query(reader.sql.hold_counts)}


async def release_holds(graph: GraphDB, tenant_id: str, *, archive: str | None = None) -> int:
    """Lift the tenant's holds (only those from the archive of that file name); how many."""
    async with graph.write() as tx:
        if not await _has_table(tx):
            return 0
        return len(await tx.query(tx.sql.release_holds, (tenant_id, archive)))


async def drop_lapsed_holds(graph: GraphDB, tenant_id: str,
                            holds: Sequence[RestoreHold]) -> None:
    """Remove these holds (lapsed ones), each only as it was read: a chunk held again since
    (by a later restore) keeps its new hold."""
    if not holds:
        return
    pairs = orjson.dumps([[h.chunk_id, h.restored_at_ms] for h in holds]).decode()
    async with graph.write() as tx:
        await tx.execute(tx.sql.drop_holds, (tenant_id, pairs))


class RestoreHoldWriter:
    """A restore's holds: `hold` each batch's chunk ids right before they are written back (the
    evidence read once, at the first batch), `unhold` those the store then refused."""

    def __init__(self, graph: GraphDB, archive: str) -> None:
        self._graph = graph
        self._archive = archive
        self._restore: tuple[int, HoldEvidence] | None = None
        self.held = 0

    async def hold(self, tenant_id: str, ids: Sequence[str]) -> None:
        """Commit the holds of these chunks of the tenant."""
        if self._restore is None:
            self._restore = (now_ms(), await current_evidence(self._graph, tenant_id))
        restored_at, evidence = self._restore
        await hold_chunks(self._graph, tenant_id=tenant_id, archive=self._archive,
                          restored_at_ms=restored_at, evidence=evidence, ids=ids)
        self.held += len(ids)

    async def unhold(self, tenant_id: str, ids: Sequence[str]) -> None:
        """Drop this restore's holds of these chunks (a later restore's are kept)."""
        if self._restore is None or not ids:
            return
        restored_at, evidence = self._restore
        await drop_lapsed_holds(self._graph, tenant_id, [
            RestoreHold(tenant_id, i, self._archive, restored_at, evidence) for i in ids])
        self.held -= len(ids)


class JudgedBy(Protocol):
    """A deletion plan's rule for one tenant, as far as a hold needs it."""

    @property
    def evidence(self) -> HoldEvidence | None: ...


class RestoreHolds:
    """The deletion engine's view of the holds: which of a band's archived ids are held now."""

    def __init__(self, graph: GraphDB) -> None:
        self._graph = graph
        self._table = False  # seen once, the table stays (it is never dropped)

    async def _held_tenants(self, tenant_ids: Sequence[str]) -> set[str]:
        if not self._table:
            self._table = await _has_table(self._graph)
            if not self._table:
                return set()
        rows = await self._graph.query(self._graph.sql.held_tenants, (_ids_json(tenant_ids),))
        return {str(row[0]) for row in rows}

    async def withhold(
        self, archived: Mapping[str, list[str]], rules: Mapping[str, JudgedBy],
    ) -> tuple[Mapping[str, list[str]], set[str]]:
        """The band's archived ids by tenant without those a hold in force keeps (judged by the
        evidence the tenant's plan was made with; without any, every hold), and the ids kept."""
        held: set[str] = set()
        holding = await self._held_tenants(list(archived))
        for tenant_id, ids in archived.items():
            if tenant_id not in holding:
                continue
            holds = await holds_of_chunks(self._graph, tenant_id, ids)
            rule = rules.get(tenant_id)
            kept, _ = holds_in_force(holds, rule.evidence if rule is not None else None)
            held |= kept
        if not held:
            return archived, held
        log.warning("reconcile.restore_held_kept", kept=len(held), first=sorted(held)[0],
                    message="archived chunks a restore holds were not deleted; their archive "
                    "lines are withdrawn (kb-tenants release lifts a hold)")
        return {t: [i for i in ids if i not in held] for t, ids in archived.items()}, held
