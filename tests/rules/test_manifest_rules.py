"""The pure rules of manifest drift: the original's `diffTenantManifest` cases (its reference list
numbers them 67-68, with the union case beside them), missing paths, the tally's manifest figures
and its mismatch guard, and per-tenant policy precedence (the row-by-row verdict is in
test_scan_verdicts, the orphan bands in test_orphan_bands)."""

from __future__ import annotations

import math
from typing import Any

import pytest

from core.base.rules.rows import ChromaRow
from core.reconcile.rules.manifests import (
    ManifestMatch,
    ManifestOrphan,
    ManifestPathError,
    NormalizedPaths,
    PathCoverage,
    RepoManifest,
    claimed_paths,
    manifest_patch,
    manifests_from_properties,
    normalize_manifest_paths,
)
from core.reconcile.rules.reconcile import manifest_mismatched
from core.reconcile.rules.scan_verdicts import ScanRules
from core.reconcile.rules.tenant_policy import (
    FROM_CONFIG,
    FROM_TENANT,
    policy_patch,
    resolve_tenant_policy,
)
from core.reconcile.rules.tenant_scan import TenantTally
from tests.oracles import ManifestDiff, diff_tenant_chunks, diff_tenant_manifest, ordered_union


def row(row_id: str, stamp: Any = 5, **metadata: Any) -> dict[str, Any]:
    """A tenant row as the original's spec built them: repo-x, ingested at 1000,
    `src/<id>.js`."""
    return {"id": row_id, "metadata": {"tenantConfigVersion": stamp, "ingestedAt": 1000,
                                       "repoSlug": "repo-x", "tenantId": "tenant-x",
                                       "sourcePath": f"src/{row_id}.js", **metadata}}


MANIFEST_X = {"repo-x": {"pathsAfterPush": ["src/live.js"], "updatedAt": 2000}}


def test_case_67_flags_rows_whose_source_path_is_absent_from_the_repo_manifest() -> None:
    diff = diff_tenant_manifest([
        row("live", sourcePath="src/live.js"),
        row("orphan", sourcePath="src/old.js"),
        row("other-repo", repoSlug="repo-y", sourcePath="src/old.js"),
    ], MANIFEST_X)
    assert diff.orphan_count == 1
    assert diff.manifest_orphans == (
        ManifestOrphan("orphan", "repo-x", "src/old.js", 1000, 2000),)
    assert diff.actionable_ids == ("orphan",)
    assert diff.actionable_count == 1


def test_case_67_skips_repos_without_a_manifest_and_rows_without_a_source_path() -> None:
    rows = [row("repo-without-manifest", repoSlug="repo-y", sourcePath="src/old.js"),
            row("missing-source", sourcePath=None), row("empty-source", sourcePath=""),
            row("number-source", sourcePath=7)]
    assert diff_tenant_manifest(rows, MANIFEST_X) == ManifestDiff()


def test_case_68_skips_rows_newer_than_the_manifest_snapshot() -> None:
    diff = diff_tenant_manifest([
        row("old-orphan", sourcePath="src/old.js", ingestedAt=1000),
        row("at-the-snapshot", sourcePath="src/old2.js", ingestedAt=2000),
        row("newer-row", sourcePath="src/new.js", ingestedAt=3000),
    ], MANIFEST_X)
    assert [o.id for o in diff.manifest_orphans] == ["old-orphan", "at-the-snapshot"]
    assert diff.manifest_orphans[0].manifest_updated_at == 2000


@pytest.mark.parametrize("ingested", [None, "1000", True, math.nan, math.inf])
def test_case_68_skips_rows_without_a_finite_ingested_at(ingested: Any) -> None:
    diff = diff_tenant_manifest([row("no-time", sourcePath="src/x.js", ingestedAt=ingested),
                                 row("real-orphan", sourcePath="src/old.js")], MANIFEST_X)
    assert diff.actionable_ids == ("real-orphan",)


@pytest.mark.parametrize("manifests", [
    None, [], "repo-x", {"repo-x": {"pathsAfterPush": []}},
    {"repo-x": {"pathsAfterPush": [], "updatedAt": None}},
    {"repo-x": {"pathsAfterPush": "src/live.js", "updatedAt": 2000}},
    {"repo-x": {"pathsAfterPush": ["src/live.js"], "updatedAt": math.nan}},
    {"": {"pathsAfterPush": ["src/live.js"], "updatedAt": 2000}},
])
def test_an_absent_or_malformed_manifest_flags_nothing(manifests: Any) -> None:
    assert diff_tenant_manifest([row("a", 1)], manifests).orphan_count == 0


