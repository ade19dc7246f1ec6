"""`python -m daemons.demo`: a dataset with every case the daemons handle, safe to re-run."""

from __future__ import annotations

import fcntl
import json
import os
import re
import sqlite3
import subprocess
import sys
import time
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from core.base.chroma import VectorStore
from core.base.rules.graph_schema import NeoEra
from core.drain.rules.queue_lines import EdgeLine, MalformedLine, parse_line
from core.reconcile.rules.manifests import PathCoverage
from core.suite.demo.dataset import DEMO_REVISION, build_demo_dataset, synthetic_embedding
from core.suite.demo.footprint import (
    MAX_TENANT_NODES,
    DemoFootprint,
    FootprintBuilder,
    changes,
    describe,
)
from tests.neo_graphs import (
    assert_original_schema_unchanged,
    build_neo_graph,
    documents,
    original_entries,
)
from tests.oracles import diff_tenant_manifest
from tests.support import REPO, child_env, make_settings, run_module, seed

PROVENANCE = {"MENTIONED_IN", "DISCUSSED_IN", "REFERENCED_BY"}
#: git as an operator's, without their own configuration.
GIT_ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t", "GIT_CONFIG_GLOBAL": "/dev/null",
           "GIT_CONFIG_NOSYSTEM": "1"}


def run_demo(folder: Path) -> subprocess.CompletedProcess[str]:
    config = folder / "kb.toml"
    if not config.exists():
        config.write_text('[knowledgeBase]\ndataDir = "data"\n')
    return run_module("daemons.demo", "--config", str(config), home=folder / "home")


def test_the_dataset_holds_every_case_and_its_queue_has_no_clock_in_it() -> None:
    dataset = build_demo_dataset(now_ms=1_800_000_000_000)
    parsed = [parse_line(line) for line in dataset.queue_lines]
    edges = [p for p in parsed if isinstance(p, EdgeLine)]
    assert sum(isinstance(p, MalformedLine) for p in parsed) == 3
    assert {e.relationship for e in edges} == PROVENANCE
    memories = {f"memory:{row.id}" for row in dataset.memories}
    row_targets = [n for e in edges for n in (e.source, e.target) if n.startswith("memory:")]
    assert any(n not in memories for n in row_targets), "a hallucinated target"
    assert any(n in memories for n in row_targets)
    summarized = {row.metadata["sessionId"] for row in dataset.summaries}
    sessions = {row.metadata["sessionId"] for row in dataset.memories}
    assert sessions - summarized, "sessions without a summary"
    assert len(dataset.tenants) == 4
    assert len({row.metadata["tenantConfigVersion"] for row in dataset.chunks}) >= 2
    # Built again at another time: the same queue bytes, so a re-run is recognized as applied.
    assert build_demo_dataset(now_ms=1_900_000_000_000).queue_lines == dataset.queue_lines
    assert synthetic_embedding("x") == synthetic_embedding("x") != synthetic_embedding("y")


def test_the_force_pushed_tenant_has_two_orphaned_paths_and_one_missing_path() -> None:
    dataset = build_demo_dataset(now_ms=1_800_000_000_000)
    [(tenant, manifest)] = dataset.manifests
    rows = [r for r in dataset.chunks if r.metadata["tenantId"] == tenant]
    diff = diff_tenant_manifest(rows, {manifest.repo_slug: manifest})
    assert {o.source_path for o in diff.manifest_orphans} == {"src/old_index.py",
                                                              "src/legacy/cache.py"}
    coverage = PathCoverage({manifest.repo_slug: manifest})
    for row in rows:
        coverage.observe(row.metadata)
    assert coverage.missing() == {manifest.repo_slug: ("src/index.py",)}


def footprint_of(nodes: list[tuple[Any, ...]], edges: list[tuple[Any, ...]],
                 queue: str | None = "q1") -> DemoFootprint:
    builder = FootprintBuilder()
    builder.add_nodes(nodes)
    builder.add_edges(edges)
    builder.add_file("queue", queue)
    return builder.footprint()


