"""`reconcile explain`'s plan (`core.reconcile.rules.explain_plan`), pure: the guards judged as a
tombstoning pass would judge them, the one reason nothing would be deleted (in the order they
are checked), the cap, and the plan's listing of chunks and manifests."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from core.base.rules.rows import ChromaRow
from core.reconcile.rules.explain_plan import (
    WHY_DISABLED,
    WHY_MASTER_OFF,
    WHY_NOTHING,
    WHY_TENANT_OFF,
    build_plan,
    guard_check,
)
from core.reconcile.rules.manifests import RepoManifest
from core.reconcile.rules.reconcile import (
    GUARD_INVALID_CONFIG,
    GUARD_MANIFEST_MISMATCH,
    GUARD_STALE_FRACTION,
    ReconcilePolicy,
)
from core.reconcile.rules.reconcile_outcome import GuardVerdict, ScanFigures, TenantOutcome
from core.reconcile.rules.scan_verdicts import ScanRules
from core.reconcile.rules.tenant_scan import TenantTally

POLICY = ReconcilePolicy(collection="kb", auto_tombstone=True, orphan_version_gap=2,
                         manifest_grace_ms=0, max_deletes_per_tick=100, max_stale_fraction=0.5,
                         dry_run=True)


def outcome(*, auto_tombstone: bool = True, guard: str | None = None,
            total_chunks: int = 40, **scan: Any) -> TenantOutcome:
    """An outcome as the pass would judge it: `scan` holds the scan's figures (10 actionable
    unless given); the manifest-mismatch guard is the scan's, the others the verdict's."""
    figures = ScanFigures(**{"actionable_count": 10, **scan})
    verdict = GuardVerdict(None if guard == GUARD_MANIFEST_MISMATCH else guard, total_chunks)
    return TenantOutcome("t", None, 5, auto_tombstone=auto_tombstone, scan=figures,
                         verdict=verdict)


def test_an_actionable_tenant_under_every_guard_would_lose_its_actionable_chunks() -> None:
    check = guard_check(outcome(), POLICY, enabled=True)
    assert (check.why_not, check.would_delete, check.over_cap) == (None, 10, 0)


def test_the_cap_bounds_what_would_be_deleted_and_the_rest_waits_for_later_passes() -> None:
    capped = dataclasses.replace(POLICY, max_deletes_per_tick=4)
    check = guard_check(outcome(), capped, enabled=True)
    assert (check.would_delete, check.over_cap, check.max_deletes_per_tick) == (4, 6, 4)


def test_held_chunks_are_never_counted_as_deletable() -> None:
    check = guard_check(outcome(held_count=7), POLICY, enabled=True)
    assert (check.would_delete, check.held_count) == (3, 7)
    assert guard_check(outcome(held_count=10), POLICY, enabled=True).why_not == WHY_NOTHING


@pytest.mark.parametrize(("enabled", "policy", "fields", "why"), [
    # Each row also carries every later reason, so the first in the order must win.
    (False, dataclasses.replace(POLICY, auto_tombstone=False),
     {"auto_tombstone": False, "guard": GUARD_STALE_FRACTION}, WHY_DISABLED),
    (True, dataclasses.replace(POLICY, auto_tombstone=False),
     {"auto_tombstone": False, "guard": GUARD_STALE_FRACTION}, WHY_MASTER_OFF),
    (True, POLICY, {"auto_tombstone": False, "guard": GUARD_STALE_FRACTION}, WHY_TENANT_OFF),
    (True, POLICY, {"guard": GUARD_STALE_FRACTION},
     "the stale-fraction guard holds the tenant"),
    (True, POLICY, {"actionable_count": 0}, WHY_NOTHING),
])
def test_the_first_reason_nothing_would_be_deleted_is_the_one_given(
    enabled: bool, policy: ReconcilePolicy, fields: dict[str, Any], why: str,
) -> None:
    check = guard_check(outcome(**fields), policy, enabled=enabled)
    assert (check.why_not, check.would_delete) == (why, 0)


def test_an_invalid_pass_guard_is_named_and_deletes_nothing() -> None:
    invalid = dataclasses.replace(POLICY, invalid_guards=("reconciliationMaxDeletesPerTick",))
    check = guard_check(outcome(guard=GUARD_INVALID_CONFIG), invalid, enabled=True)
    assert check.would_delete == 0
    assert check.why_not is not None and "reconciliationMaxDeletesPerTick" in check.why_not
    assert check.invalid_guards == ("reconciliationMaxDeletesPerTick",)


def test_a_manifest_mismatch_names_its_repos_only_when_it_leaves_nothing_to_delete() -> None:
    held = outcome(guard=GUARD_MANIFEST_MISMATCH, mismatched_repos=("r", "s"),
                   actionable_count=0)
    assert guard_check(held, POLICY, enabled=True).why_not == (
        "the manifest-mismatch guard holds the orphans of r, s")
    rest = outcome(guard=GUARD_MANIFEST_MISMATCH, mismatched_repos=("r",))
    check = guard_check(rest, POLICY, enabled=True)
    assert (check.why_not, check.would_delete, check.mismatched_repos) == (None, 10, ("r",))


def test_the_plan_lists_every_chunk_by_repo_path_and_id_and_each_manifest_with_its_orphans(
) -> None:
    manifests = {"r": RepoManifest("r", ("keep.md", "never.md"), 1_000)}
    tally = TenantTally(ScanRules("t", 5, 2, manifests, 0, read_ms=2_000,
                                  max_stale_fraction=0.9), cap=10, keep_rows=True)
    rows = [("b-gone", "r", "gone.md", 5), ("a-gone", "r", "gone.md", 5),
            ("c-stale", "r", "keep.md", 1), ("d-live", "r", "keep.md", 5)]
    tally.add_page([ChromaRow(i, {"tenantId": "t", "repoSlug": repo, "sourcePath": path,
                                  "tenantConfigVersion": stamp, "ingestedAt": 500})
                    for i, repo, path, stamp in rows])
    tally.settle()
    result = outcome(actionable_count=tally.actionable_count, scanned=tally.scanned)
    plan = build_plan(result, tally, POLICY, manifests, enabled=True)
    assert [c.id for c in plan.chunks] == ["a-gone", "b-gone", "c-stale"]
    assert [c.reasons for c in plan.chunks] == [("manifest-orphan",), ("manifest-orphan",),
                                                ("config-stale",)]
    (line,) = plan.manifests
    assert (line.repo_slug, line.path_count, line.chunk_count, line.orphan_count) == (
        "r", 2, 4, 2)
    assert line.missing_paths == ("never.md",) and line.past_grace
    assert plan.figures == result.figures()
    assert plan.guards.would_delete == 3
