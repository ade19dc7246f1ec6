"""Another local user against the store door, with real processes: a real `python -m daemons`
holding a real embedded store, a second Unix user created for this module, and the commands
as an operator types them.

The other user floods the daemon's door and sends it crafted first frames (a huge length, deep
nesting, the ndarray marker, bad UTF-8, the old secret, HELLO and a request); it squats a
stale door (a Unix socket moved where the door was, a loopback TCP port an old door file
names). What must hold: no byte of the daemon reaches it, no command sends it anything or
trusts it (one line, exit 1), the daemon's ticks go on and its memory stays bounded. The
folders on the way are opened to the other user where the test says so, so that what refuses
it is the uid check itself and not only a folder's mode.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from core.base.door.chroma_door import ENSURE_COLLECTION, HELLO, encode_frame
from core.base.door.door_socket import EARLIER_DOOR_FILE, PID_NAME, door_folder, door_path
from tests.other_user import OtherUser, finish, let_traverse, other_user
from tests.support import REPO, child_env, make_settings, run_module, unix_socket_to

#: A generous bound on what the daemon's peak resident memory may grow by during an attack
#: (the frame decoder of the TCP door allocated ~1 GB for one 200-byte frame).
MEMORY_GROWTH_MIB = 100


@pytest.fixture(scope="module")
def intruder() -> Iterator[OtherUser]:
    with other_user() as user:
        yield user


@pytest.fixture(scope="module")
def place() -> Iterator[Path]:
    """A folder of this module's own, which the other user may pass through (not list)."""
    folder = Path(tempfile.mkdtemp(prefix="kb-door-"))
    folder.chmod(0o711)
    yield folder
    subprocess.run(["rm", "-rf", str(folder)], check=False)


class Daemon:
    """`python -m daemons` on its own data folder, logging JSON to a file."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.config = root / "kb.toml"
        # A drain tick every 200 ms: the test sees ticks go on during an attack.
        self.config.write_text(f'[knowledgeBase]\ndataDir = "{root / "data"}"\n'
                               'logFormat = "json"\nremIntervalMs = 200\n')
        self.log = root / "daemon.log"
        self.chroma = root / "data" / "chroma"
        with self.log.open("w") as out:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "daemons", "--config", str(self.config)], cwd=REPO,
                env=child_env(root / "home"), stdout=out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 90
        while not door_path(self.chroma).exists():
            assert self.process.poll() is None, self.log.read_text()[-3000:]
            assert time.monotonic() < deadline, "the daemon never opened its store door"
            time.sleep(0.05)

    def events(self, name: str) -> list[dict[str, Any]]:
        lines = (json.loads(line) for line in self.log.read_text().splitlines()
                 if line.startswith("{"))
        return [event for event in lines if event.get("event") == name]

    def status_mib(self, field: str) -> float:
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith(f"{field}:"):
                return int(line.split()[1]) / 1024
        raise AssertionError(f"no {field} for pid {self.process.pid}")

    def reset_peak_memory(self) -> None:
        Path(f"/proc/{self.process.pid}/clear_refs").write_text("5")

    def stop(self) -> None:
        self.process.send_signal(signal.SIGINT)
        self.process.wait(timeout=60)


@pytest.fixture(scope="module")
def daemon(place: Path) -> Iterator[Daemon]:
    root = place / "daemon"
    root.mkdir()
    let_traverse(root)  # the data folder inside stays the daemon's own (0700)
    running = Daemon(root)
    yield running
    running.stop()
    assert running.process.returncode == 0, running.log.read_text()[-3000:]


def ticks_between(daemon: Daemon, start: float, end: float) -> int:
    from datetime import datetime

    stamps = [datetime.fromisoformat(e["timestamp"].replace("Z", "+00:00")).timestamp()
              for e in daemon.events("tick.completed") if e.get("daemon") == "drain"]
    return sum(start <= stamp <= end for stamp in stamps)


def own_session(path: Path) -> socket.socket:
    """A connection of the daemon's own user, past HELLO and the welcome (the test runs as
    that user; it connects by path, as root passes any folder's mode)."""
    sock = unix_socket_to(path)  # blocking: it waits while a flood fills the accept queue
    sock.settimeout(30)
    sock.sendall(HELLO)
    assert b"maxBatch" in receive_frame(sock)
    return sock


def receive_frame(sock: socket.socket) -> bytes:
    header = sock.recv(8, socket.MSG_WAITALL)
    assert len(header) == 8, header
    return sock.recv(int.from_bytes(header, "big"), socket.MSG_WAITALL)


def raw_frame(body: bytes) -> bytes:
    return len(body).to_bytes(8, "big") + body


