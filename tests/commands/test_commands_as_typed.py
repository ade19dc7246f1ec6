"""Commands speak as the command typed: errors name the console script (`kb-tenants:`, not
`daemons.tenants:`), `--config` is accepted before and after a subcommand, dates are ISO-8601
in text output, every subcommand has a description and `--json`, and `kb-reconcile --help`
describes every signal. Real console scripts and real commands run as subprocesses."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest

from core.base.chroma import VectorStore
from core.base.rules.tenants import TENANT_CONFIG_LABEL
from core.base.state.graph import upsert_node
from core.base.state.state import open_graph
from daemons import reconcile, tenants
from tests.support import REPO, child_env, make_settings, run_module, seed

KB = "neo-knowledge-base"
#: 2023-11-14T22:13:20Z
INGESTED_MS = 1_700_000_000_000


def script(name: str, *args: str, home: Path) -> subprocess.CompletedProcess[str]:
    """A console script of the installed package, run as an operator types it."""
    path = Path(sys.executable).with_name(name)
    assert path.exists(), f"{path} is not installed"
    return subprocess.run([str(path), *args], cwd=REPO, env=child_env(home), text=True,
                          capture_output=True, timeout=120, check=False)


async def one_stale_chunk(tmp_path: Path) -> Path:
    settings = make_settings(tmp_path)
    graph = await open_graph(settings.state)
    vectors = await VectorStore.open(settings.chroma)
    try:
        await upsert_node(graph, "kb-config:acme", TENANT_CONFIG_LABEL,
                          {"version": 3, "repoSlug": "acme/repo"})
        await seed(vectors, KB, [("acme-1", {
            "tenantId": "acme", "repoSlug": "acme/repo", "sourcePath": "a.md",
            "tenantConfigVersion": 1, "ingestedAt": INGESTED_MS})])
    finally:
        await vectors.close()
        await graph.close()
    config = tmp_path / "kb.toml"
    config.write_text(f'[knowledgeBase]\ndataDir = "{tmp_path / "data"}"\n')
    return config


@pytest.fixture
def config(tmp_path: Path) -> Path:
    return asyncio.run(one_stale_chunk(tmp_path))


def test_errors_are_prefixed_with_the_console_script_as_typed(config: Path,
                                                              tmp_path: Path) -> None:
    home = tmp_path / "home"
    typed = script("kb-tenants", "show", "nosuch", "--config", str(config), home=home)
    assert typed.returncode == 2
    assert typed.stderr.startswith('kb-tenants: error: no tenant "nosuch"'), typed.stderr
    typed = script("kb-reconcile", "explain", "nosuch", "--config", str(config), home=home)
    assert typed.returncode == 2
    assert typed.stderr.startswith("kb-reconcile: error: "), typed.stderr
    module = run_module("daemons.tenants", "show", "nosuch", "--config", str(config), home=home)
    assert module.stderr.startswith("daemons.tenants: error: "), module.stderr


def test_config_is_accepted_before_and_after_a_subcommand(config: Path, tmp_path: Path) -> None:
    home = tmp_path / "home"
    before = script("kb-tenants", "--config", str(config), "list", home=home)
    after = script("kb-tenants", "list", "--config", str(config), home=home)
    assert before.returncode == after.returncode == 0, before.stderr
    assert "acme" in before.stdout and before.stdout == after.stdout
    explain_before = script("kb-reconcile", f"--config={config}", "explain", "acme", home=home)
    explain_after = script("kb-reconcile", "explain", "acme", "--config", str(config), home=home)
    assert explain_before.returncode == explain_after.returncode == 0, explain_before.stderr
    assert explain_before.stdout == explain_after.stdout
    both = script("kb-tenants", "--config", str(config), "list", "--config", str(config),
                  home=home)
    assert both.returncode == 0 and both.stdout == before.stdout


def test_two_different_config_files_are_a_usage_error_naming_both(config: Path,
                                                                  tmp_path: Path) -> None:
    other = tmp_path / "other.toml"
    other.write_text("[knowledgeBase]\n")
    refused = script("kb-tenants", "--config", str(config), "list", "--config", str(other),
                     home=tmp_path / "home")
    assert refused.returncode == 2 and refused.stdout == ""
    [line] = refused.stderr.splitlines()
    assert line.startswith("kb-tenants: error: argument --config: given twice")
    assert str(config) in line and str(other) in line


def test_explain_prints_ingested_at_as_iso_8601(config: Path, tmp_path: Path) -> None:
    shown = run_module("daemons.reconcile", "explain", "acme", "--config", str(config),
                       home=tmp_path / "home")
    assert shown.returncode == 0, shown.stderr
    assert "2023-11-14T22:13:20Z" in shown.stdout
    assert "1,700,000,000,000" not in shown.stdout


def subcommand_parsers() -> dict[str, object]:
    parsers: dict[str, object] = {
        "kb-reconcile": reconcile.build_parser(),
        "kb-reconcile restore": reconcile.build_restore_parser(),
        "kb-reconcile explain": reconcile.build_explain_parser()}
    top = tenants.build_parser()
    [commands] = [a for a in top._actions if a.choices and isinstance(a.choices, dict)]
    assert isinstance(commands.choices, dict)
    parsers.update({f"kb-tenants {name}": p for name, p in commands.choices.items()})
    return parsers


def test_every_subcommand_has_a_description_and_json() -> None:
    parsers = subcommand_parsers()
    assert {"kb-tenants set-manifest", "kb-tenants set-policy"} <= set(parsers)
    for name, parser in parsers.items():
        assert getattr(parser, "description", None), f"{name} has no description"
        flags = {flag for action in parser._actions  # type: ignore[attr-defined]
                 for flag in action.option_strings}
        assert "--json" in flags, f"{name} has no --json"


def test_reconcile_help_describes_every_signal(tmp_path: Path) -> None:
    shown = run_module("daemons.reconcile", "--help", home=tmp_path / "home")
    text = " ".join(shown.stdout.split())
    for signal in ("config-stale", "manifest orphans", "generation orphans", "missing paths"):
        assert signal in text, signal
