"""Typos stop: the `kb-tenants` commands refuse (exit 2, one line naming the known tenants or
repos and the closest match, nothing written) a tenant without a configuration or a repo the
tenant neither declares nor has chunks of, unless `--create`; on a real SQLite graph and a
real embedded Chroma store."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

from core.base.chroma import VectorStore
from core.base.runtime.config_file import load_config
from tests.support import seed

IDENTITY = "ab" * 32


def kb_tenants(config: Path, capsys: pytest.CaptureFixture[str], *args: str,
               ) -> tuple[int, str, str]:
    """`kb-tenants ARGS --config F` in this process: its exit code, stdout and stderr."""
    from daemons.tenants import main

    capsys.readouterr()
    with pytest.raises(SystemExit) as exited:
        main([*args, "--config", str(config)])
    out, err = capsys.readouterr()
    code = exited.value.code
    return (code if isinstance(code, int) else 1), out, err


def error_lines(err: str) -> list[str]:
    """The stderr lines that are not log events (JSON objects)."""
    return [ln for ln in err.splitlines() if ln.strip() and not ln.startswith("{")]


def nodes(config: Path) -> dict[str, str]:
    """Every node's properties as stored, by id."""
    path = load_config(str(config)).settings.state.graph_db_path
    with closing(sqlite3.connect(path)) as conn:
        return dict(conn.execute("SELECT id, properties FROM nodes").fetchall())