def test_rows_that_are_not_a_list_flag_nothing() -> None:
    assert diff_tenant_manifest(None, MANIFEST_X) == ManifestDiff()


def test_the_union_counts_a_chunk_both_stale_and_orphaned_once() -> None:
    # The original's first version added staleCount and orphanCount: a chunk in both was two.
    rows = [row("both", 1, sourcePath="src/gone.js"), row("stale-only", 1,
            sourcePath="src/live.js"), row("orphan-only", 5, sourcePath="src/gone2.js"),
            row("clean", 5, sourcePath="src/live.js")]
    stale = diff_tenant_chunks(rows, 5, 2)
    orphans = diff_tenant_manifest(rows, MANIFEST_X)
    union = ordered_union(stale.actionable_ids, orphans.actionable_ids)
    assert union == ("both", "stale-only", "orphan-only")
    tally = TenantTally(ScanRules("tenant-x", 5, 2, manifests_from_properties(
        {"manifests": MANIFEST_X}), 0, read_ms=10_000, max_stale_fraction=1.0), cap=10)
    tally.add_page([ChromaRow(r["id"], r["metadata"]) for r in rows])
    assert (tally.stale_count, tally.manifest_orphan_count, tally.total_orphan_count,
            tally.actionable_count) == (2, 2, 3, 3)


def test_the_grace_keeps_a_young_manifests_orphans_from_being_actionable() -> None:
    young = diff_tenant_manifest([row("o", sourcePath="src/old.js")], MANIFEST_X,
                                 now_ms=2000 + 99, grace_ms=100)
    ripe = diff_tenant_manifest([row("o", sourcePath="src/old.js")], MANIFEST_X,
                                now_ms=2000 + 100, grace_ms=100)
    closed = diff_tenant_manifest([row("o", sourcePath="src/old.js")], MANIFEST_X,
                                  now_ms=10**12, grace_ms=None)
    assert (young.orphan_count, young.actionable_count) == (1, 0)
    assert ripe.actionable_ids == ("o",)
    assert closed.actionable_count == 0  # an invalid grace fails closed


def test_missing_paths_are_manifest_paths_no_chunk_of_that_repo_carries() -> None:
    manifests = manifests_from_properties({"manifests": {
        "repo-x": {"pathsAfterPush": ["a.md", "b.md", "c.md"], "updatedAt": 5},
        "repo-y": {"pathsAfterPush": ["a.md"], "updatedAt": 5}}})
    coverage = PathCoverage(manifests)
    for metadata in ({"repoSlug": "repo-x", "sourcePath": "a.md"},
                     {"repoSlug": "repo-y", "sourcePath": "b.md"},  # another repo's path
                     {"repoSlug": "repo-x", "sourcePath": "c.md", "ingestedAt": 10**13},
                     {"repoSlug": "repo-z", "sourcePath": "b.md"}):
        coverage.observe(metadata)
    assert coverage.missing() == {"repo-x": ("b.md",), "repo-y": ("a.md",)}


def test_claimed_paths_are_sorted_deduplicated_and_never_empty() -> None:
    assert claimed_paths(["b", "a", "", "b"]) == ("a", "b")
    with pytest.raises(ValueError, match="empty"):
        claimed_paths(["", ""])


def test_the_normalizer_strips_a_find_listings_prefix_and_crlf_and_skips_blank_lines() -> None:
    assert normalize_manifest_paths(["./lib/x.py\r", "", "\r", "README.md", "./lib/x.py"],
                                    source="list") == NormalizedPaths(("README.md", "lib/x.py"), 2)
    assert normalize_manifest_paths(["a b/c.md"], source="list").paths == ("a b/c.md",)


@pytest.mark.parametrize(("lines", "says"), [
    (["ok.md", "/etc/passwd"], "list:2: path '/etc/passwd' is absolute (starts with /)"),
    (["src/../a.py"], "list:1: path 'src/../a.py' has a .. segment"),
    (["src//a.py"], "list:1: path 'src//a.py' has an empty segment (// or a trailing /)"),
    (["src/"], "list:1: path 'src/' has an empty segment"),
    (["src/./a.py"], "list:1: path 'src/./a.py' has a . segment"),
    (["./"], "list:1: path './' has an empty segment"),
    (["\ufeffa.md"], "list:1: path '\\ufeffa.md' holds a byte-order mark (U+FEFF): save the "
                     "list as UTF-8 without BOM"),
    (["ok", "x\x1b[2Jy.md"], "list:2: path 'x\\x1b[2Jy.md' holds a control character"),
    (["a\tb", "c"], "list:1: path 'a\\x09b' holds a control character"),
    (["a\x00b"], "list:1: path 'a\\x00b' holds a control character"),
    (["a\x85b"], "list:1: path 'a\\x85b' holds a control character"),
    (["a\rb"], "list:1: path 'a\\x0db' holds a control character"),
    (["", "\r"], "list: the path list is empty"),
])
def test_the_normalizer_refuses_a_bad_path_naming_its_line_and_what_is_wrong(
    lines: list[str], says: str
) -> None:
    with pytest.raises(ManifestPathError) as caught:
        normalize_manifest_paths(lines, source="list")
    message = str(caught.value)
    assert message.startswith(says)
    assert "\n" not in message and "\x1b" not in message and "\t" not in message


