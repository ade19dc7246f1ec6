"""A command's checks at the store door, before it sends a byte: a real listening door opened
by this process (so SO_PEERCRED names this pid), then each way it can be stale or hijacked by
someone who could write where it is. Every one is DoorClosed in one clause and the listener
receives nothing. (Another user's listener, through the commands: test_door_intruders.py.)"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from core.base.door.door_socket import (
    PID_NAME,
    DoorClosed,
    Listening,
    close_listening,
    connect_verified,
    door_folder,
    door_path,
    open_listening,
)
from tests.support import unix_socket_to


@pytest.fixture
def listening(tmp_path: Path) -> Iterator[Listening]:
    chroma = tmp_path / "chroma"
    chroma.mkdir()
    door = open_listening(chroma, backlog=4)
    yield door
    close_listening(door)


def chroma_of(door: Listening) -> Path:
    return door.folder.parent


def nothing_received(door: Listening) -> bool:
    """Whether every connection the door got (if any) carried no byte before it closed."""
    door.sock.setblocking(False)
    while True:
        try:
            conn, _ = door.sock.accept()
        except BlockingIOError:
            return True
        with conn:
            conn.settimeout(5)
            if conn.recv(1) != b"":
                return False


def test_a_door_of_this_user_listened_to_by_the_pid_it_names_is_connected(
        listening: Listening) -> None:
    sock, pid = connect_verified(chroma_of(listening), timeout=5)
    sock.close()
    assert pid == os.getpid()


def _symlinked_folder(door: Listening) -> None:
    real = door.folder.with_name("real-door")
    door.folder.rename(real)
    door.folder.symlink_to(real)


def _open_folder(door: Listening) -> None:
    door.folder.chmod(0o755)


def _file_for_socket(door: Listening) -> None:
    path = door_path(chroma_of(door))
    path.unlink()
    path.write_text("")
    path.chmod(0o600)


def _symlink_for_socket(door: Listening) -> None:
    path = door_path(chroma_of(door))
    moved = door.folder / "elsewhere"
    path.rename(moved)
    path.symlink_to(moved)


def _fifo_for_pid(door: Listening) -> None:
    (door.folder / PID_NAME).unlink()
    os.mkfifo(door.folder / PID_NAME, 0o600)


def _other_pid(door: Listening) -> None:
    (door.folder / PID_NAME).write_text("1\n")


def _garbage_pid(door: Listening) -> None:
    (door.folder / PID_NAME).write_text("kb-daemons\n")


def _no_pid(door: Listening) -> None:
    (door.folder / PID_NAME).unlink()


def _nothing_listens(door: Listening) -> None:
    door.sock.close()


@pytest.mark.parametrize(("tamper", "said"), [
    (_symlinked_folder, "is a symlink, not a folder"),
    (_open_folder, "is reachable by other users (mode 0755"),
    (_file_for_socket, "is a regular file, not a socket"),
    (_symlink_for_socket, "is a symlink, not a socket"),
    (_fifo_for_pid, "is a special file, not a regular file"),
    (_other_pid, "is pid {pid}, not the daemon the door names (pid 1)"),
    (_garbage_pid, "holds no pid"),
    (_no_pid, "is stale: it names no daemon"),
    (_nothing_listens, "is stale: nothing listens at it"),
])
def test_a_stale_or_hijacked_door_is_one_clause_and_gets_nothing(
        listening: Listening, tamper: Callable[[Listening], None], said: str) -> None:
    tamper(listening)
    with pytest.raises(DoorClosed) as closed:
        connect_verified(chroma_of(listening), timeout=5)
    message = str(closed.value)
    assert said.format(pid=os.getpid()) in message
    assert message.endswith("nothing was sent") and "\n" not in message
    if listening.sock.fileno() != -1:
        assert nothing_received(listening)


def test_no_door_at_all_says_no_daemon_serves_the_store(tmp_path: Path) -> None:
    with pytest.raises(DoorClosed, match=r"no daemon serves it \(no door .*\)"):
        connect_verified(tmp_path, timeout=5)
    assert not door_folder(tmp_path).exists()


def test_a_full_accept_queue_is_waited_for_then_reported_as_unreachable(
        listening: Listening) -> None:
    fillers = []
    try:
        for _ in range(64):  # fill the backlog of 4 (the kernel admits a few more)
            try:
                filler = unix_socket_to(door_path(chroma_of(listening)), blocking=False)
            except BlockingIOError:
                break
            fillers.append(filler)
        with pytest.raises(DoorClosed, match="accepts no connection"):
            connect_verified(chroma_of(listening), timeout=0.3)
    finally:
        for filler in fillers:
            filler.close()