def demo_like_nodes(*, policy: Any = None, paths: tuple[str, ...] = ("a.md",),
                    yielded: tuple[str, ...] = ("a.md",)) -> list[tuple[Any, ...]]:
    config = {"version": 1, "repoSlug": "hooli/search",
              **({"reconciliationPolicy": policy} if policy is not None else {})}
    manifest = {"manifests": {"hooli/search": {
        "repoSlug": "hooli/search", "pathsAfterPush": list(paths), "updatedAt": 1,
        "extractionSnapshot": {"yieldedSourcePaths": list(yielded), "updatedAt": 1}}}}
    return [("CONCEPT:a", "CONCEPT", "{}", ""),
            ("kb-config:hooli", "KnowledgeBaseTenantConfig", json.dumps(config), ""),
            ("kb-manifest:hooli", "KnowledgeBaseTenantManifest", json.dumps(manifest), "")]


EDGES = [("CONCEPT:a", "CONCEPT:a", "R", 1.0, "{}")]


def test_a_footprint_names_the_tenant_part_that_changed_where_counts_stay_the_same() -> None:
    then = footprint_of(demo_like_nodes(), EDGES)
    assert changes(then, footprint_of(demo_like_nodes(), EDGES)) == []
    assert DemoFootprint.from_json(json.loads(json.dumps(then.to_json()))) == then
    assert changes(then, footprint_of(demo_like_nodes(policy={"orphanVersionGap": 5}),
                                      EDGES)) == ["tenant hooli's policy was set"]
    assert changes(footprint_of(demo_like_nodes(policy={"orphanVersionGap": 5}), EDGES),
                   footprint_of(demo_like_nodes(policy={"orphanVersionGap": 6}), EDGES)) == [
        "tenant hooli's policy changed"]
    assert changes(then, footprint_of(demo_like_nodes(paths=("b.md",)), EDGES)) == [
        "tenant hooli's manifest of hooli/search changed"]
    assert changes(then, footprint_of(demo_like_nodes(yielded=()), EDGES)) == [
        "tenant hooli's yield snapshot of hooli/search changed"]
    assert changes(then, footprint_of(demo_like_nodes()[:2], EDGES)) == [
        "tenant hooli's manifest node was removed"]
    reinforced = [("CONCEPT:a", "CONCEPT:a", "R", 1.5, "{}")]
    assert changes(then, footprint_of(demo_like_nodes(), reinforced)) == [
        "the graph's edges changed (1 then, 1 now)"]
    assert changes(then, footprint_of(demo_like_nodes(), EDGES, queue=None)) == [
        "the lazy-edge queue changed"]
    renamed = [(*row[:3], row[3]) if row[0] != "CONCEPT:a" else ("CONCEPT:a", "X", "{}", "")
               for row in demo_like_nodes()]
    assert changes(then, footprint_of(renamed, EDGES)) == [
        "the graph's nodes changed (3 then, 3 now)"]


def test_a_footprint_sees_a_change_past_its_named_tenants_and_names_only_the_first_few() -> None:
    many = [(f"kb-config:t{n:05}", "KnowledgeBaseTenantConfig", '{"version": 1}', "")
            for n in range(MAX_TENANT_NODES + 5)]
    then = footprint_of(many, [])
    assert len(then.tenant_nodes) == MAX_TENANT_NODES
    later = [*many[:-1], (many[-1][0], many[-1][1], '{"version": 2}', "")]
    assert changes(then, footprint_of(later, [])) == [
        f"the graph's nodes changed ({len(many)} then, {len(many)} now)"]
    assert describe(["a", "b", "c", "d", "e"]) == "a; b; c; and 2 more"
    with pytest.raises(ValueError, match="not a footprint"):
        DemoFootprint.from_json({"nodes": 1, "edges": 0, "queue_bytes": 0})


def graph_facts(folder: Path) -> dict[str, Any]:
    conn = sqlite3.connect(f"file:{folder / 'data' / 'graph.sqlite'}?mode=ro", uri=True)
    try:
        return {
            "edges": sorted(conn.execute(
                "SELECT source, target, relationship, weight FROM edges").fetchall()),
            "nodes": conn.execute("SELECT COUNT(*) FROM nodes").fetchone()[0],
            "versions": sorted(conn.execute(
                "SELECT id, json_extract(properties, '$.version') FROM nodes "
                "WHERE label = 'KnowledgeBaseTenantConfig'").fetchall()),
        }
    finally:
        conn.close()