def test_the_normalizer_names_the_source_alone_for_an_unnumbered_listing() -> None:
    with pytest.raises(ManifestPathError) as caught:
        normalize_manifest_paths(["ok.md", "new\nline.md"], source="repo at HEAD",
                                 numbered=False)
    assert str(caught.value) == ("repo at HEAD: path 'new\\x0aline.md' holds a control "
                                 "character")


def test_a_manifest_matching_none_of_its_repos_chunks_is_refused_and_an_empty_repo_is_not(
) -> None:
    match = ManifestMatch(frozenset({"lib/x.py", "./lib/y.py"}))
    assert match.refusal("r") is None  # no chunk yet: nothing to match
    for path in ("a.py", "b.py", "c.py", "d.py", None):
        match.observe({"sourcePath": path})
    refusal = match.refusal("r")
    assert refusal is not None
    assert "none of the 5 chunks of repo r" in refusal
    assert "chunk paths: a.py, b.py, c.py;" in refusal and "--force" in refusal
    match.observe({"sourcePath": "lib/x.py"})
    assert match.refusal("r") is None


def test_a_new_manifest_patch_drops_the_old_revision_and_keeps_other_repos() -> None:
    patch = manifest_patch("@acme", RepoManifest("r1", ("a",), 5))
    assert patch == {"tenantId": "acme", "manifests": {"r1": {
        "revision": None, "repoSlug": "r1", "pathsAfterPush": ["a"], "updatedAt": 5}}}


GLOBAL = {"global_gap": 2, "global_grace_ms": 86_400_000, "global_auto_tombstone": True}


@pytest.mark.parametrize(("stored", "gap", "grace", "deletes"), [
    (None, (2, FROM_CONFIG), (86_400_000, FROM_CONFIG), True),
    ({}, (2, FROM_CONFIG), (86_400_000, FROM_CONFIG), True),
    ({"orphanVersionGap": 4, "manifestGraceMs": 0}, (4, FROM_TENANT), (0, FROM_TENANT), True),
    ({"autoTombstone": "off"}, (2, FROM_CONFIG), (86_400_000, FROM_CONFIG), False),
    ({"autoTombstone": "on"}, (2, FROM_CONFIG), (86_400_000, FROM_CONFIG), True),
])
def test_a_tenant_value_overrides_the_global_one_and_an_absent_one_inherits(
    stored: Any, gap: tuple[Any, str], grace: tuple[Any, str], deletes: bool
) -> None:
    policy = resolve_tenant_policy(stored, **GLOBAL)  # type: ignore[arg-type]
    assert (policy.gap, policy.orphan_version_gap.source) == gap
    assert (policy.grace_ms, policy.manifest_grace_ms.source) == grace
    assert policy.deletes is deletes


@pytest.mark.parametrize("setting", ["on", "inherit", None])
def test_a_tenants_on_never_overrides_a_global_false(setting: Any) -> None:
    stored = {"autoTombstone": setting} if setting else {}
    policy = resolve_tenant_policy(stored, global_gap=2, global_grace_ms=0,
                                   global_auto_tombstone=False)
    assert policy.deletes is False


@pytest.mark.parametrize(("stored", "key"), [
    ({"orphanVersionGap": 0.5}, "orphanVersionGap"),
    ({"orphanVersionGap": "3"}, "orphanVersionGap"),
    ({"orphanVersionGap": True}, "orphanVersionGap"),
    ({"manifestGraceMs": -1}, "manifestGraceMs"),
    ({"manifestGraceMs": 1.5}, "manifestGraceMs"),
    ({"autoTombstone": True}, "autoTombstone"),
    ({"autoTombstone": "yes"}, "autoTombstone"),
    ("not a policy", "reconciliationPolicy"),
])
def test_an_invalid_tenant_value_fails_closed_never_falling_back_to_the_global_one(
    stored: Any, key: str
) -> None:
    policy = resolve_tenant_policy(stored, **GLOBAL)  # type: ignore[arg-type]
    assert key in policy.invalid_keys
    if key == "orphanVersionGap":
        assert policy.gap is None
    elif key == "manifestGraceMs":
        assert policy.grace_ms is None
    elif key == "autoTombstone":
        assert policy.deletes is False


