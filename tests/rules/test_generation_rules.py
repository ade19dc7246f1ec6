"""The generation classifier (pure), as the original's engine specs state it: the parser pair
(#17395, cases P1-P9), the declared pairs read from `tenantRepos` (D7), and the successor's
extraction identity (neo-agent-brain #269) with its yield authority and freshness fence."""

from __future__ import annotations

from typing import Any

from core.base.rules.rows import ChromaRow
from core.reconcile.rules.generations.extraction_snapshot import ExtractionSnapshot
from core.reconcile.rules.generations.orphans import (
    REASON_EXTRACTION,
    TIER_SUPERSEDED,
    TIER_UNYIELDED,
    declared_extractions,
    declared_parsers,
    repo_generation,
)
from tests.oracles import (
    diff_tenant_chunks,
    diff_tenant_extraction_identity,
    diff_tenant_parser_identity,
)

DECLARED = {"parserId": "docker-mcp-source", "parserVersion": "1.1.0"}
SUPERSED = {"parserId": "docker-mcp-source", "parserVersion": "1.0.0"}
REPO = "org/repo"


def row(row_id: str, path: str, parser: dict[str, str] = SUPERSED, tenant: str = "t1",
        repo: str = REPO, config_version: int = 7) -> ChromaRow:
    return ChromaRow(row_id, {"tenantId": tenant, "repoSlug": repo, "sourcePath": path,
                              **parser, "tenantConfigVersion": config_version})


def parser_diff(rows: list[ChromaRow], yielded: dict[str, list[str]] | None = None,
                declared: dict[str, Any] | None = None) -> Any:
    return diff_tenant_parser_identity(rows, "t1", {REPO: DECLARED} if declared is None
                                       else declared, yielded)


def test_p1_red_proof_a_superseded_row_with_its_replacement_is_actionable() -> None:
    diff = parser_diff([row("old", "a.md"), row("new", "a.md", DECLARED)], {REPO: ["a.md"]})
    assert diff.orphan_count == 1
    assert (diff.orphans[0].id, diff.orphans[0].tier) == ("old", TIER_SUPERSEDED)
    assert diff.actionable_ids == ("old",)


def test_p2_control_rows_at_the_declared_pair_are_never_orphans() -> None:
    diff = parser_diff([row("a", "a.md", DECLARED), row("b", "b.md", DECLARED)],
                       {REPO: ["a.md", "b.md"]})
    assert (diff.orphan_count, diff.actionable_count) == (0, 0)


def test_p3_no_hole_a_yielded_path_waits_for_its_replacement() -> None:
    diff = parser_diff([row("old", "pending.md")], {REPO: ["pending.md"]})
    assert (diff.orphan_count, diff.orphans[0].tier, diff.actionable_ids) == (
        1, TIER_SUPERSEDED, ())


def test_p4_unyielded_a_path_no_longer_yielded_is_actionable_at_once() -> None:
    diff = parser_diff([row("gone", "vendor/x.md")], {REPO: ["a.md"]})
    assert (diff.orphans[0].tier, diff.actionable_ids) == (TIER_UNYIELDED, ("gone",))


def test_p5_the_parser_signal_is_independent_of_the_config_version() -> None:
    rows = [row("old", "a.md"), row("new", "a.md", DECLARED)]
    assert diff_tenant_chunks(rows, current_version=7).stale_count == 0
    assert parser_diff(rows).actionable_ids == ("old",)


def test_p6_tenant_containment_another_tenants_rows_are_never_classified() -> None:
    rows = [row("a-old", "a.md"), row("a-new", "a.md", DECLARED),
            row("b-old", "a.md", tenant="t2"), row("b-new", "a.md", DECLARED, tenant="t2")]
    diff = parser_diff(rows)
    assert diff.actionable_ids == ("a-old",)
    assert all(not o.id.startswith("b-") for o in diff.orphans)


def test_p7_a_row_without_a_parser_stamp_is_never_an_orphan() -> None:
    legacy = ChromaRow("legacy", {"tenantId": "t1", "repoSlug": REPO, "sourcePath": "a.md",
                                  "tenantConfigVersion": 7})
    assert parser_diff([legacy]).orphan_count == 0


def test_p8_an_unresolvable_declared_pair_classifies_nothing() -> None:
    assert parser_diff([row("old", "a.md")], {REPO: ["a.md"]}, declared={}).orphan_count == 0
    assert parser_diff([row("old", "a.md")],
                       declared={REPO: {"parserId": "p"}}).orphan_count == 0


def test_p9_without_a_yielded_set_the_tier_is_superseded_and_nothing_is_actionable() -> None:
    diff = parser_diff([row("old", "a.md")])
    assert (diff.orphans[0].tier, diff.actionable_ids) == (TIER_SUPERSEDED, ())


