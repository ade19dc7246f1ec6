"""When a restore's hold lapses (`core.reconcile.rules.restore_holds`): only when the evidence
changed after the restore — the version raised again, a manifest or yield snapshot replaced —
never because a pass read the evidence from before the restore."""

from __future__ import annotations

from core.base.rules.rows import ChromaRow
from core.reconcile.rules.generations.extraction_snapshot import ExtractionSnapshot
from core.reconcile.rules.manifests import RepoManifest
from core.reconcile.rules.restore_holds import (
    HoldEvidence,
    RestoreHold,
    hold_in_force,
    holds_in_force,
    tenant_evidence,
)
from core.reconcile.rules.scan_verdicts import ScanRules
from core.reconcile.rules.tenant_scan import TenantTally

IDENTITY = "a" * 64


def manifest(paths: tuple[str, ...], at: int, *, yielded: tuple[str, ...] | None = None,
             yielded_at: int = 0) -> dict[str, RepoManifest]:
    snapshot = (ExtractionSnapshot(yielded, IDENTITY, yielded_at)
                if yielded is not None else None)
    return {"r": RepoManifest("r", paths, at, extraction_snapshot=snapshot)}


def test_the_same_evidence_keeps_the_hold() -> None:
    held = tenant_evidence(4, manifest(("a.md",), 100))
    assert hold_in_force(held, tenant_evidence(4, manifest(("a.md",), 100)))
    assert tenant_evidence(4, {}) == HoldEvidence(4, tenant_evidence(4, {}).fingerprint, 0)


def test_a_version_raised_after_the_restore_lapses_the_hold() -> None:
    held = tenant_evidence(4, {})
    assert not hold_in_force(held, tenant_evidence(5, {}))


def test_a_version_read_before_the_restore_keeps_the_hold() -> None:
    assert hold_in_force(tenant_evidence(5, {}), tenant_evidence(4, {}))


def test_a_manifest_replaced_after_the_restore_lapses_the_hold() -> None:
    held = tenant_evidence(4, manifest(("a.md",), 100))
    assert not hold_in_force(held, tenant_evidence(4, manifest(("b.md",), 200)))
    # Set again with the same paths: replaced all the same (a new updatedAt).
    assert not hold_in_force(held, tenant_evidence(4, manifest(("a.md",), 200)))


def test_a_yield_snapshot_replaced_after_the_restore_lapses_the_hold() -> None:
    held = tenant_evidence(4, manifest(("a.md",), 100, yielded=("a.md",), yielded_at=150))
    assert not hold_in_force(held, tenant_evidence(
        4, manifest(("a.md",), 100, yielded=(), yielded_at=300)))


def test_a_manifest_read_before_the_restore_keeps_the_hold() -> None:
    held = tenant_evidence(4, manifest(("b.md",), 200))
    assert hold_in_force(held, tenant_evidence(4, manifest(("a.md",), 100)))


def test_without_evidence_every_hold_is_in_force_and_lapsed_ones_are_named() -> None:
    old = RestoreHold("acme", "c1", "a.jsonl", 10, tenant_evidence(3, {}))
    new = RestoreHold("acme", "c2", "b.jsonl", 20, tenant_evidence(4, {}))
    assert holds_in_force([old, new], None) == (frozenset({"c1", "c2"}), ())
    assert holds_in_force([old, new], tenant_evidence(4, {})) == (frozenset({"c2"}), (old,))


def test_a_tally_counts_restore_held_chunks_and_never_chooses_them() -> None:
    rules = ScanRules("acme", 4, 2, {}, None, read_ms=10_000, max_stale_fraction=1.0)
    tally = TenantTally(rules, cap=10, restore_held=frozenset({"c1", "legacy"}))
    tally.add_page([
        ChromaRow(row_id, {"tenantId": "acme", "tenantConfigVersion": 1, **at}, None, None)
        for row_id, at in (("c1", {"ingestedAt": 5}), ("c2", {"ingestedAt": 6}),
                           ("legacy", {}))])
    chosen = tally.first_to_go()
    assert chosen.order == ("c2",)
    assert (tally.actionable_count, tally.restore_held_count) == (3, 2)