def story(stdout: str) -> str:
    """The demo's output with what must differ between runs masked: times and durations."""
    masked = re.sub(r"\d{4}-\d\d-\d\dT[\d:.]+Z( \(\d+[smhd] ago\))?", "<time>", stdout)
    masked = re.sub(r"\b[\d,.]+ m?s\b", "<took>", masked)
    masked = re.sub(r"finished in [\d.]+s", "finished in <took>", masked)
    # Table columns are as wide as their widest cell: a longer duration widens them, and
    # the rule under the headings with them.
    masked = re.sub("─+", "─", masked)
    return "\n".join(" ".join(line.split()) for line in masked.splitlines())


def test_five_runs_tell_the_same_story(tmp_path: Path) -> None:
    runs = [run_demo(tmp_path) for _ in range(5)]
    assert [r.returncode for r in runs] == [0] * 5, runs[-1].stderr
    first = runs[0].stdout
    assert "13 queue lines" in first and "dead letters: 3 (malformed 3)" in first
    assert "8 linked" in first and "2 re-queued" in first and "6 stale chunks found" in first
    for later in runs[1:]:
        assert story(later.stdout) == story(first)
    facts = graph_facts(tmp_path)
    queue = tmp_path / "data" / "memory-core" / "lazy-edges.jsonl"
    requeued = [json.loads(line) for line in queue.read_text().splitlines()]
    assert len(requeued) == 2 and all(r["_drain"]["attempts"] == 1 for r in requeued), \
        "the re-queued lines never age toward the dead-letter file"
    assert facts["nodes"] == 31 and len(facts["edges"]) == 20
    assert not (tmp_path / "home").exists(), "nothing may be written under $HOME"


def assert_refused(done: subprocess.CompletedProcess[str], *named: str) -> None:
    """Exit 2 with one line on stderr that says what is not the demo's, names each of
    `named`, and says where to run instead."""
    assert done.returncode == 2, (done.returncode, done.stderr[-2000:])
    (line,) = done.stderr.strip().splitlines()
    assert "the demo changes nothing there" in line and "in a folder of its own" in line, line
    for part in named:
        assert part in line, (part, line)
    assert done.stdout == ""


def folder_state(folder: Path) -> dict[str, Any]:
    """Every node and edge as stored, and the queue files' bytes."""
    conn = sqlite3.connect(f"file:{folder / 'data' / 'graph.sqlite'}?mode=ro", uri=True)
    with closing(conn):
        graph = {"nodes": sorted(conn.execute("SELECT * FROM nodes")),
                 "edges": sorted(conn.execute("SELECT * FROM edges"))}
    queues = folder / "data" / "memory-core"
    return {**graph, "files": {p.name: p.read_bytes() for p in sorted(queues.rglob("*"))
                               if p.is_file()}}


def test_a_folder_someone_else_wrote_to_is_refused_and_left_as_it_is(tmp_path: Path) -> None:
    assert run_demo(tmp_path).returncode == 0
    queue = tmp_path / "data" / "memory-core" / "lazy-edges.jsonl"
    produced = b'{"source":"CONCEPT:real","target":"CONCEPT:work","relationship":"R"}\n'
    with queue.open("ab") as stream:
        stream.write(produced)
    before = folder_state(tmp_path)
    again = run_demo(tmp_path)
    assert_refused(again, f"{tmp_path / 'data'} holds data the demo did not write",
                   "the lazy-edge queue changed since its last run", "--config")
    assert folder_state(tmp_path) == before, "nothing changed: the producer's line is kept"


def _blocked_on(inode: int) -> bool:
    """Whether a process waits for an flock on the file of this inode (/proc/locks: "->")."""
    return any("->" in line and line.split()[-3].endswith(f":{inode}")
               for line in Path("/proc/locks").read_text().splitlines())


