"""The daemon's store door in this process, over a real embedded store: owner-only whatever the
umask, in a store folder deeper than a socket address; peers that say nothing or fall silent
are dropped in one line; a door left behind is reclaimed and one put in its place by someone
else fails the start; refusals are counted into few lines. (Another user's processes against
a real daemon: tests/runtime/test_door_intruders.py.)"""

from __future__ import annotations

import asyncio
import os
import socket
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import structlog.testing

from core.base.chroma import VectorStore
from core.base.chroma.errors import peer_error
from core.base.door.chroma_door import ENSURE_COLLECTION, HELLO, DaemonStoreClient, decode_body
from core.base.door.door_socket import EARLIER_DOOR_FILE, PID_NAME, door_folder, door_path
from core.base.rules.errors import LockHeld, StoreUnavailable
from core.base.rules.rows import ChromaRow, content_digests
from core.base.runtime.store_door import RefusalLog, StoreDoor
from tests.support import make_settings, unix_socket_to


@pytest.fixture
async def vectors(tmp_path: Path) -> AsyncIterator[VectorStore]:
    store = await VectorStore.open(make_settings(tmp_path).chroma)
    yield store
    await store.close()


@pytest.fixture
def umask_0() -> Iterator[None]:
    previous = os.umask(0)
    yield
    os.umask(previous)


def mode(path: Path) -> int:
    return path.lstat().st_mode & 0o777


async def in_thread(call: Any, *args: Any) -> Any:
    return await asyncio.get_running_loop().run_in_executor(None, call, *args)


def knock(path: Path, first: bytes) -> bytes:
    """Connect as this user, send `first`, return all the daemon sends before it hangs up."""
    with unix_socket_to(path) as sock:
        sock.settimeout(30)
        sock.sendall(first)
        received = b""
        while chunk := sock.recv(1 << 16):
            received += chunk
        return received


async def test_a_door_deeper_than_a_socket_address_is_owner_only_under_umask_0_and_serves(
        tmp_path: Path, umask_0: None) -> None:
    deep = tmp_path.joinpath(*["a-rather-long-folder-name"] * 6)
    settings = make_settings(deep)
    assert len(os.fsencode(door_path(settings.chroma.path))) > 108
    store = await VectorStore.open(settings.chroma)
    door = await StoreDoor.open(store, settings.chroma.path)
    try:
        folder = door_folder(settings.chroma.path)
        assert (mode(folder), mode(door_path(settings.chroma.path)),
                mode(folder / PID_NAME)) == (0o700, 0o600, 0o600)
        client = await in_thread(lambda: DaemonStoreClient.connect(
            settings.chroma.path, rebuild_error=peer_error))
        try:
            assert client.daemon_pid == os.getpid()
            await in_thread(client.call, "door-probe", ENSURE_COLLECTION, {})
            assert await in_thread(client.call, "door-probe", "count", {}) == 0
        finally:
            client.close()
    finally:
        await door.close()
        await store.close()
    assert not folder.exists(), "the door stays behind"


async def test_a_peer_that_says_no_hello_or_no_request_in_time_is_dropped_in_one_line(
        tmp_path: Path, vectors: VectorStore) -> None:
    chroma = make_settings(tmp_path).chroma.path
    door = await StoreDoor.open(vectors, chroma, hello_timeout_s=0.2, idle_timeout_s=0.3)
    try:
        with structlog.testing.capture_logs() as logged:
            silent = await in_thread(knock, door_path(chroma), b"")
            idle = await in_thread(knock, door_path(chroma), HELLO)
    finally:
        await door.close()
    assert silent == b""
    assert b"maxBatch" in idle  # let in, then dropped for sending no request
    dropped = [e for e in logged if e["event"] == "store_door.peer_dropped"]
    assert [e["reason"].split(":")[0] for e in dropped] == ["TimeoutError", "TimeoutError"]
    assert all("exc_info" not in e for e in dropped)


