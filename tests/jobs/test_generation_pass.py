"""Generation orphans in a real pass: declarations made with the real commands (`kb-tenants
set-config / set-repo / set-manifest / set-yield`, run as an operator runs them), a real
embedded Chroma and SQLite, and the pass (`reconcile_tick`). The original's daemon cases for
the parser pair (#17770, D1-D6) and for the extraction identity (neo-agent-brain #269), plus
what the port adds: a replacement arriving during the pass never makes an early delete."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from core.base.chroma import VectorStore
from core.base.config.config import Settings
from core.base.runtime.context import TickContext
from core.base.state.graph_db import GraphDB
from core.base.state.state import open_graph
from core.reconcile.explain_tenant import explain_tenant
from core.reconcile.reports.explain import render_plan
from core.reconcile.run_pass import reconcile_tick
from core.suite.tick import run_tick
from tests.support import make_settings, read_archived_chunks, run_module, seed

KB = "neo-knowledge-base"
REPO = "org/repo"
OLD = {"parserId": "p", "parserVersion": "1.0.0"}
DECLARED = {"parserId": "p", "parserVersion": "1.1.0"}
CURRENT, PRIOR = "b" * 64, "a" * 64
BEFORE = int(time.time() * 1000) - 3_600_000  # ingested an hour before the declarations


def chunk(row_id: str, path: str, stamp: Mapping[str, str]) -> tuple[str, dict[str, Any]]:
    return row_id, {"tenantId": "acme", "repoSlug": REPO, "sourcePath": path,
                    "tenantConfigVersion": 1, "ingestedAt": BEFORE, **stamp}


class Operator:
    """The commands, against one config file."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.config = tmp_path / "kb.toml"

    def write_config(self, **toml: Any) -> Settings:
        table = {"dataDir": str(self.tmp_path / "data"), "reconciliationEnabled": True,
                 "reconciliationAutoTombstone": True, "reconciliationMaxStaleFraction": 1.0,
                 "reconciliationManifestGraceMs": 0, **toml}
        lines = ["[knowledgeBase]"] + [f"{k} = {json.dumps(v)}" for k, v in table.items()]
        self.config.write_text("\n".join(lines) + "\n", encoding="utf-8")
        return make_settings(self.tmp_path, **table)

    def tenants(self, *args: str, stdin: str | None = None) -> dict[str, Any]:
        done = run_module("daemons.tenants", *args, "--config", str(self.config), "--json",
                          home=self.tmp_path, stdin=stdin)
        assert done.returncode == 0, done.stderr
        result: dict[str, Any] = json.loads(done.stdout)
        return result


@pytest.fixture
async def stores(tmp_path: Path) -> AsyncIterator[tuple[Operator, TickContext]]:
    operator = Operator(tmp_path)
    settings = operator.write_config()
    graph = await open_graph(settings.state)
    vectors = await VectorStore.open(settings.chroma)
    operator.tenants("set-config", "acme", "--repo-slug", REPO)
    yield operator, TickContext(settings, graph, vectors)
    await vectors.close()
    await graph.close()


def declare_parser(operator: Operator, *extra: str) -> None:
    operator.tenants("set-repo", "acme", "--repo-slug", REPO, "--parser-id", "p", *extra)


def manifest(operator: Operator, *paths: str) -> None:
    operator.tenants("set-manifest", "acme", "--repo-slug", REPO, "--paths-file", "-",
                     "--force", stdin="\n".join(paths) + "\n")


async def one_pass(context: TickContext) -> dict[str, Any]:
    return (await run_tick("reconcile", context, reconcile_tick, dry_run=False)).json()


async def ids_left(vectors: VectorStore) -> set[str]:
    return {r.id for page in [p async for p in vectors.scan(KB, include=())] for r in page}


async def reconcile_details(graph: GraphDB) -> list[dict[str, Any]]:
    rows = await graph.query("SELECT detail FROM kb_ingestion_metrics "
                             "WHERE event_type = 'reconcile'")
    return [json.loads(r[0]) for r in rows]


async def test_d1_red_proof_the_superseded_row_goes_once_replaced(
    stores: tuple[Operator, TickContext]
) -> None:
    operator, context = stores
    await seed(context.vectors, KB, [chunk("old", "a.md", OLD), chunk("new", "a.md", DECLARED)])
    declare_parser(operator, "--parser-version", "1.1.0")
    manifest(operator, "a.md")
    figures = await one_pass(context)
    assert await ids_left(context.vectors) == {"new"}
    [detail] = await reconcile_details(context.graph)
    assert (detail["parserOrphanCount"], detail["extractionOrphanCount"],
            detail["totalOrphanCount"], detail["tombstonedCount"]) == (1, 0, 1, 1)
    archived = {c.row.id for a in figures["archives"] for _, c in read_archived_chunks(Path(a))}
    assert archived == {"old"}