def test_a_newer_stamp_than_declared_is_an_orphan_too_no_semver_guessing() -> None:
    newer = {"parserId": "docker-mcp-source", "parserVersion": "2.0.0"}
    assert parser_diff([row("newer", "a.md", newer)]).orphan_count == 1


def test_d7_declared_pairs_from_tenant_repos_default_the_version_and_skip_the_unjudgeable(
) -> None:
    repos = [{"repoSlug": "org/versioned", "parserId": "p", "parserVersion": "2.0.0"},
             {"repoSlug": "org/unversioned", "parserId": "p"}, {"repoSlug": "org/no-parser"},
             {"parserId": "p", "parserVersion": "1.0.0"}]
    assert declared_parsers(repos) == {"org/versioned": ("p", "2.0.0"),
                                       "org/unversioned": ("p", "1.0.0")}


def test_declared_identities_keep_only_a_slug_with_a_64_hex_digest() -> None:
    repos = [{"repoSlug": "org/valid", "extractionIdentity": "c" * 64},
             {"repoSlug": "org/missing"},
             {"repoSlug": "org/invalid", "extractionIdentity": "not-a-digest"},
             {"extractionIdentity": "d" * 64}]
    assert declared_extractions(repos) == {"org/valid": ("c" * 64,)}


def test_a_parser_id_without_a_version_declares_1_0_0() -> None:
    entry = repo_generation(REPO, parser_id="p", parser_version=None, extraction_identity=None)
    assert entry.stored() == {"repoSlug": REPO, "parserId": "p", "parserVersion": "1.0.0"}


# The successor's engine spec (0726a672): CURRENT = b*64, PRIOR = a*64, snapshot at 2000,
# rows at 1000 unless a case says otherwise.
CURRENT, PRIOR = "b" * 64, "a" * 64


def xrow(row_id: str, path: str = "src/live.mjs", *, identity: str | None = PRIOR,
         ingested: int = 1000) -> ChromaRow:
    metadata: dict[str, Any] = {"tenantId": "t1", "repoSlug": REPO, "sourcePath": path,
                                "ingestedAt": ingested}
    if identity is not None:
        metadata["extractionIdentity"] = identity
    return ChromaRow(row_id, metadata)


def xdiff(rows: list[ChromaRow], yielded: list[str] | None,
          identity: str = CURRENT) -> Any:
    snapshot = None if yielded is None else ExtractionSnapshot(tuple(yielded), identity, 2000)
    return diff_tenant_extraction_identity(rows, "t1", {REPO: (CURRENT,)}, {REPO: snapshot})


def test_exclusion_retires_a_row_unyielded_and_actionable() -> None:
    diff = xdiff([xrow("old")], [])
    [orphan] = diff.orphans
    assert (orphan.tier, orphan.reason, diff.actionable_ids) == (
        TIER_UNYIELDED, REASON_EXTRACTION, ("old",))


def test_still_yielded_content_waits_until_replaced() -> None:
    waiting = xdiff([xrow("old")], ["src/live.mjs"])
    assert (waiting.orphans[0].tier, waiting.actionable_ids) == (TIER_SUPERSEDED, ())
    replaced = xdiff([xrow("old"), xrow("new", identity=CURRENT, ingested=2100)],
                     ["src/live.mjs"])
    assert replaced.actionable_ids == ("old",)


def test_a_missing_snapshot_makes_nothing_actionable() -> None:
    assert xdiff([xrow("old", "src/gone.mjs")], None).actionable_ids == ()


def test_a_snapshot_of_the_prior_identity_is_unknown_not_empty() -> None:
    assert xdiff([xrow("old", "src/gone.mjs")], [], identity=PRIOR).actionable_ids == ()


def test_a_row_newer_than_the_authority_is_never_unyielded() -> None:
    # The successor's fence: only the row ingested before the snapshot (1500 <= 2000) goes.
    diff = xdiff([xrow("before", "src/gone.mjs", ingested=1500),
                  xrow("after", "src/gone.mjs", ingested=2500)], [])
    assert diff.actionable_ids == ("before",)
    assert {o.id: o.tier for o in diff.orphans} == {"before": TIER_UNYIELDED,
                                                    "after": TIER_SUPERSEDED}


def test_an_unstamped_legacy_row_is_never_a_generation_orphan() -> None:
    # CONTRACT: a chunk without the stamp is never a generation orphan (the successor
    # classified unstamped rows inside the fence; README "Differences from the original").
    assert xdiff([xrow("legacy", "src/gone.mjs", identity=None, ingested=1500)],
                 []).orphan_count == 0


def test_a_malformed_identity_stamp_is_skipped() -> None:
    assert xdiff([xrow("bad", identity="not-a-digest")], []).orphan_count == 0
