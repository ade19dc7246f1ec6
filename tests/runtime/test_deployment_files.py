"""The files operators deploy: systemd units and the systemd config."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from core.base.runtime.config_file import load_config
from core.suite.scheduler import SHUTDOWN_GRACE_S, STALL_LIMIT_S
from tests.chroma_server import ChromaServer
from tests.mdwe import EXIT_UNSUPPORTED
from tests.support import child_env

ROOT = Path(__file__).resolve().parents[2]
MDWE = ROOT / "tests" / "mdwe.py"
UNITS = sorted((ROOT / "systemd").glob("*.service"))


def unit_settings(path: Path) -> dict[str, str]:
    settings = {}
    for line in path.read_text().splitlines():
        if "=" in line and not line.startswith("#"):
            key, _, value = line.partition("=")
            settings[key.strip()] = value.strip()
    return settings


def test_the_systemd_config_reads_without_warnings() -> None:
    loaded = load_config(str(ROOT / "config/kb.systemd.toml"), environ={})
    assert loaded.warnings == ()
    assert loaded.settings.chroma.server_mode and loaded.settings.reconcile.enabled


@pytest.mark.parametrize("name", ["kb-drain.service", "kb-reconcile.service"])
def test_daemon_units_are_hardened_notify_services_with_bounds_that_fit_the_runtime(
    name: str,
) -> None:
    unit = unit_settings(ROOT / "systemd" / name)
    assert unit["Type"] == "notify" and unit["Restart"] == "on-failure"
    assert "kb-chroma.service" in unit["Requires"] and "kb-chroma.service" in unit["After"]
    assert unit["ProtectSystem"] == "strict" and unit["ProtectHome"] == "yes"
    assert unit["PrivateTmp"] == "yes" and unit["NoNewPrivileges"] == "yes"
    assert unit["User"] == "kb" and unit["StateDirectory"] == "kb"
    assert "--config /etc/kb/kb.toml" in unit["ExecStart"]
    assert float(unit["TimeoutStopSec"]) > SHUTDOWN_GRACE_S + 5
    assert float(unit["WatchdogSec"]) > STALL_LIMIT_S


def test_the_chroma_unit_listens_on_loopback_without_telemetry() -> None:
    unit = unit_settings(ROOT / "systemd/kb-chroma.service")
    assert "--host 127.0.0.1" in unit["ExecStart"]
    assert "ANONYMIZED_TELEMETRY=False" in unit["Environment"]
    assert unit["StateDirectory"] == "kb-chroma"


@pytest.mark.parametrize("unit", UNITS, ids=lambda p: p.name)
def test_every_unit_keeps_its_state_owner_only(unit: Path) -> None:
    """The daemons refuse a data folder other users can reach (core.base.config.private_data): the
    units make the state folder the service user's alone and everything created in it too."""
    settings = unit_settings(unit)
    assert settings["StateDirectoryMode"] == "0700"
    assert settings["UMask"] == "0077"


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="no systemd-analyze here")
def test_units_pass_systemd_analyze_verify() -> None:
    result = subprocess.run(["systemd-analyze", "verify", *map(str, UNITS)],
                            capture_output=True, text=True, check=False)
    problems = [line for line in (result.stdout + result.stderr).splitlines()
                if line.strip() and "is not executable" not in line]  # /opt is not installed here
    assert problems == []


@pytest.mark.parametrize("name", ["kb-drain.service", "kb-reconcile.service"])
def test_daemon_units_do_not_restart_loop_on_a_usage_error(name: str) -> None:
    unit = unit_settings(ROOT / "systemd" / name)
    assert unit["RestartPreventExitStatus"] == "2"


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="no systemd-analyze here")
@pytest.mark.parametrize("unit", UNITS, ids=lambda p: p.name)
def test_units_are_rated_at_most_2_5_by_systemd_analyze_security(unit: Path) -> None:
    result = subprocess.run(["systemd-analyze", "security", "--offline=true", str(unit)],
                            capture_output=True, text=True, check=False)
    rating = re.search(r"Overall exposure level for \S+: ([0-9.]+)", result.stdout)
    assert rating is not None, result.stdout[-500:] + result.stderr[-500:]
    assert float(rating.group(1)) <= 2.5, result.stdout


def under_mdwe(*argv: str, home: Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run a command with W+X memory refused (tests/mdwe.py); skip where the kernel cannot."""
    result = subprocess.run([sys.executable, str(MDWE), *argv], cwd=ROOT,
                            env=child_env(home), capture_output=True, text=True,
                            timeout=timeout, check=False)
    if result.returncode == EXIT_UNSUPPORTED:
        pytest.skip("this kernel has no PR_SET_MDWE")
    return result


def test_both_daemons_tick_with_writable_executable_memory_refused(tmp_path: Path) -> None:
    """The units set MemoryDenyWriteExecute=yes: chromadb (Rust bindings, numpy) and the
    daemons must work without W+X mappings, on a store they create."""
    config = tmp_path / "kb.toml"
    config.write_text(f'[knowledgeBase]\ndataDir = "{tmp_path / "data"}"\n')
    for daemon in ("daemons.drain", "daemons.reconcile"):
        result = under_mdwe(sys.executable, "-m", daemon, "--tick", "--json",
                            "--config", str(config), home=tmp_path / "home")
        assert result.returncode == 0, result.stderr[-2000:]
        assert json.loads(result.stdout)["ok"] is True


def test_the_chroma_server_answers_with_writable_executable_memory_refused(
    tmp_path: Path,
) -> None:
    """kb-chroma.service sets MemoryDenyWriteExecute=yes too."""
    chroma = str(Path(sys.executable).with_name("chroma"))
    server = ChromaServer(tmp_path / "store", home=tmp_path / "home",
                          command_prefix=[sys.executable, str(MDWE), chroma])
    try:
        server.start()
    except RuntimeError as exc:
        if f"exited with {EXIT_UNSUPPORTED}" in str(exc):
            pytest.skip("this kernel has no PR_SET_MDWE")
        raise
    try:
        with urllib.request.urlopen(f"{server.url}/api/v2/heartbeat", timeout=5) as reply:
            assert reply.status == 200
    finally:
        server.stop()


def test_every_console_script_names_a_command_entry_point() -> None:
    import importlib
    import tomllib

    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert set(scripts) == {"kb-daemons", "kb-drain", "kb-reconcile", "kb-backfill",
                            "kb-enqueue", "kb-tenants", "kb-status", "kb-demo", "kb-migrate"}
    for target in scripts.values():
        module, _, function = target.partition(":")
        assert callable(getattr(importlib.import_module(module), function)), target


def test_an_installed_console_script_runs_without_an_activated_venv(tmp_path: Path) -> None:
    script = Path(sys.executable).with_name("kb-status")
    if not script.exists():
        pytest.skip("the project is not installed into this interpreter's environment")
    env = {k: v for k, v in child_env(tmp_path).items() if k != "VIRTUAL_ENV"}
    env["PATH"] = "/usr/bin:/bin"
    result = subprocess.run([str(script), "--help"], env=env, capture_output=True, text=True,
                            timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    assert "status" in result.stdout