def test_an_invalid_global_gap_or_grace_fails_closed_for_a_tenant_that_inherits_it() -> None:
    policy = resolve_tenant_policy({}, global_gap=math.inf, global_grace_ms=math.inf,
                                   global_auto_tombstone=True)
    assert (policy.gap, policy.grace_ms) == (None, None)
    # A tenant's own valid value still counts: it is the tenant's explicit choice.
    own = resolve_tenant_policy({"orphanVersionGap": 3}, global_gap=math.inf,
                                global_grace_ms=math.inf, global_auto_tombstone=True)
    assert own.gap == 3


def test_a_policy_patch_refuses_invalid_values_and_inherit_removes_the_key() -> None:
    assert policy_patch(gap=3.0, grace_ms=0, auto_tombstone="inherit") == {
        "reconciliationPolicy": {"orphanVersionGap": 3, "manifestGraceMs": 0,
                                 "autoTombstone": None}}
    for bad in ({"gap": 0.5}, {"gap": math.nan}, {"grace_ms": -1}, {"auto_tombstone": "yes"}):
        kwargs: dict[str, Any] = {"gap": None, "grace_ms": None, "auto_tombstone": None, **bad}
        with pytest.raises(ValueError):
            policy_patch(**kwargs)


def _settled(max_fraction: float) -> TenantTally:
    manifests = {"r": RepoManifest("r", ("keep.md",), 1_000),
                 "s": RepoManifest("s", ("a.md", "b.md"), 1_000)}
    tally = TenantTally(ScanRules("t", 5, 2, manifests, 0, read_ms=2_000,
                                  max_stale_fraction=max_fraction), cap=10, keep_rows=True)
    rows = [("r-keep", "r", "keep.md", 5), ("r-gone", "r", "gone.md", 5),
            ("r-both", "r", "both.md", 1),  # also three versions behind: stale-actionable
            ("s-a", "s", "a.md", 5), ("s-b", "s", "b.md", 5), ("s-c", "s", "c.md", 5)]
    tally.add_page([ChromaRow(i, {"tenantId": "t", "repoSlug": repo, "sourcePath": path,
                                  "tenantConfigVersion": stamp, "ingestedAt": 500})
                    for i, repo, path, stamp in rows])
    tally.settle()
    tally.settle()  # idempotent
    return tally


def test_a_repo_whose_manifest_orphans_too_much_of_it_is_held_and_the_rest_goes_on() -> None:
    tally = _settled(0.5)
    # r: 2 orphans of 3 chunks (> 0.5) is held; s: 1 of 3 is not.
    assert tally.mismatched_repos == ("r",) and tally.mismatch_held_count == 2
    assert tally.manifest_orphan_count == 3  # still reported
    # Actionable: r-both (by version, its own authority) and s-c; r-gone is held.
    assert tally.actionable_count == 2 and tally.orphan_actionable_count == 1
    assert "r" not in tally.oldest_orphans and len(tally.oldest_orphans["s"]) == 1
    assert len(tally.oldest_stale) == 1
    verdicts = {v.id: v for v in tally.rows}
    assert not verdicts["r-gone"].actionable and verdicts["r-both"].actionable
    assert verdicts["s-c"].orphan_actionable


def test_an_invalid_fraction_holds_every_repo_with_an_orphan() -> None:
    tally = _settled(0.0)  # what an invalid reconciliationMaxStaleFraction reads as
    assert tally.mismatched_repos == ("r", "s")
    assert tally.actionable_count == 1 and tally.orphan_actionable_count == 0
    assert tally.oldest_orphans == {}


def test_manifest_mismatch_is_the_stale_fraction_rule_per_repo_and_fails_closed() -> None:
    assert not manifest_mismatched(orphans=5, chunks=10, max_fraction=0.5)
    assert manifest_mismatched(orphans=6, chunks=10, max_fraction=0.5)
    assert manifest_mismatched(orphans=1, chunks=0, max_fraction=1.0)  # counts disagree
    assert not manifest_mismatched(orphans=0, chunks=0, max_fraction=0.0)
    for bad in (0.0, -1.0, math.nan, math.inf, 1.5):
        assert manifest_mismatched(orphans=1, chunks=100, max_fraction=bad)
