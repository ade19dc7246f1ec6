"""Terminal output is inert: whatever a tenant or a producer wrote (chunk ids, source paths,
repo slugs, manifest paths, tenant ids) reaches the operator's terminal with its control
characters escaped, never obeyed. The pure escape, then the real commands (`reconcile
explain`, `status`, `tenants show` and `list`) over real SQLite and real embedded Chroma."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from core.base.chroma import VectorStore
from core.base.rules.tenants import TENANT_CONFIG_LABEL
from core.base.rules.terminal_text import CUT_MARK, SHOWN_TEXT_MAX_CHARS, inert, shown_text
from core.base.state.graph import upsert_node
from core.base.state.state import open_graph
from core.reconcile.rules.manifests import RepoManifest
from core.reconcile.stores.tenant_manifests import set_tenant_manifest
from tests.support import make_settings, run_module, seed

CLEAR = "\x1b[2J"
TITLE = "\x1b]0;owned\x07"
BIDI = "\u202e"
#: Any character a terminal may act on: C0 but the newline, DEL, C1, bidi overrides/isolates.
RAW_CONTROL = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


@pytest.mark.parametrize("char, shown", [
    ("\x1b", "\\x1b"), ("\x07", "\\x07"), ("\r", "\\x0d"), ("\t", "\\x09"), ("\x7f", "\\x7f"),
    ("\x9b", "\\x9b"), ("\u202a", "\\u202a"), ("\u202e", "\\u202e"), ("\u2066", "\\u2066"),
    ("\u2069", "\\u2069"),
])
def test_every_control_character_is_shown_as_its_escape(char: str, shown: str) -> None:
    assert inert(f"a{char}b") == f"a{shown}b"


def test_inert_keeps_newlines_and_plain_text_and_is_idempotent() -> None:
    text = f"line 1 é 漢字\nline {CLEAR}{TITLE}{BIDI}2\n"
    once = inert(text)
    assert RAW_CONTROL.search(once) is None and once.count("\n") == 2
    assert inert(once) == once
    assert inert("a\nb", keep_newlines=False) == "a\\x0ab"
    assert inert("plain é 漢字") == "plain é 漢字"


HOSTILE = f"evil{CLEAR}{TITLE}{BIDI}"


@pytest.fixture
async def hostile_data(tmp_path: Path) -> Path:
    """A config file over a data dir holding a tenant whose repo slug, manifest paths, chunk
    ids and source paths carry a clear-screen, a window-title sequence and a bidi override,
    and a second tenant whose id does; one reconcile pass has run (telemetry for `status`)."""
    config = tmp_path / "kb.toml"
    config.write_text('[knowledgeBase]\ndataDir = "data"\nlogFormat = "json"\n'
                      "reconciliationEnabled = true\nreconciliationManifestGraceMs = 0\n")
    settings = make_settings(tmp_path, reconciliationEnabled=True)
    repo = f"acme/{HOSTILE}"
    graph = await open_graph(settings.state)
    try:
        await upsert_node(graph, "kb-config:acme", TENANT_CONFIG_LABEL,
                          {"version": 3, "repoSlug": repo})
        await upsert_node(graph, f"kb-config:{HOSTILE}", TENANT_CONFIG_LABEL,
                          {"version": 2, "repoSlug": "plain/repo"})
        await set_tenant_manifest(graph, "acme", RepoManifest(
            repo, (f"docs/{HOSTILE}.md", "docs/kept.md"), updated_at=1_000))
    finally:
        await graph.close()
    vectors = await VectorStore.open(settings.chroma)
    try:
        await seed(vectors, settings.chroma.knowledge_base_collection, [
            (f"chunk-{HOSTILE}", {"tenantId": "acme", "repoSlug": repo, "tenantConfigVersion": 1,
                                  "sourcePath": f"src/{HOSTILE}.py", "ingestedAt": 1}),
            ("chunk-2", {"tenantId": HOSTILE, "repoSlug": "plain/repo",
                         "tenantConfigVersion": 1, "sourcePath": "a.py", "ingestedAt": 1}),
        ])
    finally:
        await vectors.close()
    done = run_module("daemons.reconcile", "--tick", "--json", "--config", str(config),
                      home=tmp_path / "home")
    assert done.returncode == 0, done.stderr
    return config


def assert_inert(output: str) -> None:
    assert RAW_CONTROL.search(output) is None, repr(output)
    assert "evil\\x1b[2J\\x1b]0;owned\\x07\\u202e" in output, output


async def test_explain_text_escapes_ids_paths_and_slugs(hostile_data: Path,
                                                         tmp_path: Path) -> None:
    shown = run_module("daemons.reconcile", "explain", "acme", "--config", str(hostile_data),
                       home=tmp_path / "home")
    assert shown.returncode == 0, shown.stderr
    assert_inert(shown.stdout)
    # The id column may fold a value this long; its escaped head is on one line.
    assert f"chunk-{inert(HOSTILE)}"[:30] in shown.stdout


async def test_explain_json_keeps_the_real_strings(hostile_data: Path, tmp_path: Path) -> None:
    shown = run_module("daemons.reconcile", "explain", "acme", "--json", "--config",
                       str(hostile_data), home=tmp_path / "home")
    assert shown.returncode == 0, shown.stderr
    assert RAW_CONTROL.search(shown.stdout) is None  # json.dumps escapes them itself
    assert f"chunk-{HOSTILE}" in [c["id"] for c in json.loads(shown.stdout)["chunks"]]


async def test_status_text_escapes_tenant_ids_and_slugs(hostile_data: Path,
                                                        tmp_path: Path) -> None:
    shown = run_module("daemons.status", "--config", str(hostile_data), home=tmp_path / "home")
    assert shown.returncode == 0, shown.stderr
    assert_inert(shown.stdout)


async def test_tenants_show_and_list_escape_slugs_and_paths(hostile_data: Path,
                                                            tmp_path: Path) -> None:
    shown = run_module("daemons.tenants", "show", "acme", "--config", str(hostile_data),
                       home=tmp_path / "home")
    assert shown.returncode == 0, shown.stderr
    assert_inert(shown.stdout)
    listed = run_module("daemons.tenants", "list", "--config", str(hostile_data),
                        home=tmp_path / "home")
    assert listed.returncode == 0, listed.stderr
    assert_inert(listed.stdout)


def test_control_and_direction_characters_are_written_as_visible_escapes() -> None:
    assert shown_text("a\x1b[2Jb\nc\td\x7f\x85e\u202ef") == \
        "a\\x1b[2Jb\\x0ac\\x09d\\x7f\\x85e\\u202ef"


def test_ordinary_text_is_unchanged() -> None:
    text = "Collection expecting embedding with dimension of 4, got 3 — ünïcode ✓"
    assert shown_text(text) == text


def test_a_long_text_is_cut_with_a_mark_and_never_inside_an_escape() -> None:
    assert shown_text("x" * 1000) == "x" * SHOWN_TEXT_MAX_CHARS + CUT_MARK
    assert shown_text("abc\x1bdef", limit=5) == "abc" + CUT_MARK
    assert shown_text("abcdef", limit=6) == "abcdef"
