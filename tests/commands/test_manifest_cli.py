"""Manifests from outside, as an operator runs them: a git repo built in a temp folder,
committed, then force-pushed (`git reset` + a new commit); `tenants set-manifest --from-git` at
each head (a bare repository too); a pass that flags exactly the chunks of the removed files;
`reconcile explain` with and without `--json` against the same pass's figures; bad input (exit
2, one line, nothing changed); `set-policy` and `show`."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from core.base.chroma import VectorStore
from core.base.rules.tenants import TENANT_CONFIG_LABEL
from core.base.runtime.config_file import load_config
from core.base.state.graph import upsert_node
from core.base.state.state import open_graph
from core.reconcile.rules.manifests import RepoManifest
from core.reconcile.stores.tenant_manifests import set_tenant_manifest
from tests.support import run_module, seed

GIT_ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t", "GIT_CONFIG_GLOBAL": os.devnull,
           "GIT_CONFIG_NOSYSTEM": "1"}


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, env={**os.environ, **GIT_ENV},
                          capture_output=True, text=True, check=True).stdout.strip()


def new_repo(tmp_path: Path) -> Path:
    """An empty git repository (branch main) in `tmp_path/repo`."""
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    return repo


def commit_files(repo: Path, files: dict[str, str | None], message: str) -> str:
    """Write (or, for None, remove) files and commit them; the new head's id."""
    for name, text in files.items():
        path = repo / name
        if text is None:
            path.unlink()
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", message)
    return git(repo, "rev-parse", "HEAD")


@pytest.fixture
def config(tmp_path: Path) -> Path:
    path = tmp_path / "kb.toml"
    path.write_text('[knowledgeBase]\ndataDir = "data"\nreconciliationEnabled = true\n'
                    "reconciliationAutoTombstone = true\nreconciliationMaxStaleFraction = 1.0\n"
                    "reconciliationManifestGraceMs = 0\n", encoding="utf-8")
    return path


def tenants(config: Path, *args: str, stdin: str | None = None
            ) -> subprocess.CompletedProcess[str]:
    return run_module("daemons.tenants", *args, "--config", str(config),
                      home=config.parent, stdin=stdin)


