"""The tools beside the running daemons: with `python -m daemons` holding the embedded store,
`kb-reconcile explain`, `restore`, `--tick --dry-run` and `kb-tenants show` run from another
process answer exactly as they do alone (through the daemon's store door); a held store with
no daemon behind it is one line and exit 1. Real daemon process, real embedded Chroma, real
archives written by a real pass."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

from core.base.chroma import VectorStore
from core.base.door.chroma_door import door_path
from core.base.rules.tenants import TENANT_CONFIG_LABEL
from core.base.runtime.context import TickContext
from core.base.state.graph import upsert_node
from core.base.state.state import open_graph
from core.reconcile.run_pass import reconcile_tick
from core.suite.tick import run_tick
from tests.support import REPO, child_env, make_settings, run_module, seed

KB = "neo-knowledge-base"


def chunk(row_id: str, tenant: str, stamp: int) -> tuple[str, dict[str, object]]:
    return row_id, {"tenantId": tenant, "repoSlug": f"{tenant}/repo", "sourcePath": "a.md",
                    "tenantConfigVersion": stamp, "ingestedAt": 1_700_000_000_000}


async def seeded_store_with_an_archive(tmp_path: Path) -> Path:
    """Tenant acme at version 3 with two current and two stale chunks; a tombstoning pass
    archives and deletes the stale ones; one of them is then re-ingested (live again). The
    archive thus holds one absent and one live chunk."""
    settings = make_settings(tmp_path, reconciliationEnabled=True,
                             reconciliationAutoTombstone=True,
                             reconciliationMaxStaleFraction=1.0)
    graph = await open_graph(settings.state)
    vectors = await VectorStore.open(settings.chroma)
    try:
        await upsert_node(graph, "kb-config:acme", TENANT_CONFIG_LABEL,
                          {"version": 3, "repoSlug": "acme/repo"})
        await seed(vectors, KB, [chunk("acme-1", "acme", 3), chunk("acme-2", "acme", 3),
                                 chunk("acme-old-1", "acme", 1),
                                 chunk("acme-old-2", "acme", 1)])
        figures = (await run_tick("reconcile", TickContext(settings, graph, vectors),
                                  reconcile_tick, dry_run=False)).json()
        [archive] = figures["archives"]
        await seed(vectors, KB, [chunk("acme-old-2", "acme", 3)])
    finally:
        await vectors.close()
        await graph.close()
    return Path(archive)


async def forget_restored(tmp_path: Path) -> None:
    """Delete the chunk a restore puts back, so a second restore starts from the same state."""
    vectors = await VectorStore.open(make_settings(tmp_path).chroma)
    try:
        await vectors.delete_where(KB, where={"tenantConfigVersion": 1})
    finally:
        await vectors.close()


def commands(config: Path, archive: Path) -> dict[str, list[str]]:
    c = ["--config", str(config)]
    return {
        "explain": ["daemons.reconcile", "explain", "acme", *c],
        "explain --json": ["daemons.reconcile", "explain", "acme", *c, "--json"],
        "tick --dry-run --json": ["daemons.reconcile", "--tick", "--dry-run", "--json", *c],
        "tenants show": ["daemons.tenants", "show", "acme", *c],
        "restore --json": ["daemons.reconcile", "restore", str(archive), *c, "--json"],
    }


def outcome(result: subprocess.CompletedProcess[str]) -> tuple[int, str]:
    """Exit code and stdout, with the per-run parts (a pass's id and duration) taken out."""
    stdout = result.stdout
    if stdout.startswith("{"):
        shown = json.loads(stdout)
        for per_run in ("durationMs", "passId"):
            shown.pop(per_run, None)
        stdout = json.dumps(shown, sort_keys=True)
    return result.returncode, stdout


def start_daemons(config: Path, home: Path) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "daemons", "--config", str(config)],
                            cwd=REPO, env=child_env(home), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def wait_for_door(daemon: subprocess.Popen[str], door: Path) -> None:
    deadline = time.monotonic() + 90
    while not door.exists():
        assert daemon.poll() is None, daemon.communicate()[1][-3000:]
        assert time.monotonic() < deadline, "the daemon never opened its store door"
        time.sleep(0.05)


async def test_explain_restore_tick_and_show_beside_a_running_daemon_answer_as_alone(
        tmp_path: Path) -> None:
    archive = await seeded_store_with_an_archive(tmp_path)
    config = tmp_path / "kb.toml"
    # Intervals of an hour (the defaults): the daemon's own ticks run once at start and then
    # leave the store alone; reconciliation off, so they never delete.
    config.write_text(f'[knowledgeBase]\ndataDir = "{tmp_path / "data"}"\nlogFormat = "json"\n')
    home = tmp_path / "home"
    alone = {name: outcome(run_module(*argv, home=home))
             for name, argv in commands(config, archive).items()}
    assert alone["restore --json"][0] == 0
    assert json.loads(alone["restore --json"][1])["restored"] == 1
    await forget_restored(tmp_path)

    daemon = start_daemons(config, home)
    try:
        wait_for_door(daemon, door_path(tmp_path / "data" / "chroma"))
        beside = {name: outcome(run_module(*argv, home=home))
                  for name, argv in commands(config, archive).items()}
        again = run_module("daemons.reconcile", "restore", str(archive),
                           "--config", str(config), home=home)
    finally:
        daemon.send_signal(signal.SIGINT)
        _, daemon_log = daemon.communicate(timeout=60)
    assert daemon.returncode == 0, daemon_log[-3000:]
    for name in alone:
        assert beside[name] == alone[name], name
    # The restore beside the daemon really wrote through it: a second one finds both live.
    assert again.returncode == 0, again.stderr
    assert again.stdout.startswith("restored 0, kept live 2"), again.stdout
    assert not door_path(tmp_path / "data" / "chroma").exists(), "the door file stays behind"


def test_a_held_store_with_no_daemon_behind_it_is_one_line_and_exit_1(tmp_path: Path) -> None:
    asyncio.run(seeded_store_with_an_archive(tmp_path))
    data = tmp_path / "data"
    config = tmp_path / "kb.toml"
    config.write_text(f'[knowledgeBase]\ndataDir = "{data}"\n')
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time\n"
         "from pathlib import Path\n"
         "from core.base.io.locks import ProcessLock\n"
         "ProcessLock(Path(sys.argv[1]), purpose='store').acquire()\n"
         "print('held', flush=True)\n"
         "time.sleep(120)\n", str(data / "chroma" / ".kb-daemons.lock")],
        cwd=REPO, env=child_env(tmp_path / "home"), stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        result = run_module("daemons.reconcile", "explain", "acme", "--config", str(config),
                            home=tmp_path / "home")
    finally:
        holder.kill()
        holder.wait()
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert f"is held by pid {holder.pid}" in lines[0]
    assert "no daemon serves it" in lines[0]
