"""When the store door may be trusted (pure verdicts over what the kernel says)."""

from __future__ import annotations

import pytest

from core.base.rules.door_trust import (
    FILE,
    FOLDER,
    SOCKET,
    SYMLINK,
    Entry,
    Peer,
    door_pid,
    entry_problem,
    listener_problem,
    peer_uid_problem,
)

ME = 1000


@pytest.mark.parametrize(("entry", "expected", "said"), [
    (Entry(FOLDER, ME, 0o700), FOLDER, None),
    (Entry(SOCKET, ME, 0o600), SOCKET, None),
    (Entry(SOCKET, ME, 0o400), SOCKET, None),
    (Entry(SYMLINK, ME, 0o777), FOLDER, "door is a symlink, not a folder"),
    (Entry(FILE, ME, 0o600), SOCKET, "door is a regular file, not a socket"),
    (Entry(SOCKET, 1001, 0o600), SOCKET, "door belongs to uid 1001, not to this user (uid 1000)"),
    (Entry(FOLDER, ME, 0o701), FOLDER, "door is reachable by other users (mode 0701"),
    (Entry(FOLDER, ME, 0o750), FOLDER, "door is reachable by other users (mode 0750"),
    (Entry(SOCKET, ME, 0o602), SOCKET, "door is reachable by other users (mode 0602"),
])
def test_an_entry_is_trusted_only_of_its_kind_ours_and_owner_only(
        entry: Entry, expected: str, said: str | None) -> None:
    problem = entry_problem("door", entry, expected=expected, my_uid=ME)
    if said is None:
        assert problem is None
    else:
        assert problem is not None and problem.startswith(said), problem


def test_a_listener_is_trusted_only_as_this_user_and_the_pid_the_door_names() -> None:
    assert listener_problem(Peer(pid=42, uid=ME), my_uid=ME, door_pid=42) is None
    assert listener_problem(Peer(pid=42, uid=1001), my_uid=ME, door_pid=42) == (
        "the process listening at it is uid 1001 (pid 42), not this user (uid 1000)")
    assert listener_problem(Peer(pid=43, uid=ME), my_uid=ME, door_pid=42) == (
        "the process listening at it is pid 43, not the daemon the door names (pid 42)")


def test_a_peer_of_another_uid_is_refused_whatever_its_pid() -> None:
    assert peer_uid_problem(Peer(pid=1, uid=ME), my_uid=ME) is None
    assert peer_uid_problem(Peer(pid=1, uid=0), my_uid=ME) is not None


@pytest.mark.parametrize(("text", "pid"), [
    ("4242\n", 4242), ("7", 7), ("0\n", None), ("-5\n", None), ("", None),
    ("12 34\n", None), ("٣\n", None), ("99999999999\n", None), ("pid 1\n", None),
])
def test_the_pid_file_names_one_positive_decimal_pid_or_nothing(text: str, pid: int | None) -> None:
    assert door_pid(text) == pid
