"""The files operators deploy: systemd units and the systemd config."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from core.config import load_config
from core.runtime import SHUTDOWN_GRACE_S, STALL_LIMIT_S

ROOT = Path(__file__).resolve().parent.parent
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
    assert loaded.settings.server_mode and loaded.settings.reconciliation_enabled


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


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="no systemd-analyze here")
def test_units_pass_systemd_analyze_verify() -> None:
    result = subprocess.run(["systemd-analyze", "verify", *map(str, UNITS)],
                            capture_output=True, text=True, check=False)
    problems = [line for line in (result.stdout + result.stderr).splitlines()
                if line.strip() and "is not executable" not in line]  # /opt is not installed here
    assert problems == []
