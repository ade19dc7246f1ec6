"""Each daemon its own metrics port from one config: the drain and the reconcile daemon run as
two processes (as two systemd units run them, on a real `chroma run`, since an embedded store
serves one process) with one config file holding `drainMetricsPort` and
`reconcileMetricsPort`; each serves on its own, and a port that is taken stops that daemon
with exit 2 naming the key it came from."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from tests.chroma_server import ChromaServer
from tests.support import REPO, child_env, run_module


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def scrape(port: int) -> str | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as answer:
            return str(answer.read().decode())
    except (urllib.error.URLError, ConnectionError):
        return None


def start(module: str, config: Path, home: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", module, "--config", str(config)],
                            cwd=REPO, env=child_env(home), stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)


def stop(process: subprocess.Popen[bytes]) -> str:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
    _, err = process.communicate(timeout=60)
    return err.decode(errors="replace")


def test_two_daemons_from_one_config_serve_metrics_on_their_own_ports(
    tmp_path: Path, chroma: ChromaServer
) -> None:
    drain_port, reconcile_port, shared_port = free_port(), free_port(), free_port()
    config = tmp_path / "kb.toml"
    config.write_text('[knowledgeBase]\ndataDir = "data"\nlogFormat = "json"\n'
                      f'chromaUrl = "{chroma.url}"\n'
                      f"metricsPort = {shared_port}\ndrainMetricsPort = {drain_port}\n"
                      f"reconcileMetricsPort = {reconcile_port}\n", encoding="utf-8")
    drain = start("daemons.drain", config, tmp_path / "home")
    reconcile = start("daemons.reconcile", config, tmp_path / "home")
    try:
        deadline = time.monotonic() + 90
        texts: dict[int, str | None] = {drain_port: None, reconcile_port: None}
        while None in texts.values():
            assert time.monotonic() < deadline, "a daemon never served its port"
            assert drain.poll() is None and reconcile.poll() is None, "a daemon exited"
            texts = {port: scrape(port) for port in texts}
            time.sleep(0.2)
        drain_text, reconcile_text = texts[drain_port], texts[reconcile_port]
        assert drain_text is not None and reconcile_text is not None
        # Each port is its own daemon's: only the reconcile daemon is elected to lead.
        assert "kb_reconcile_is_leader 0.0" in drain_text
        assert "kb_reconcile_is_leader 1.0" in reconcile_text
        assert scrape(shared_port) is None, "metricsPort is for both daemons in one process"
    finally:
        errors = stop(drain) + stop(reconcile)
    assert drain.returncode == 0 and reconcile.returncode == 0, errors[-2000:]


def test_a_taken_daemon_port_is_exit_2_naming_its_key(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        config = tmp_path / "kb.toml"
        config.write_text(f'[knowledgeBase]\ndataDir = "data"\ndrainMetricsPort = {port}\n',
                          encoding="utf-8")
        done = run_module("daemons.drain", "--config", str(config), home=tmp_path / "home",
                          timeout=120)
    assert done.returncode == 2, done.stderr
    assert f"drainMetricsPort = {port}: 127.0.0.1:{port} is taken" in done.stderr