async def test_a_leftover_door_of_this_user_is_reclaimed_and_an_old_tcp_door_file_removed(
        tmp_path: Path, vectors: VectorStore) -> None:
    chroma = make_settings(tmp_path).chroma.path
    folder = door_folder(chroma)
    folder.mkdir(mode=0o755)
    folder.chmod(0o755)
    (folder / PID_NAME).write_text("1\n")
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        with socket.socket(socket.AF_UNIX) as dead:  # bound, never listening, closed: stale
            dead.bind(f"/proc/self/fd/{fd}/{door_path(chroma).name}")
    finally:
        os.close(fd)
    (chroma / EARLIER_DOOR_FILE).write_text('{"pid": 1, "port": 9, "secret": "s"}\n')
    door = await StoreDoor.open(vectors, chroma)
    try:
        assert mode(folder) == 0o700
        assert (folder / PID_NAME).read_text() == f"{os.getpid()}\n"
        assert not (chroma / EARLIER_DOOR_FILE).exists()
        client = await in_thread(lambda: DaemonStoreClient.connect(
            chroma, rebuild_error=peer_error))  # the command's checks pass on it
        assert client.daemon_pid == os.getpid()
        client.close()
    finally:
        await door.close()


@pytest.mark.parametrize("taken_by", ["symlink", "regular file"])
async def test_a_door_place_taken_by_something_else_fails_the_start_in_one_line(
        tmp_path: Path, vectors: VectorStore, taken_by: str) -> None:
    chroma = make_settings(tmp_path).chroma.path
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    if taken_by == "symlink":
        door_folder(chroma).symlink_to(elsewhere)
    else:
        door_folder(chroma).write_text("")
    with pytest.raises(StoreUnavailable) as refused:
        await StoreDoor.open(vectors, chroma)
    message = str(refused.value)
    assert "\n" not in message
    assert message.startswith("refusing to open the store door")
    assert f"is a {taken_by}, not a folder" in message
    assert list(elsewhere.iterdir()) == []


def test_refusals_within_the_interval_are_counted_into_the_next_line() -> None:
    now = [0.0]
    refusals = RefusalLog(interval_s=10.0, clock=lambda: now[0])
    with structlog.testing.capture_logs() as logged:
        for second in (0.0, 1.0, 2.0, 3.0, 11.0, 12.0):
            now[0] = second
            refusals.note("another user's process", peerUid=1001)
        refusals.flush()
    assert [e["refused"] for e in logged] == [1, 4, 1]


def test_an_array_of_any_dtype_but_plain_numbers_is_refused_before_numpy_allocates() -> None:
    # A subarray dtype would make numpy allocate 8 TB for this one element.
    with pytest.raises(ValueError, match="cannot cross the store door"):
        decode_body(b'{"__kbNdarray__": [1], "dtype": "(1000000,1000000)f8"}')
    assert decode_body(b'{"__kbNdarray__": [[1.5]], "dtype": "float32"}').dtype == "float32"


async def test_a_command_s_compare_then_delete_runs_in_the_daemon_and_keeps_a_rewritten_row(
        tmp_path: Path) -> None:
    # A pass beside the daemon deletes through the door: the compound (re-read, compare,
    # delete the identical rows) runs in the daemon as one call on its one Chroma thread.
    settings = make_settings(tmp_path)
    store = await VectorStore.open(settings.chroma)
    door = await StoreDoor.open(store, settings.chroma.path)
    peer = await VectorStore._open_via_daemon(settings.chroma, "peer", LockHeld("held"))
    try:
        rows = [ChromaRow(i, {"tenantId": "t"}, f"doc {i}", [0.5, 0.25]) for i in ("a", "b")]
        await store.upsert("kb-door", rows, create=True)
        page = await peer.get_page("kb-door", ids=["a", "b"])
        digests = content_digests(page)
        await store.upsert("kb-door", [ChromaRow("b", {"tenantId": "t"}, "corrected", [0.5, 0.25])])
        done = await peer.delete_unchanged("kb-door", ids=["a", "b", "c"],
                                           digests=[digests["a"], digests["b"], "0" * 64],
                                           where={"tenantId": "t"})
        assert (done.deleted, done.changed, done.missing) == (1, ("b",), ("c",))
        [left] = await store.get_by_ids("kb-door", ["a", "b"], include=("documents",))
        assert (left.id, left.document) == ("b", "corrected")
    finally:
        await peer.close()
        await door.close()
        await store.close()