def reconcile(config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_module("daemons.reconcile", *args, "--config", str(config), home=config.parent)


def prepare(config: Path, chunks: list[tuple[str, dict[str, Any]]]) -> None:
    settings = load_config(str(config)).settings

    async def write() -> None:
        graph = await open_graph(settings.state)
        try:
            await upsert_node(graph, "kb-config:acme", TENANT_CONFIG_LABEL,
                              {"version": 1, "repoSlug": "r"})
        finally:
            await graph.close()
        vectors = await VectorStore.open(settings.chroma)
        try:
            await seed(vectors, settings.chroma.knowledge_base_collection, chunks)
        finally:
            await vectors.close()

    asyncio.run(write())


def chunks_of(paths: list[str], *, ingested: int) -> list[tuple[str, dict[str, Any]]]:
    return [(f"{p}#{i}", {"tenantId": "acme", "repoSlug": "r", "tenantConfigVersion": 1,
                          "sourcePath": p, "ingestedAt": ingested})
            for p in paths for i in range(2)]


def left(config: Path) -> set[str]:
    settings = load_config(str(config)).settings

    async def read() -> set[str]:
        vectors = await VectorStore.open(settings.chroma)
        try:
            return {r.id for page in [p async for p in vectors.scan(
                settings.chroma.knowledge_base_collection, include=())] for r in page}
        finally:
            await vectors.close()

    return asyncio.run(read())


def test_a_force_push_orphans_exactly_the_removed_files_chunks(
    tmp_path: Path, config: Path
) -> None:
    repo = new_repo(tmp_path)
    base = commit_files(repo, {"a.md": "a", "src/b.py": "b"}, "base")
    pushed = commit_files(repo, {"c.md": "c", "src/d.py": "d"}, "pushed")
    # Recorded before the tenant has a configuration: added on purpose.
    made = tenants(config, "set-manifest", "acme", "--repo-slug", "r", "--from-git", str(repo),
                   "--create")
    assert made.returncode == 0, made.stderr
    assert pushed in made.stdout and "4 paths" in made.stdout
    prepare(config, chunks_of(["a.md", "src/b.py", "c.md", "src/d.py"],
                              ingested=int(time.time() * 1000) - 60_000))
    # The force-push: history rewritten under the branch (c.md and src/d.py never existed).
    git(repo, "reset", "-q", "--hard", base)
    rewritten = commit_files(repo, {"e.md": "e", "a.md": None}, "rewritten")
    bare = tmp_path / "remote.git"
    git(tmp_path, "clone", "-q", "--bare", str(repo), str(bare))
    made = tenants(config, "set-manifest", "acme", "--repo-slug", "r", "--from-git", str(bare),
                   "--ref", "main")
    assert made.returncode == 0, made.stderr
    assert rewritten in made.stdout and "2 paths" in made.stdout

    shown = json.loads(tenants(config, "show", "acme", "--json").stdout)
    assert shown["manifests"][0]["revision"] == rewritten
    assert shown["version"] == 1  # a manifest never raises the version

    plan = reconcile(config, "explain", "acme", "--json")
    text = reconcile(config, "explain", "acme")
    dry = reconcile(config, "--tick", "--dry-run", "--json")
    real = reconcile(config, "--tick", "--json")
    for done in (plan, text, dry, real):
        assert done.returncode == 0, done.stderr
    planned, passed = json.loads(plan.stdout), json.loads(real.stdout)
    [figures] = passed["tenants"]
    assert figures["tombstonedCount"] == planned["guards"]["wouldDelete"] == 6
    assert {k: v for k, v in planned["figures"].items() if k != "tombstonedCount"} == {
        k: v for k, v in figures.items() if k != "tombstonedCount"}
    assert json.loads(dry.stdout)["tenants"][0]["manifestOrphanCount"] == 6
    assert (figures["manifestOrphanCount"], figures["missingPathCount"]) == (6, 1)
    assert planned["manifests"][0]["missingPaths"] == ["e.md"]
    assert left(config) == {"src/b.py#0", "src/b.py#1"}
    # The text shows the same totals, as a table an operator reads before switching on.
    assert "manifest orphans 6" in text.stdout and "missing paths 1" in text.stdout
    assert "a pass would archive, then delete 6 chunks" in text.stdout
    assert "c.md#0" in text.stdout and "missing: e.md" in text.stdout


def test_a_manifest_for_an_unconfigured_tenant_needs_create_and_says_the_pass_skips_it(
    tmp_path: Path, config: Path
) -> None:
    refused = tenants(config, "set-manifest", "nobody", "--repo-slug", "r", "--paths-file",
                      "-", stdin="a.md\n")
    assert refused.returncode == 2 and 'no tenant "nobody"' in refused.stderr
    made = tenants(config, "set-manifest", "nobody", "--repo-slug", "r", "--paths-file", "-",
                   "--create", stdin="a.md\n")
    assert made.returncode == 0, made.stderr
    assert "has no configuration node" in made.stderr
    shown = json.loads(tenants(config, "show", "nobody", "--json").stdout)
    assert (shown["configured"], shown["manifests"][0]["pathCount"]) == (False, 1)


def test_a_folder_inside_another_work_tree_is_refused_naming_its_top_and_records_nothing(
    tmp_path: Path, config: Path
) -> None:
    repo = new_repo(tmp_path)
    commit_files(repo, {"a.md": "a", "src/b.py": "b"}, "one")
    (repo / "vendor" / "lib").mkdir(parents=True)  # a plain folder (no .git) in the tree
    (repo / "vendor" / "lib" / "x.py").write_text("x")
    bare = tmp_path / "remote.git"
    git(tmp_path, "clone", "-q", "--bare", str(repo), str(bare))
    prepare(config, [])
    top = repo.resolve()
    for folder, says in ((repo / "vendor" / "lib", f"is inside the work tree at {top}; pass "
                          f"{top}"),
                         (repo / "src", f"is inside the work tree at {top}"),
                         (repo / ".git", f"inside the git directory of the work tree at {top}"),
                         (bare / "refs", f"is inside the bare repository at {bare.resolve()}")):
        done = tenants(config, "set-manifest", "acme", "--repo-slug", "r", "--from-git",
                       str(folder))
        assert done.returncode == 2, (folder, done.stdout)
        [line] = [ln for ln in done.stderr.splitlines() if ln.strip()]
        assert says in line, line
        assert json.loads(tenants(config, "show", "acme", "--json").stdout)["manifests"] == []


def test_a_repository_top_a_bare_repository_and_a_symlink_to_a_top_are_accepted(
    tmp_path: Path, config: Path
) -> None:
    repo = new_repo(tmp_path)
    head = commit_files(repo, {"a.md": "a", "src/b.py": "b"}, "one")
    bare = tmp_path / "remote.git"
    git(tmp_path, "clone", "-q", "--bare", str(repo), str(bare))
    link = tmp_path / "link"
    link.symlink_to(repo, target_is_directory=True)
    prepare(config, [])
    for folder in (repo, bare, link):
        done = tenants(config, "set-manifest", "acme", "--repo-slug", "r", "--from-git",
                       str(folder))
        assert done.returncode == 0, done.stderr
        assert f"2 paths at {head}" in done.stdout
    shown = json.loads(tenants(config, "show", "acme", "--json").stdout)
    assert shown["manifests"][0]["pathCount"] == 2


def test_a_find_listing_is_stripped_with_one_note_and_no_live_chunk_becomes_actionable(
    tmp_path: Path, config: Path
) -> None:
    live = [f"lib/m{i}.py" for i in range(10)]
    prepare(config, chunks_of(live, ingested=int(time.time() * 1000) - 60_000))
    # `find . -type f` output, written on Windows (CRLF), with a blank line.
    listing = "".join(f"./{p}\r\n" for p in live) + "\r\n"
    made = tenants(config, "set-manifest", "acme", "--repo-slug", "r", "--paths-file", "-",
                   stdin=listing)
    assert made.returncode == 0, made.stderr
    [note] = [ln for ln in made.stderr.splitlines() if "./" in ln]
    assert "stripped the leading ./ of 10 paths" in note
    shown = json.loads(tenants(config, "show", "acme", "--json").stdout)
    assert shown["manifests"][0]["pathCount"] == 10
    plan = json.loads(reconcile(config, "explain", "acme", "--json").stdout)
    assert (plan["figures"]["manifestOrphanCount"], plan["figures"]["actionableCount"]) == (0, 0)
    passed = reconcile(config, "--tick", "--json")
    assert passed.returncode == 0, passed.stderr
    assert json.loads(passed.stdout)["tenants"][0]["tombstonedCount"] == 0
    assert left(config) == {f"{p}#{i}" for p in live for i in range(2)}


def test_a_manifest_matching_none_of_the_repos_chunks_is_refused_unless_forced(
    tmp_path: Path, config: Path
) -> None:
    prepare(config, chunks_of(["lib/x.py", "lib/y.py"], ingested=1_000))
    listing = "other/x.py\nother/y.py\n"
    done = tenants(config, "set-manifest", "acme", "--repo-slug", "r", "--paths-file", "-",
                   stdin=listing)
    assert done.returncode == 2
    [line] = [ln for ln in done.stderr.splitlines() if ln.strip()]
    assert "matches none of the 4 chunks of repo r" in line
    assert "chunk paths: lib/x.py, lib/y.py; manifest paths: other/x.py, other/y.py" in line
    assert json.loads(tenants(config, "show", "acme", "--json").stdout)["manifests"] == []
    # Another repo of the same tenant has no chunk yet: nothing to match, recorded (a new
    # repo, added on purpose).
    other = tenants(config, "set-manifest", "acme", "--repo-slug", "new", "--paths-file", "-",
                    "--create", stdin=listing)
    assert other.returncode == 0, other.stderr
    forced = tenants(config, "set-manifest", "acme", "--repo-slug", "r", "--paths-file", "-",
                     "--force", stdin=listing)
    assert forced.returncode == 0, forced.stderr
    shown = json.loads(tenants(config, "show", "acme", "--json").stdout)
    assert sorted(m["repoSlug"] for m in shown["manifests"]) == ["new", "r"]


def test_explain_pages_a_long_plan_on_a_terminal_and_lists_it_whole_in_json(
    tmp_path: Path, config: Path
) -> None:
    paths = [f"gone/{i:03}.md" for i in range(40)]
    prepare(config, chunks_of([*paths, "keep.md"], ingested=int(time.time() * 1000) - 60_000))
    (tmp_path / "paths").write_text("keep.md\n", encoding="utf-8")
    assert tenants(config, "set-manifest", "acme", "--repo-slug", "r", "--paths-file",
                   str(tmp_path / "paths")).returncode == 0
    text = reconcile(config, "explain", "acme").stdout
    assert "... 30 more of 80 (--json lists every chunk)" in text
    assert len(json.loads(reconcile(config, "explain", "acme", "--json").stdout)["chunks"]) == 80


@pytest.mark.parametrize(("args", "stdin", "says"), [
    (("--from-git", "nowhere"), None, "not a directory"),
    (("--from-git", "."), None, "not a git repository"),
    (("--from-git", "REPO", "--ref", "no-such-ref"), None, "no commit named 'no-such-ref'"),
    (("--paths-file", "-"), "", "the path list is empty"),
    (("--paths-file", "-"), "\n\r\n", "the path list is empty"),
    (("--paths-file", "missing.txt"), None, "No such file"),
    (("--paths-file", "-", "--ref", "HEAD"), "a.md\n", "--ref: only with --from-git"),
    (("--paths-file", "-"), "\ufeffa.md\n", "<stdin>:1: path '\\ufeffa.md' holds a byte-order"),
    (("--paths-file", "-"), "a.md\n../b.md\n", "<stdin>:2: path '../b.md' has a .. segment"),
    (("--paths-file", "-"), "/abs/a.md\n", "<stdin>:1: path '/abs/a.md' is absolute"),
    (("--paths-file", "-"), "src//a.py\n", "<stdin>:1: path 'src//a.py' has an empty segment"),
    (("--paths-file", "-"), "a.md\n\x1b]0;pwned\x07.md\n",
     "<stdin>:2: path '\\x1b]0;pwned\\x07.md' holds a control character"),
])
def test_bad_manifest_input_is_exit_2_with_one_line_and_changes_nothing(
    tmp_path: Path, config: Path, args: tuple[str, ...], stdin: str | None, says: str
) -> None:
    repo = new_repo(tmp_path)
    commit_files(repo, {"a.md": "a"}, "one")
    (tmp_path / "empty-dir").mkdir()
    args = tuple(str(repo) if a == "REPO" else str(tmp_path / "empty-dir") if a == "." else a
                 for a in args)
    prepare(config, [])
    before = tenants(config, "show", "acme", "--json").stdout
    done = tenants(config, "set-manifest", "acme", "--repo-slug", "r", *args, stdin=stdin)
    assert done.returncode == 2
    [line] = [ln for ln in done.stderr.splitlines() if ln.strip()]
    assert says in line
    assert tenants(config, "show", "acme", "--json").stdout == before


def test_a_path_that_is_not_utf8_is_refused_from_a_file_and_from_git(
    tmp_path: Path, config: Path
) -> None:
    prepare(config, [])
    bad = tmp_path / "paths"
    bad.write_bytes(b"ok.md\n\xff\xfe.md\n")
    done = tenants(config, "set-manifest", "acme", "--repo-slug", "r", "--paths-file", str(bad))
    assert done.returncode == 2 and f"{bad}:2: path is not valid UTF-8" in done.stderr
    repo = new_repo(tmp_path)
    (repo / "ok.md").write_text("ok")
    try:
        (repo / os.fsdecode(b"\xff.md")).write_text("bad")
    except OSError:
        pytest.skip("this file system refuses names that are not UTF-8")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "bad name")
    done = tenants(config, "set-manifest", "acme", "--repo-slug", "r", "--from-git", str(repo))
    assert done.returncode == 2 and "is not valid UTF-8" in done.stderr
    assert json.loads(tenants(config, "show", "acme", "--json").stdout)["manifests"] == []