def test_another_user_cannot_even_connect_to_the_door_as_the_daemon_made_it(
        daemon: Daemon, intruder: OtherUser) -> None:
    report = finish(intruder.start("flood", str(door_path(daemon.chroma)), "0.3", "10"))
    assert report["connected"] == 0, report
    assert set(report["errors"]) == {"EACCES"}, report


def test_another_users_flood_of_crafted_frames_is_closed_unread_while_the_ticks_go_on(
        daemon: Daemon, intruder: OtherUser) -> None:
    folder, sock_path = door_folder(daemon.chroma), door_path(daemon.chroma)
    let_traverse(daemon.chroma.parent, daemon.chroma, folder)
    sock_path.chmod(0o666)  # the door's own modes out of the way: the uid check alone
    try:
        daemon.reset_peak_memory()
        before = daemon.status_mib("VmRSS")
        started = time.time()
        flood = intruder.start("flood", str(sock_path), "3", "200")
        time.sleep(1.5)
        with own_session(sock_path) as mine:  # the daemon's own user is served meanwhile
            answers = []
            for method in (ENSURE_COLLECTION, "count"):
                mine.sendall(encode_frame({"collection": "door-probe", "method": method,
                                           "kwargs": {}}))
                answers.append(json.loads(receive_frame(mine)))
        report = finish(flood)
        ended = time.time()
        peak = daemon.status_mib("VmHWM")
    finally:
        sock_path.chmod(0o600)
        for traversed in (folder, daemon.chroma, daemon.chroma.parent):
            traversed.chmod(0o700)  # the commands refuse a data folder others can reach
    assert report["connected"] > 50, report  # it reached the socket: the uid check refused it
    assert report["received"] == 0, report
    assert answers == [{"result": None}, {"result": 0}], answers
    assert ticks_between(daemon, started, ended) >= 3
    assert peak - before < MEMORY_GROWTH_MIB, (before, peak)
    refused = [e for e in daemon.events("store_door.refused") if "another user" in e["reason"]]
    assert 1 <= len(refused) <= 3, refused  # counted, not one line per connection
    assert f"uid {intruder.uid}" in refused[0]["reason"]
    assert "Traceback" not in daemon.log.read_text()


@pytest.mark.parametrize("crafted", [
    pytest.param(encode_frame({"__kbNdarray__": [1], "dtype": "(100000,10000)f8"}),
                 id="ndarray-marker"),
    pytest.param(raw_frame(b"[" * 100_000), id="deep-nesting"),
    pytest.param(raw_frame(b'{"a": "\xff\xfe"}'), id="bad-utf8"),
    pytest.param((1 << 62).to_bytes(8, "big"), id="huge-length"),
])
def test_a_crafted_frame_from_the_daemons_own_user_ends_that_peer_with_one_line(
        daemon: Daemon, crafted: bytes) -> None:
    dropped_before = len(daemon.events("store_door.peer_dropped"))
    daemon.reset_peak_memory()
    before = daemon.status_mib("VmRSS")
    with own_session(door_path(daemon.chroma)) as mine:
        mine.sendall(crafted)
        assert mine.recv(1 << 16) == b""  # dropped, no answer
    deadline = time.monotonic() + 10
    while len(daemon.events("store_door.peer_dropped")) == dropped_before:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert daemon.status_mib("VmHWM") - before < MEMORY_GROWTH_MIB
    assert len(daemon.events("store_door.peer_dropped")) == dropped_before + 1
    assert "Traceback" not in daemon.log.read_text()


def test_commands_beyond_the_cap_are_turned_away_in_one_line_then_served(
        daemon: Daemon) -> None:
    from core.base.runtime.store_door import MAX_PEERS

    held = [own_session(door_path(daemon.chroma)) for _ in range(MAX_PEERS)]
    try:
        turned_away = run_module("daemons.reconcile", "--tick", "--dry-run",
                                 "--config", str(daemon.config), home=daemon.root / "home")
    finally:
        for sock in held:
            sock.close()
    served = run_module("daemons.reconcile", "--tick", "--dry-run", "--json",
                        "--config", str(daemon.config), home=daemon.root / "home")
    assert turned_away.returncode == 1
    assert turned_away.stderr.count("\n") == 1, turned_away.stderr
    assert "turned us away" in turned_away.stderr and "try again" in turned_away.stderr
    assert served.returncode == 0, served.stderr
    assert json.loads(served.stdout)["ok"] is True


# --------------------------------------------------------------------------------------------
# Squatters: the store held by a one-shot process, a door left behind, another user in it.
# --------------------------------------------------------------------------------------------