async def test_d2_control_rows_at_the_declared_pair_reclaim_nothing_and_write_no_row(
    stores: tuple[Operator, TickContext]
) -> None:
    operator, context = stores
    await seed(context.vectors, KB, [chunk("current", "a.md", DECLARED)])
    declare_parser(operator, "--parser-version", "1.1.0")
    manifest(operator, "a.md")
    await one_pass(context)
    assert await ids_left(context.vectors) == {"current"}
    assert await reconcile_details(context.graph) == []


async def test_d3_a_parser_id_without_a_version_declares_1_0_0(
    stores: tuple[Operator, TickContext]
) -> None:
    operator, context = stores
    await seed(context.vectors, KB, [chunk("row", "a.md", OLD)])
    declare_parser(operator)
    await one_pass(context)
    assert await ids_left(context.vectors) == {"row"}
    assert await reconcile_details(context.graph) == []


async def test_d4_without_a_declared_pair_nothing_is_classified(
    stores: tuple[Operator, TickContext]
) -> None:
    _, context = stores
    await seed(context.vectors, KB, [chunk("old", "a.md", OLD), chunk("new", "a.md", DECLARED)])
    await one_pass(context)
    assert await ids_left(context.vectors) == {"old", "new"}
    assert await reconcile_details(context.graph) == []


async def test_d5_without_a_manifest_an_unreplaced_row_is_never_deleted(
    stores: tuple[Operator, TickContext]
) -> None:
    operator, context = stores
    await seed(context.vectors, KB, [chunk("old", "gone.md", OLD)])
    declare_parser(operator, "--parser-version", "1.1.0")
    await one_pass(context)
    assert await ids_left(context.vectors) == {"old"}
    [detail] = await reconcile_details(context.graph)
    assert (detail["parserOrphanCount"], detail["actionableCount"]) == (1, 0)


async def test_d6_with_auto_tombstone_off_the_orphan_is_reported_not_deleted(
    stores: tuple[Operator, TickContext]
) -> None:
    operator, context = stores
    off = TickContext(operator.write_config(reconciliationAutoTombstone=False),
                      context.graph, context.vectors)
    await seed(context.vectors, KB, [chunk("old", "a.md", OLD), chunk("new", "a.md", DECLARED)])
    declare_parser(operator, "--parser-version", "1.1.0")
    manifest(operator, "a.md")
    await one_pass(off)
    assert await ids_left(context.vectors) == {"old", "new"}
    [detail] = await reconcile_details(context.graph)
    assert (detail["parserOrphanCount"], detail["tombstonedCount"]) == (1, 0)


async def test_an_unyielded_parser_orphan_goes_without_a_replacement_and_explain_says_why(
    stores: tuple[Operator, TickContext]
) -> None:
    operator, context = stores
    await seed(context.vectors, KB, [chunk("gone", "vendor/x.md", OLD),
                                     chunk("keep", "a.md", DECLARED)])
    declare_parser(operator, "--parser-version", "1.1.0")
    manifest(operator, "a.md")
    plan = await explain_tenant(context, "acme")
    [line] = plan.generation_orphans
    assert (line.id, line.tier, line.actionable) == ("gone", "unyielded", True)
    assert "no longer yields" in line.why
    shown = render_plan(plan)  # the text explain prints lists it with its tier and why
    assert "Generation orphans (1)" in shown
    section = shown[shown.index("Generation orphans (1)"):shown.index("Chunks (")]
    rows = [text for text in section.splitlines() if text.startswith("gone ")]
    assert len(rows) == 1, section
    assert "unyielded" in rows[0] and "vendor/x.md" in rows[0], section
    await one_pass(context)
    assert await ids_left(context.vectors) == {"keep"}


def xchunk(row_id: str, path: str, identity: str) -> tuple[str, dict[str, Any]]:
    return chunk(row_id, path, {"extractionIdentity": identity})


def declare_identity(operator: Operator, yielded: tuple[str, ...] | None,
                     identity: str = CURRENT) -> None:
    operator.tenants("set-repo", "acme", "--repo-slug", REPO, "--extraction-identity", CURRENT)
    manifest(operator, "a.md", "b.md")
    if yielded is not None:
        operator.tenants("set-yield", "acme", "--repo-slug", REPO, "--extraction-identity",
                         identity, "--paths-file", "-", stdin="\n".join(yielded) + "\n")