def test_set_policy_keeps_the_version_and_show_names_each_values_source(
    config: Path
) -> None:
    prepare(config, [])
    set_policy = tenants(config, "set-policy", "acme", "--auto-tombstone", "off",
                         "--orphan-version-gap", "3")
    assert set_policy.returncode == 0, set_policy.stderr
    shown = json.loads(tenants(config, "show", "acme", "--json").stdout)
    assert shown["version"] == 1
    assert shown["policy"]["orphanVersionGap"] == {"value": 3, "source": "tenant policy"}
    assert shown["policy"]["manifestGraceMs"] == {"value": 0, "source": "[knowledgeBase]"}
    assert shown["policy"]["autoTombstone"] == {"value": False, "source": "tenant policy"}
    text = tenants(config, "show", "acme").stdout
    assert "orphanVersionGap: 3  <- tenant policy" in text
    for bad in (("--orphan-version-gap", "0.5"), ("--manifest-grace-ms", "-1"),
                ("--auto-tombstone", "yes"), ()):
        done = tenants(config, "set-policy", "acme", *bad)
        assert done.returncode == 2, bad
        assert len([ln for ln in done.stderr.splitlines() if ln.strip()]) == 1
    assert json.loads(tenants(config, "show", "acme", "--json").stdout) == shown
    unknown = tenants(config, "set-policy", "nobody", "--auto-tombstone", "off")
    assert unknown.returncode == 2 and "set-config adds a tenant" in unknown.stderr