@pytest.fixture
def config(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    """Tenants `hooli` (repo `hooli/search`) and `acme`; `hooli` also has chunks of a repo
    it does not declare (`hooli/indexed`), in a real embedded store."""
    path = tmp_path / "kb.toml"
    path.write_text(f'[knowledgeBase]\ndataDir = "{tmp_path / "data"}"\n', encoding="utf-8")
    assert kb_tenants(path, capsys, "set-config", "hooli", "--repo-slug", "hooli/search")[0] == 0
    assert kb_tenants(path, capsys, "set-config", "acme")[0] == 0

    async def chunks() -> None:
        settings = load_config(str(path)).settings
        vectors = await VectorStore.open(settings.chroma)
        try:
            await seed(vectors, settings.chroma.knowledge_base_collection, [
                (f"i{n}", {"tenantId": "hooli", "repoSlug": "hooli/indexed",
                           "tenantConfigVersion": 1, "sourcePath": f"{n}.md",
                           "ingestedAt": 1_000}) for n in range(2)])
        finally:
            await vectors.close()

    asyncio.run(chunks())
    return path


def paths_file(tmp_path: Path, *paths: str) -> str:
    listing = tmp_path / "paths.txt"
    listing.write_text("".join(f"{p}\n" for p in paths), encoding="utf-8")
    return str(listing)


def test_a_misspelled_tenant_is_refused_with_the_closest_match_and_nothing_written(
    tmp_path: Path, config: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    before = nodes(config)
    listing = paths_file(tmp_path, "a.md")
    for args in (("set-manifest", "hoolli", "--repo-slug", "hooli/search", "--paths-file",
                  listing),
                 ("set-manifest", "hoolli", "--repo-slug", "hooli/search", "--paths-file",
                  listing, "--force"),
                 ("set-yield", "hoolli", "--repo-slug", "hooli/search",
                  "--extraction-identity", IDENTITY, "--paths-file", listing),
                 ("set-policy", "hoolli", "--auto-tombstone", "off"),
                 ("set-repo", "hoolli", "--repo-slug", "hooli/search", "--parser-id", "p"),
                 ("show", "hoolli")):
        code, out, err = kb_tenants(config, capsys, *args)
        assert (code, out) == (2, ""), (args, err)
        [line] = error_lines(err)
        assert line.startswith('daemons.tenants: error: no tenant "hoolli" (known: acme, '
                               'hooli); did you mean "hooli"?'), line
    assert nodes(config) == before


def test_a_misspelled_repo_is_refused_with_the_closest_match_and_nothing_written(
    tmp_path: Path, config: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    before = nodes(config)
    listing = paths_file(tmp_path, "a.md")
    for args in (("set-manifest", "hooli", "--repo-slug", "hooli/serch", "--paths-file",
                  listing),
                 ("set-manifest", "hooli", "--repo-slug", "hooli/serch", "--paths-file",
                  listing, "--force"),
                 ("set-repo", "hooli", "--repo-slug", "hooli/serch", "--parser-id", "p")):
        code, out, err = kb_tenants(config, capsys, *args)
        assert (code, out) == (2, ""), (args, err)
        [line] = error_lines(err)
        assert ('tenant hooli has no repo "hooli/serch" (known: hooli/search); did you mean '
                '"hooli/search"? Pass --create to add it.') in line, line
    code, _, err = kb_tenants(config, capsys, "set-yield", "hooli", "--repo-slug",
                              "hooli/serch", "--extraction-identity", IDENTITY,
                              "--paths-file", listing)
    assert code == 2 and 'no manifest of "hooli/serch"' in err
    assert nodes(config) == before


def test_a_repo_the_tenant_has_chunks_of_needs_no_declaration(
    tmp_path: Path, config: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, err = kb_tenants(config, capsys, "set-manifest", "hooli", "--repo-slug",
                                "hooli/indexed", "--paths-file", paths_file(tmp_path, "0.md"))
    assert code == 0, err
    assert out == "hooli hooli/indexed: 1 paths\n"
    # ... nor does one the tenant's repoSlug names, without a chunk yet.
    code, _, err = kb_tenants(config, capsys, "set-repo", "hooli", "--repo-slug",
                              "hooli/search", "--parser-id", "p")
    assert code == 0, err


def test_create_adds_a_new_tenant_and_a_new_repo(
    tmp_path: Path, config: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    listing = paths_file(tmp_path, "a.md")
    code, _, err = kb_tenants(config, capsys, "set-manifest", "hooli", "--repo-slug",
                              "hooli/new", "--paths-file", listing, "--create")
    assert code == 0, err
    code, _, err = kb_tenants(config, capsys, "set-repo", "acme", "--repo-slug", "acme/new",
                              "--parser-id", "p", "--create")
    assert code == 0, err
    code, _, err = kb_tenants(config, capsys, "set-manifest", "initech", "--repo-slug",
                              "initech/x", "--paths-file", listing, "--create")
    assert code == 0, err
    assert "has no configuration node" in err  # said once more: a pass skips it until then
    stored = nodes(config)
    assert '"hooli/new"' in stored["kb-manifest:hooli"]
    assert '"acme/new"' in stored["kb-config:acme"]
    assert "kb-manifest:initech" in stored and "kb-config:initech" not in stored
    # The repo now declared (a manifest of it) needs --create no more.
    code, _, err = kb_tenants(config, capsys, "set-manifest", "hooli", "--repo-slug",
                              "hooli/new", "--paths-file", listing)
    assert code == 0, err


def test_remove_manifest_and_remove_yield_undo_a_stray_and_then_have_nothing_to_remove(
    tmp_path: Path, config: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    listing = paths_file(tmp_path, "a.md")
    for repo in ("hooli/search", "hooli/serch"):
        code, _, err = kb_tenants(config, capsys, "set-manifest", "hooli", "--repo-slug", repo,
                                  "--paths-file", listing, "--create")
        assert code == 0, err
    code, _, err = kb_tenants(config, capsys, "set-yield", "hooli", "--repo-slug",
                              "hooli/serch", "--extraction-identity", IDENTITY,
                              "--paths-file", listing)
    assert code == 0, err

    assert kb_tenants(config, capsys, "remove-yield", "hooli", "--repo-slug",
                      "hooli/serch")[:2] == (0, "hooli hooli/serch: yield snapshot removed\n")
    shown = json.loads(kb_tenants(config, capsys, "show", "hooli", "--json")[1])
    assert sorted(m["repoSlug"] for m in shown["manifests"]) == ["hooli/search", "hooli/serch"]
    assert "extractionSnapshot" not in nodes(config)["kb-manifest:hooli"]
    assert kb_tenants(config, capsys, "remove-yield", "hooli", "--repo-slug",
                      "hooli/serch")[:2] == (
        0, "hooli hooli/serch: no yield snapshot, nothing to remove\n")

    assert kb_tenants(config, capsys, "remove-manifest", "hooli", "--repo-slug",
                      "hooli/serch")[:2] == (0, "hooli hooli/serch: manifest removed\n")
    shown = json.loads(kb_tenants(config, capsys, "show", "hooli", "--json")[1])
    assert [m["repoSlug"] for m in shown["manifests"]] == ["hooli/search"]
    code, out, _ = kb_tenants(config, capsys, "remove-manifest", "hooli", "--repo-slug",
                              "hooli/serch", "--json")
    assert (code, json.loads(out)) == (0, {"tenantId": "hooli", "repoSlug": "hooli/serch",
                                           "removed": False})
    assert kb_tenants(config, capsys, "remove-manifest", "hooli", "--repo-slug",
                      "hooli/serch")[:2] == (0, "hooli hooli/serch: no manifest, nothing to "
                                                'remove (did you mean "hooli/search"?)\n')
    # The stray repo is no longer declared: recording it again needs --create.
    assert kb_tenants(config, capsys, "set-manifest", "hooli", "--repo-slug", "hooli/serch",
                      "--paths-file", listing)[0] == 2


def test_a_stray_tenants_manifest_can_be_removed_and_an_unknown_tenant_is_refused(
    tmp_path: Path, config: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    code, _, err = kb_tenants(config, capsys, "set-manifest", "hoolli", "--repo-slug", "r",
                              "--paths-file", paths_file(tmp_path, "a.md"), "--create")
    assert code == 0, err
    assert kb_tenants(config, capsys, "remove-manifest", "hoolli", "--repo-slug",
                      "r")[:2] == (0, "hoolli r: manifest removed\n")
    before = nodes(config)
    code, out, err = kb_tenants(config, capsys, "remove-manifest", "hoolli", "--repo-slug",
                                "r")
    assert (code, out) == (2, "")
    [line] = error_lines(err)
    assert 'no tenant "hoolli" (known: acme, hooli); did you mean "hooli"?' in line
    assert nodes(config) == before