class HeldStore:
    """A data folder whose embedded store is held by a process that serves nothing."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.config = root / "kb.toml"
        self.config.write_text(f'[knowledgeBase]\ndataDir = "{root / "data"}"\n')
        settings = make_settings(root)
        self.chroma = settings.chroma.path

        async def create() -> None:
            from core.base.chroma import VectorStore

            vectors = await VectorStore.open(settings.chroma)
            await vectors.close()

        asyncio.run(create())
        self.holder = subprocess.Popen(
            [sys.executable, "-c", "import sys, time\n"
             "from pathlib import Path\n"
             "from core.base.io.locks import ProcessLock\n"
             "ProcessLock(Path(sys.argv[1]), purpose='store').acquire()\n"
             "print('held', flush=True)\n"
             "time.sleep(600)\n", str(self.chroma / ".kb-daemons.lock")],
            cwd=REPO, env=child_env(root / "home"), stdout=subprocess.PIPE, text=True)
        assert self.holder.stdout is not None and self.holder.stdout.readline() == "held\n"

    def leave_a_stale_door(self) -> None:
        """The door of a daemon killed with SIGKILL: its folder, pid and socket stay."""
        opened = subprocess.Popen(
            [sys.executable, "-c", "import sys, time\n"
             "from pathlib import Path\n"
             "from core.base.door.door_socket import open_listening\n"
             "open_listening(Path(sys.argv[1]), backlog=1)\n"
             "print('open', flush=True)\n"
             "time.sleep(600)\n", str(self.chroma)],
            cwd=REPO, env=child_env(self.root / "home"), stdout=subprocess.PIPE, text=True)
        assert opened.stdout is not None and opened.stdout.readline() == "open\n"
        opened.kill()
        opened.wait()
        assert door_path(self.chroma).is_socket()

    def command(self) -> subprocess.CompletedProcess[str]:
        return run_module("daemons.reconcile", "--tick", "--dry-run",
                          "--config", str(self.config), home=self.root / "home")

    def close(self) -> None:
        self.holder.kill()
        self.holder.wait()


@pytest.fixture(scope="module")
def held(place: Path) -> Iterator[HeldStore]:
    root = place / "held"
    root.mkdir()
    let_traverse(root)  # the other user reaches its den in it; the data folder stays 0700
    store = HeldStore(root)
    yield store
    store.close()


def assert_refused_in_one_line(result: subprocess.CompletedProcess[str], *words: str) -> None:
    assert result.returncode == 1, result
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "nothing was sent" in lines[0], lines[0]
    for word in words:
        assert word in lines[0], lines[0]


def squat_the_door(intruder: OtherUser, held: HeldStore) -> subprocess.Popen[str]:
    """The other user listens on a Unix socket of its own, which is then moved into a stale
    door in place of its socket, with the pid file naming the squatter (as if that user could
    write where the door is): only the checks of the socket's owner and of the listener's uid
    stand between it and a command."""
    held.leave_a_stale_door()
    door_path(held.chroma).unlink()
    den = held.root / f"den-{time.monotonic_ns()}"
    den.mkdir(mode=0o777)
    den.chmod(0o777)
    squatter = intruder.start("listen", "unix", str(den / "s"))
    assert squatter.stdout is not None and squatter.stdout.readline() == "ready\n"
    (den / "s").rename(door_path(held.chroma))
    (door_folder(held.chroma) / PID_NAME).write_text(f"{squatter.pid}\n")
    return squatter


def test_a_stale_door_and_an_old_tcp_door_file_are_one_line_and_nothing_reaches_the_squatter(
        held: HeldStore, intruder: OtherUser) -> None:
    held.leave_a_stale_door()
    squatter = intruder.start("listen", "tcp")
    assert squatter.stdout is not None
    port = int(squatter.stdout.readline().split()[1])
    (held.chroma / EARLIER_DOOR_FILE).write_text(json.dumps(
        {"pid": held.holder.pid, "port": port, "secret": "s" * 64}))
    result = held.command()
    report = finish(squatter)
    assert_refused_in_one_line(result, "is stale", "nothing listens")
    assert report == {"accepted": 0, "received": 0}


def test_another_users_socket_in_the_door_is_refused_by_its_owner_before_any_connect(
        held: HeldStore, intruder: OtherUser) -> None:
    squatter = squat_the_door(intruder, held)
    result = held.command()
    report = finish(squatter)
    assert_refused_in_one_line(result, "not to be trusted", f"belongs to uid {intruder.uid}")
    assert report == {"accepted": 0, "received": 0}


def test_another_users_listener_behind_a_socket_file_of_ours_gets_a_connect_and_no_byte(
        held: HeldStore, intruder: OtherUser) -> None:
    squatter = squat_the_door(intruder, held)
    os.chown(door_path(held.chroma), os.geteuid(), os.getegid(), follow_symlinks=False)
    door_path(held.chroma).chmod(0o600)
    result = held.command()
    report = finish(squatter)
    assert_refused_in_one_line(result, "not to be trusted", f"is uid {intruder.uid}")
    assert report == {"accepted": 1, "received": 0}
