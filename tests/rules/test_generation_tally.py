"""`core.reconcile.rules.generations.tally`: a pass's generation rules over its pages, the union
with
the other rules, and the deletion jobs it plans (pure)."""

from __future__ import annotations

from core.reconcile.rules.generations.orphans import (
    KIND_PARSER,
    TIER_SUPERSEDED,
    TIER_UNYIELDED,
    tenant_generation_rules,
)
from core.reconcile.rules.generations.tally import GenerationJobKey, GenerationTally
from core.reconcile.rules.manifests import RepoManifest

REPO = "org/repo"
OLD = {"parserId": "p", "parserVersion": "1.0.0"}
NEW = {"parserId": "p", "parserVersion": "1.1.0"}
READ_MS = 10_000


def tally() -> GenerationTally:
    rules = tenant_generation_rules([{"repoSlug": REPO, "parserId": "p", "parserVersion": "1.1.0"}],
                             {REPO: RepoManifest(REPO, ("a.md", "b.md"), updated_at=5_000)})
    return GenerationTally("t1", rules, READ_MS, keep_rows=True)


def chunk(path: str, stamp: dict[str, str], ingested: int | str = 1_000,
          tenant: str = "t1") -> dict[str, object]:
    return {"tenantId": tenant, "repoSlug": REPO, "sourcePath": path, "ingestedAt": ingested,
            **stamp}


def test_jobs_are_planned_per_tier_and_each_row_counts_once() -> None:
    t = tally()
    t.observe("old-a", chunk("a.md", OLD), other=None)          # superseded, replaced
    t.observe("new-a", chunk("a.md", NEW), other=None)
    t.observe("old-b", chunk("b.md", OLD), other=None)          # superseded, no replacement
    t.observe("old-x", chunk("x.md", OLD), other=None)          # unyielded (not in manifest)
    t.observe("theirs", chunk("a.md", OLD, tenant="t2"), other=None)
    t.settle(mismatched_repos=())
    assert t.parser_orphan_count == 3 and t.extra_orphans == 3
    assert t.extra_actionable == 2 and t.extra_held == 0
    stamp = ("p", "1.0.0")
    assert t.deletable == {
        GenerationJobKey(KIND_PARSER, REPO, stamp, TIER_SUPERSEDED): [(1_000, "old-a", "a.md")],
        GenerationJobKey(KIND_PARSER, REPO, stamp, TIER_UNYIELDED): [(1_000, "old-x", "x.md")],
    }
    assert t.orphan_ids == {"old-a", "old-b", "old-x"}


def test_a_replacement_newer_than_the_read_does_not_make_an_old_row_deletable() -> None:
    t = tally()
    t.observe("old-a", chunk("a.md", OLD), other=None)
    t.observe("new-a", chunk("a.md", NEW, ingested=READ_MS + 1), other=None)
    t.settle(mismatched_repos=())
    assert t.parser_orphan_count == 1 and t.deletable == {}


def test_an_orphan_without_a_numeric_ingested_at_is_never_planned_for_deletion() -> None:
    t = tally()
    t.observe("old-x", chunk("x.md", OLD, ingested=4_000), other=None)
    t.observe("old-y", chunk("y.md", OLD, ingested="2026-01-01T00:00:00Z"), other=None)
    t.settle(mismatched_repos=())
    keys = list(t.deletable)
    assert [k.tier for k in keys] == [TIER_UNYIELDED]
    assert [row_id for _, row_id, _ in t.deletable[keys[0]]] == ["old-x"]


def test_the_store_predicate_names_the_tenant_repo_and_exact_old_stamp() -> None:
    t = tally()
    t.observe("old-x", chunk("x.md", OLD), other=None)
    t.settle(mismatched_repos=())
    [key] = t.deletable
    clauses = t.clauses(key)
    assert {"tenantId": "t1"} in clauses and {"repoSlug": REPO} in clauses
    assert {"ingestedAt": {"$lte": 5_000}} in clauses  # the unyielded tier's fence
    rule = t.may_delete(key)
    assert rule(chunk("x.md", OLD)) and not rule(chunk("x.md", NEW))