async def test_extraction_a_superseded_generation_goes_after_its_replacement(
    stores: tuple[Operator, TickContext]
) -> None:
    operator, context = stores
    await seed(context.vectors, KB, [xchunk("old", "a.md", PRIOR), xchunk("new", "a.md", CURRENT)])
    declare_identity(operator, ("a.md",))
    await one_pass(context)
    assert await ids_left(context.vectors) == {"new"}
    [detail] = await reconcile_details(context.graph)
    assert (detail["extractionOrphanCount"], detail["parserOrphanCount"]) == (1, 0)


async def test_extraction_a_completed_exclusion_goes_while_the_path_is_still_pushed(
    stores: tuple[Operator, TickContext]
) -> None:
    operator, context = stores
    await seed(context.vectors, KB, [xchunk("old", "a.md", PRIOR)])
    declare_identity(operator, ("b.md",))  # a.md is in pathsAfterPush, no longer yielded
    await one_pass(context)
    assert await ids_left(context.vectors) == set()


async def test_extraction_a_manifest_without_a_snapshot_deletes_nothing(
    stores: tuple[Operator, TickContext]
) -> None:
    operator, context = stores
    await seed(context.vectors, KB, [xchunk("old", "a.md", PRIOR)])
    declare_identity(operator, None)
    await one_pass(context)
    assert await ids_left(context.vectors) == {"old"}


async def test_extraction_a_snapshot_of_a_prior_identity_deletes_nothing(
    stores: tuple[Operator, TickContext]
) -> None:
    operator, context = stores
    await seed(context.vectors, KB, [xchunk("old", "a.md", PRIOR)])
    declare_identity(operator, ("b.md",), identity=PRIOR)
    await one_pass(context)
    assert await ids_left(context.vectors) == {"old"}


async def test_extraction_with_auto_tombstone_off_the_count_is_reported(
    stores: tuple[Operator, TickContext]
) -> None:
    operator, context = stores
    off = TickContext(operator.write_config(reconciliationAutoTombstone=False),
                      context.graph, context.vectors)
    await seed(context.vectors, KB, [xchunk("old", "a.md", PRIOR)])
    declare_identity(operator, ("b.md",))
    await one_pass(off)
    assert await ids_left(context.vectors) == {"old"}
    [detail] = await reconcile_details(context.graph)
    assert (detail["extractionOrphanCount"], detail["tombstonedCount"]) == (1, 0)


async def test_a_replacement_arriving_during_the_pass_never_makes_an_early_delete(
    stores: tuple[Operator, TickContext], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The replacement is written after the pass began reading the tenant but before its
    # page is read: the pass sees it, yet it did not exist when the pass started, so the old
    # row waits for the next pass (which deletes it).
    operator, context = stores
    await seed(context.vectors, KB, [chunk("old", "a.md", OLD)])
    declare_parser(operator, "--parser-version", "1.1.0")
    manifest(operator, "a.md")
    real_scan = context.vectors.scan

    async def scan_after_a_write(name: str, **kwargs: Any) -> AsyncIterator[Any]:
        if kwargs.get("where") == {"tenantId": "acme"}:
            await seed(context.vectors, KB, [(
                "new", {**chunk("new", "a.md", DECLARED)[1],
                        "ingestedAt": int(time.time() * 1000) + 1})])
        async for page in real_scan(name, **kwargs):
            yield page

    monkeypatch.setattr(context.vectors, "scan", scan_after_a_write)
    figures = await one_pass(context)
    assert await ids_left(context.vectors) == {"old", "new"}
    assert figures["tenants"][0]["parserOrphanCount"] == 1
    monkeypatch.undo()
    await asyncio.sleep(0.01)  # the next pass reads after the replacement's ingestedAt
    await one_pass(context)
    assert await ids_left(context.vectors) == {"new"}


async def test_set_repo_and_set_yield_refuse_bad_input_with_one_line_and_change_nothing(
    stores: tuple[Operator, TickContext]
) -> None:
    operator, context = stores
    for args in (("set-repo", "acme", "--repo-slug", REPO, "--parser-version", "1"),
                 ("set-repo", "acme", "--repo-slug", REPO, "--extraction-identity", "XY"),
                 ("set-repo", "nobody", "--repo-slug", REPO, "--parser-id", "p"),
                 ("set-yield", "acme", "--repo-slug", REPO, "--extraction-identity", CURRENT,
                  "--paths-file", "-")):
        done = run_module("daemons.tenants", *args, "--config", str(operator.config),
                          home=operator.tmp_path, stdin="a.md\n")
        assert done.returncode == 2, (args, done.stderr)
        assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    rows = await context.graph.query("SELECT properties FROM nodes WHERE id = 'kb-config:acme'")
    assert "tenantRepos" not in json.loads(rows[0][0])
