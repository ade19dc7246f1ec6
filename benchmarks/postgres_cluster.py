"""A throwaway PostgreSQL 15 cluster in a temp folder: `initdb` + `pg_ctl`, as the machine's
`postgres` user. The test suite's server (`tests.postgres_server`) and the PostgreSQL
benchmarks (`benchmarks.postgres_bench`) both start theirs here, so there is one way to do it.

Sessions run as root and `initdb` refuses root, so the server runs as the `postgres` user (the
folder is made its own). It listens on a free loopback port and on a Unix socket in that
folder and trusts local connections (no password exists to leak). `durable` chooses between
the test suite's settings (fsync, synchronous commit and full-page writes off: a test checks
behaviour, not what survives a power cut) and a deployment's (PostgreSQL's defaults: every
commit flushed to disk), which is what a benchmark's figures must be measured on.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
from pathlib import Path

from tests.chroma_server import free_port

#: Where Debian's PostgreSQL 15 puts its programs (`.ci/run` installs it when missing).
PG_BIN = Path(os.environ.get("KB_TEST_PG_BIN", "/usr/lib/postgresql/15/bin"))
#: The user the server runs as (initdb refuses root).
PG_USER = "postgres"
#: How long one `initdb` / `pg_ctl` / `psql` step may take before the start is a failure.
STEP_TIMEOUT_S = 120
#: The test suite's server settings: nothing is flushed to disk.
FAST_SETTINGS = "-c fsync=off -c synchronous_commit=off -c full_page_writes=off"
#: A deployment's: PostgreSQL's own defaults, said out loud so the report can quote them.
DURABLE_SETTINGS = "-c fsync=on -c synchronous_commit=on -c full_page_writes=on"


class PostgresServer:
    """One PostgreSQL cluster in a temp folder; `url(db)` names a database on it."""

    def __init__(self, *, durable: bool = False, prefix: str = "kb-test-pg-") -> None:
        self.root = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
        self.data = self.root / "data"
        self.port = free_port()
        self.durable = durable

    def _as_server_user(self, *argv: str) -> subprocess.CompletedProcess[str]:
        command = list(argv)
        if os.geteuid() == 0:
            command = ["runuser", "-u", PG_USER, "--", *command]
        return subprocess.run(command, capture_output=True, text=True, check=False,
                              timeout=STEP_TIMEOUT_S)

    @property
    def server_settings(self) -> str:
        """The `-c` flags the server runs with (the figures' fine print)."""
        return DURABLE_SETTINGS if self.durable else FAST_SETTINGS

    def start(self) -> None:
        """initdb and start; raises RuntimeError with the server's own words when it cannot."""
        if not (PG_BIN / "initdb").exists():
            raise RuntimeError(f"PostgreSQL 15 not found in {PG_BIN} (run .ci/run to install)")
        if os.geteuid() == 0:
            entry = pwd.getpwnam(PG_USER)
            os.chown(self.root, entry.pw_uid, entry.pw_gid)
        self.root.chmod(0o700)
        steps = [
            [str(PG_BIN / "initdb"), "-D", str(self.data), "-U", PG_USER, "--auth=trust",
             "--no-sync", "--locale=C.UTF-8", "-E", "UTF8"],
            self._pg_ctl("start"),
        ]
        for step in steps:
            self._run_step(step)

    def _pg_ctl(self, action: str, *flags: str) -> list[str]:
        """`pg_ctl ACTION` on this cluster, with its port, socket folder, settings and log."""
        return [str(PG_BIN / "pg_ctl"), "-D", str(self.data), "-w", "-t", "60", "-l",
                str(self.root / "server.log"), "-o",
                f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 "
                f"{self.server_settings}", *flags, action]

    def _run_step(self, step: list[str]) -> None:
        done = self._as_server_user(*step)
        if done.returncode != 0:
            raise RuntimeError(f"{Path(step[0]).name} failed: {done.stdout}{done.stderr}")

    def restart(self, *, mode: str = "fast") -> None:
        """Restart the server on the same folder and port, as an operator or a failover does:
        every session ends (`fast`: rolled back; `immediate`: a crash and its recovery)."""
        self._run_step(self._pg_ctl("restart", "-m", mode))

    def halt(self, *, mode: str = "fast") -> None:
        """Stop the server, keeping its folder, until `resume`."""
        self._run_step([str(PG_BIN / "pg_ctl"), "-D", str(self.data), "-w", "-m", mode, "stop"])

    def resume(self) -> None:
        """Start the server `halt` stopped, on the same folder and port."""
        self._run_step(self._pg_ctl("start"))

    def url(self, database: str = "postgres") -> str:
        """A URL as an operator writes `stateUrl`: host, port, database, no password."""
        return f"postgresql://{PG_USER}@127.0.0.1:{self.port}/{database}"

    def create_database(self, name: str) -> str:
        """Create an empty database; its URL."""
        done = subprocess.run(
            [str(PG_BIN / "psql"), "-h", "127.0.0.1", "-p", str(self.port), "-U", PG_USER,
             "-d", "postgres", "-v", "ON_ERROR_STOP=1", "-qc", f'CREATE DATABASE "{name}"'],
            capture_output=True, text=True, check=False, timeout=STEP_TIMEOUT_S)
        if done.returncode != 0:
            raise RuntimeError(f"CREATE DATABASE {name} failed: {done.stderr}")
        return self.url(name)

    def stop(self) -> None:
        """Stop the server (fast) and remove its folder."""
        self._as_server_user(str(PG_BIN / "pg_ctl"), "-D", str(self.data), "-m", "fast",
                             "stop")
        shutil.rmtree(self.root, ignore_errors=True)