def test_a_line_appended_while_the_demo_waits_to_reset_is_seen_and_kept(
    tmp_path: Path,
) -> None:
    """A producer holds the queue's lock (mid-append) when the demo, having found its folder
    as it left it, comes to reset it: the demo waits for the lock, compares the queue again,
    sees the producer's line and refuses; the line is kept."""
    assert run_demo(tmp_path).returncode == 0
    queue = tmp_path / "data" / "memory-core" / "lazy-edges.jsonl"
    produced = b'{"source":"CONCEPT:real","target":"CONCEPT:work","relationship":"R"}\n'
    producer = os.open(queue, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        fcntl.flock(producer, fcntl.LOCK_EX)
        demo = subprocess.Popen(
            [sys.executable, "-m", "daemons.demo", "--config", str(tmp_path / "kb.toml")],
            cwd=REPO, env=child_env(tmp_path / "home"), stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 60
        while not _blocked_on(os.fstat(producer).st_ino):
            assert demo.poll() is None, demo.communicate()
            assert time.monotonic() < deadline, "the demo never waited for the queue's lock"
            time.sleep(0.05)
        os.write(producer, produced)
    finally:
        os.close(producer)
    out, err = demo.communicate(timeout=120)
    assert_refused(subprocess.CompletedProcess(demo.args, demo.returncode, out, err),
                   "its queue files changed since its last run")
    assert queue.read_bytes().endswith(produced), "the producer's line is kept"


def kb_tenants(config: Path, *args: str, home: Path) -> subprocess.CompletedProcess[str]:
    """`kb-tenants ARGS --config CONFIG`, which must succeed."""
    done = run_module("daemons.tenants", *args, "--config", str(config), home=home)
    assert done.returncode == 0, done.stderr[-2000:]
    return done


def operator_sets_hooli(config: Path, repo: Path) -> dict[str, Any]:
    """What an operator does between two demo runs: a policy for the demo's force-pushed
    tenant, and its manifest read from a git work tree of 4 paths; `kb-tenants show` after."""
    repo.mkdir()
    for name in ("README.md", "docs/guide.md", "src/index.py", "src/new.py"):
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(name)
    for words in (("init", "-q", "-b", "main"), ("add", "-A"), ("commit", "-qm", "push")):
        subprocess.run(["git", *words], cwd=repo, check=True, capture_output=True,
                       env={**child_env(repo.parent / "home"), **GIT_ENV})
    home = repo.parent / "home"
    kb_tenants(config, "set-policy", "hooli", "--orphan-version-gap", "7",
               "--auto-tombstone", "off", home=home)
    kb_tenants(config, "set-manifest", "hooli", "--repo-slug", "hooli/search",
               "--from-git", str(repo), home=home)
    shown: dict[str, Any] = json.loads(kb_tenants(config, "show", "hooli", "--json",
                                                  home=home).stdout)
    [manifest] = shown["manifests"]
    assert (manifest["repoSlug"], manifest["pathCount"]) == ("hooli/search", 4), \
        "the operator's manifest, not the demo's 3 paths"
    assert manifest["revision"] != DEMO_REVISION
    assert shown["policy"]["orphanVersionGap"] == {"source": "tenant policy", "value": 7}
    assert shown["policy"]["autoTombstoneSetting"] == "off"
    return shown


#: What the refusal names after `operator_sets_hooli`.
OPERATOR_CHANGES = ("tenant hooli's policy was set",
                    "tenant hooli's manifest of hooli/search changed", "since its last run")


def test_a_demo_rerun_changes_neither_the_policy_nor_the_manifest_an_operator_set(
        tmp_path: Path) -> None:
    assert run_demo(tmp_path).returncode == 0
    shown = operator_sets_hooli(tmp_path / "kb.toml", tmp_path / "hooli-search")
    before = folder_state(tmp_path)
    again = run_demo(tmp_path)
    assert_refused(again, *OPERATOR_CHANGES)
    assert json.loads(kb_tenants(tmp_path / "kb.toml", "show", "hooli", "--json",
                                 home=tmp_path / "home").stdout) == shown
    assert folder_state(tmp_path) == before


def test_a_folder_with_an_older_or_torn_footprint_is_refused(tmp_path: Path) -> None:
    queue = tmp_path / "data" / "memory-core" / "lazy-edges.jsonl"
    queue.parent.mkdir(parents=True)
    queue.write_text('{"source":"CONCEPT:a","target":"CONCEPT:b","relationship":"R"}\n')
    footprint = tmp_path / "data" / ".kb-demo.json"
    footprint.write_text('{"nodes": 0, "edges": 0, "queue_bytes": 64, "draining_bytes": 0, '
                         '"dead_letter_bytes": 0}\n')
    refused = run_demo(tmp_path)
    assert_refused(refused, "its footprint .kb-demo.json is not one this demo wrote")
    assert [p.name for p in queue.parent.iterdir()] == ["lazy-edges.jsonl"]


async def test_the_demo_refuses_a_store_that_holds_other_data(tmp_path: Path) -> None:
    (tmp_path / "kb.toml").write_text('[knowledgeBase]\ndataDir = "data"\n')
    settings = make_settings(tmp_path)
    vectors = await VectorStore.open(settings.chroma)
    try:
        await seed(vectors, settings.chroma.memory_collection,
                   [(f"real-{i}", {"sessionId": "real", "createdAt": 1}) for i in range(30)])
    finally:
        await vectors.close()
    done = run_demo(tmp_path)
    assert done.returncode == 2
    assert len(done.stderr.strip().splitlines()) == 1 and "refusing" in done.stderr
    assert not (tmp_path / "data" / "memory-core").exists()


def run_daemons_until_ready_then_stop(folder: Path) -> None:
    """`make run-daemons` on the folder, then Ctrl-C once it serves its store."""
    import signal
    import sys
    import time

    from tests.support import REPO, child_env

    config = folder / "kb.toml"
    config.write_text('[knowledgeBase]\ndataDir = "data"\n')
    daemons = subprocess.Popen([sys.executable, "-m", "daemons", "--config", str(config)],
                               cwd=REPO, env=child_env(folder / "home"),
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    from core.base.door.door_socket import door_path

    door = door_path(folder / "data" / "chroma")
    deadline = time.monotonic() + 90
    while not door.exists():
        assert daemons.poll() is None and time.monotonic() < deadline
        time.sleep(0.05)
    daemons.send_signal(signal.SIGINT)
    _, err = daemons.communicate(timeout=60)
    assert daemons.returncode == 0, err[-2000:]


def assert_full_story(stdout: str) -> None:
    assert "13 queue lines" in stdout and "8 linked" in stdout, stdout
    assert "again: the same story from the start" in stdout
    for tenant, kind in (("acme", "drifted"), ("globex", "clean"),
                         ("initech", "slightly behind"), ("hooli", "force-pushed")):
        assert re.search(rf"{tenant}\s+{kind}\s", stdout), (tenant, kind)
    assert re.search(r"hooli\s+force-pushed\s+0 config-stale chunks, 3 manifest orphans, "
                     r"1 missing path", stdout)
    assert "kb-reconcile explain hooli" in stdout


def test_a_fresh_demo_tells_the_full_story_and_names_every_tenant_kind(tmp_path: Path) -> None:
    first = run_demo(tmp_path)
    assert first.returncode == 0, first.stderr
    assert_full_story(first.stdout)


def test_the_demo_after_the_daemons_ran_tells_the_full_story(tmp_path: Path) -> None:
    run_daemons_until_ready_then_stop(tmp_path)
    after = run_demo(tmp_path)
    assert after.returncode == 0, after.stderr
    assert_full_story(after.stdout)


def test_the_demo_run_twice_tells_the_full_story_twice(tmp_path: Path) -> None:
    runs = [run_demo(tmp_path) for _ in range(2)]
    for run in runs:
        assert run.returncode == 0, run.stderr
        assert_full_story(run.stdout)


def test_a_folder_with_foreign_data_and_no_footprint_is_refused_untouched(
        tmp_path: Path) -> None:
    queue = tmp_path / "data" / "memory-core" / "lazy-edges.jsonl"
    queue.parent.mkdir(parents=True)
    line = '{"source":"CONCEPT:a","target":"CONCEPT:b","relationship":"R"}\n'
    queue.write_text(line)
    shown = run_demo(tmp_path)
    assert_refused(shown, "holds graph nodes or queue lines the demo did not write")
    assert "since its last run" not in shown.stderr
    assert [p.name for p in queue.parent.iterdir()] == ["lazy-edges.jsonl"]
    assert queue.read_text() == line and not (tmp_path / "data" / "graph.sqlite").exists()


def test_the_demo_json_is_one_object_with_every_tenant_kind(tmp_path: Path) -> None:
    config = tmp_path / "kb.toml"
    config.write_text('[knowledgeBase]\ndataDir = "data"\n', encoding="utf-8")
    done = run_module("daemons.demo", "--json", "--config", str(config), home=tmp_path / "home")
    assert done.returncode == 0, done.stderr
    (line,) = done.stdout.splitlines()
    shown = json.loads(line)
    assert shown["ok"] is True and shown["fresh"] is True
    assert shown["drain"]["drain"]["succeeded"] > 0
    assert {t["tenantId"] for t in shown["reconcile"]["tenants"]} == {
        "acme", "globex", "hooli", "initech"}


def run_neo_demo(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_module("daemons.demo", *args, home=tmp_path / "home", timeout=180)


def neo_story(shown: dict[str, Any]) -> tuple[Any, ...]:
    """What a run of the demo found, without its clock."""
    drain = shown["drain"]["drain"]
    return (drain["succeeded"], drain["requeued"], drain["deadLettered"],
            shown["drain"]["liveIngest"]["sessionsUpserted"], shown["reconcile"]["staleCount"],
            shown["reconcile"]["manifestOrphanCount"], shown["reconcile"]["tombstonedCount"],
            shown["status"]["graph"]["neo"]["nodes"], shown["status"]["graph"]["neo"]["edges"])


def test_the_neo_demo_tells_the_story_on_the_originals_graph_in_a_folder_of_its_own(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "neo-demo"
    first = run_neo_demo(tmp_path, "--neo", str(folder), "--json")
    assert first.returncode == 0, first.stderr[-3000:]
    shown = json.loads(first.stdout)
    graph = folder / "neo/.neo-ai-data/sqlite/memory-core-graph.sqlite"
    assert shown["ok"] and shown["fresh"]
    assert (shown["status"]["graph"]["schema"], shown["status"]["graph"]["neo"]["era"]) == (
        "neo", "E3")
    assert neo_story(shown)[:7] == (8, 2, 3, 3, 6, 3, 0), "one tick and a report-only pass"
    build_neo_graph(tmp_path / "fresh.sqlite", NeoEra.E3, nodes=())
    # The original's schema as its boot leaves it, and its telemetry table as it makes it.
    assert_original_schema_unchanged(original_entries(tmp_path / "fresh.sqlite"), graph)
    nodes = documents(graph)
    assert nodes["demo-m-s01-1"]["label"] == "AGENT_MEMORY"
    acme = nodes["kb-config:acme"]["properties"]
    assert (acme["version"], acme["visibility"], "repoSlug" in acme) == (3, "team", False)
    assert acme["tenantRepos"][0]["repoSlug"] == "acme/platform"
    with closing(sqlite3.connect(graph)) as conn:
        named = dict(conn.execute("SELECT tenant_id, repo_slug FROM kb_ingestion_metrics "
                                  "WHERE event_type = 'reconcile'"))
    assert named["acme"] == "acme/platform", "named as the original's reconciler names it"

    again = run_neo_demo(tmp_path, "--neo", str(folder), "--json")
    assert again.returncode == 0, again.stderr[-3000:]
    assert neo_story(json.loads(again.stdout)) == neo_story(shown), "the same story again"


def test_the_neo_demo_never_writes_into_a_folder_it_did_not_make(tmp_path: Path) -> None:
    folder = tmp_path / "checkout"
    folder.mkdir()
    (folder / "kb.toml").write_text("mine\n")
    refused = run_neo_demo(tmp_path, "--neo", str(folder))
    assert refused.returncode == 2 and "not made by the neo demo" in refused.stderr
    assert [p.name for p in folder.iterdir()] == ["kb.toml"]
    assert (folder / "kb.toml").read_text() == "mine\n"
    both = run_neo_demo(tmp_path, "--neo", str(folder), "--config", str(folder / "kb.toml"))
    assert both.returncode == 2 and "not with --config" in both.stderr


def test_a_neo_demo_rerun_changes_neither_the_policy_nor_the_manifest_an_operator_set(
        tmp_path: Path) -> None:
    folder = tmp_path / "neo-demo"
    assert run_neo_demo(tmp_path, "--neo", str(folder)).returncode == 0
    config = folder / "kb.toml"
    shown = operator_sets_hooli(config, tmp_path / "hooli-search")
    graph = folder / "neo/.neo-ai-data/sqlite/memory-core-graph.sqlite"
    before = documents(graph)
    again = run_neo_demo(tmp_path, "--neo", str(folder))
    assert_refused(again, f"{folder} holds data the demo did not write", *OPERATOR_CHANGES,
                   "--neo <a new folder>")
    assert json.loads(kb_tenants(config, "show", "hooli", "--json",
                                 home=tmp_path / "home").stdout) == shown
    assert documents(graph) == before and config.is_file()
