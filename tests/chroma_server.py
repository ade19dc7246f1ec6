"""A real `chroma run` on 127.0.0.1 for server-mode tests: started, stopped, killed and
restarted on the same folder and port, as an operator's box would see it."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

#: How long a cold `chroma run` may take to answer its heartbeat on this machine.
START_TIMEOUT_S = 60.0


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class ChromaServer:
    """One `chroma run` process over `path`."""

    def __init__(self, path: Path, *, home: Path,
                 command_prefix: list[str] | None = None) -> None:
        self.path = path
        self.home = home
        #: How to start `chroma` (default: the venv's own); a test may wrap it (tests/mdwe.py).
        self.command_prefix = command_prefix or [str(Path(sys.executable).with_name("chroma"))]
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        """Start the server and wait for its heartbeat."""
        env = {**os.environ, "HOME": str(self.home), "ANONYMIZED_TELEMETRY": "False"}
        self.home.mkdir(parents=True, exist_ok=True)
        self.process = subprocess.Popen(
            [*self.command_prefix, "run", "--path", str(self.path), "--host", "127.0.0.1",
             "--port", str(self.port)],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True)
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"chroma run exited with {self.process.returncode}")
            try:
                with urllib.request.urlopen(f"{self.url}/api/v2/heartbeat", timeout=1):
                    return
            except OSError:
                time.sleep(0.2)
        self.stop()
        raise RuntimeError("chroma run did not answer its heartbeat in time")

    def stop(self) -> None:
        """A clean stop (SIGTERM)."""
        self._end(signal.SIGTERM)

    def kill(self) -> None:
        """A crash (SIGKILL)."""
        self._end(signal.SIGKILL)

    def _end(self, signum: int) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        os.killpg(self.process.pid, signum)
        try:
            self.process.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(15)