def test_a_manifest_orphaning_most_of_its_repo_is_held_at_pass_time_and_deletes_nothing(
    tmp_path: Path
) -> None:
    """The tenant-wide stale fraction cannot see it (another repo's live chunks dilute the
    share): 10 of 50 chunks is under 0.5, so on main the pass deleted the repo's 10 live
    chunks up to the cap. Per repo, 10 of 10 is over 0.5: held."""
    config = tmp_path / "kb.toml"
    config.write_text('[knowledgeBase]\ndataDir = "data"\nreconciliationEnabled = true\n'
                      "reconciliationAutoTombstone = true\nreconciliationMaxDeletesPerTick = 11\n"
                      "reconciliationManifestGraceMs = 0\n", encoding="utf-8")
    ingested = int(time.time() * 1000) - 60_000
    other = [(i, {**m, "repoSlug": "s"}) for i, m in chunks_of(
        [f"s/{n}.md" for n in range(20)], ingested=ingested)]
    prepare(config, chunks_of([f"lib/{n}.py" for n in range(5)], ingested=ingested) + other)
    everything = left(config)
    settings = load_config(str(config)).settings

    async def record_wrong_manifest() -> None:  # what an older set-manifest let through
        graph = await open_graph(settings.state)
        try:
            await set_tenant_manifest(graph, "acme", RepoManifest(
                "r", ("./lib/0.py", "./lib/1.py"), ingested + 1_000))
        finally:
            await graph.close()

    asyncio.run(record_wrong_manifest())
    plan = reconcile(config, "explain", "acme", "--json")
    text = reconcile(config, "explain", "acme")
    passed = reconcile(config, "--tick", "--json")
    for done in (plan, text, passed):
        assert done.returncode == 0, done.stderr
    [figures] = json.loads(passed.stdout)["tenants"]
    assert (figures["guard"], figures["tombstonedCount"]) == ("manifest-mismatch", 0)
    assert (figures["manifestOrphanCount"], figures["actionableCount"]) == (10, 0)
    assert left(config) == everything
    guards = json.loads(plan.stdout)["guards"]
    assert (guards["guard"], guards["mismatchedRepos"], guards["wouldDelete"]) == (
        "manifest-mismatch", ["r"], 0)
    assert "guard: manifest-mismatch" in text.stdout
    assert "held (manifest-mismatch)" in text.stdout
    assert "the manifest-mismatch guard holds the orphans of r" in text.stdout

    async def detail() -> dict[str, Any]:
        graph = await open_graph(settings.state)
        try:
            [(raw,)] = await graph.query("SELECT detail FROM kb_ingestion_metrics")
        finally:
            await graph.close()
        return dict(json.loads(raw))

    recorded = asyncio.run(detail())
    assert (recorded["guard"], recorded["manifestMismatchRepos"],
            recorded["manifestMismatchCount"]) == ("manifest-mismatch", ["r"], 10)
    status = run_module("daemons.status", "--config", str(config), "--json", home=tmp_path)
    assert json.loads(status.stdout)["tenants"][0]["lastGuard"] == "manifest-mismatch"
    shown = run_module("daemons.status", "--config", str(config), home=tmp_path)
    assert "manifest-mismatch" in shown.stdout
