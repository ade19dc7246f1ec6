"""The producer side of the queue: the lock protocol, `enqueue`'s all-or-nothing checks, and the
one-shot drain command's exit codes."""

from __future__ import annotations

import errno
import fcntl
import json
import os
import resource
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from core.drain.stores.queue_files import (
    append_locked,
    append_stream_locked,
    enqueue_edges,
    new_segment,
    rotate_queue,
    sidecar_path,
)
from tests.support import REPO, child_env, run_module


def edge(i: int) -> bytes:
    return json.dumps({"source": "CONCEPT:a", "target": f"CONCEPT:{i}",
                       "relationship": "R"}).encode()


def test_a_producer_waiting_on_the_lock_during_rotation_writes_to_the_new_queue(
    tmp_path: Path,
) -> None:
    queue = tmp_path / "q.jsonl"
    draining = tmp_path / "q.jsonl.draining"
    queue.write_bytes(edge(0) + b"\n")
    holder = os.open(queue, os.O_RDONLY)
    fcntl.flock(holder, fcntl.LOCK_EX)  # the drainer holds the producers' lock
    producer = threading.Thread(target=append_locked, args=(queue, [edge(1)]))
    producer.start()
    time.sleep(0.1)
    assert producer.is_alive(), "the producer must wait for the lock"
    os.rename(queue, draining)  # the drainer rotates while holding it
    fcntl.flock(holder, fcntl.LOCK_UN)
    os.close(holder)
    producer.join(5)
    assert draining.read_bytes() == edge(0) + b"\n", "nothing written into the rotated file"
    assert queue.read_bytes() == edge(1) + b"\n"


def test_rotation_refuses_to_overwrite_a_leftover_draining_file(tmp_path: Path) -> None:
    queue = tmp_path / "q.jsonl"
    draining = tmp_path / "q.jsonl.draining"
    queue.write_bytes(edge(1) + b"\n")
    draining.write_bytes(edge(0) + b"\n")
    with pytest.raises(FileExistsError):
        rotate_queue(queue, draining, new_segment(now_ms=0, dead_letters_size=0))
    assert draining.read_bytes() == edge(0) + b"\n" and queue.exists()


def test_an_empty_queue_is_not_rotated(tmp_path: Path) -> None:
    queue = tmp_path / "q.jsonl"
    queue.write_bytes(b"")
    draining = tmp_path / "q.jsonl.draining"
    assert rotate_queue(queue, draining, new_segment(now_ms=0, dead_letters_size=0)) is False
    assert not sidecar_path(draining).exists(), "no sidecar without a rotation"


def test_enqueue_appends_nothing_when_any_line_is_malformed(tmp_path: Path) -> None:
    queue = tmp_path / "q.jsonl"
    problems = enqueue_edges(queue, [edge(1), b"", b"null", edge(2), b"{oops"])
    assert [(p.number, p.detail.split(":")[0]) for p in problems] == [
        (3, "a line must be a JSON object, got null"), (5, "invalid JSON")]
    assert not queue.exists()
    assert enqueue_edges(queue, [edge(1), b"", edge(2)]) == []
    assert queue.read_bytes() == edge(1) + b"\n" + edge(2) + b"\n"


def run(args: list[str], tmp_path: Path, stdin: bytes = b"") -> subprocess.CompletedProcess[str]:
    return run_module(*args, home=tmp_path / "home", stdin=stdin.decode())


def write_config(tmp_path: Path, extra: str = "") -> Path:
    config = tmp_path / "kb.toml"
    config.write_text(f'[knowledgeBase]\ndataDir = "data"\nlogFormat = "json"\n{extra}')
    return config


def test_enqueue_command_names_each_bad_line_and_exits_2(tmp_path: Path) -> None:
    config = write_config(tmp_path)
    result = run(["daemons.enqueue", "--config", str(config)], tmp_path,
                 stdin=edge(1) + b"\n[]\n" + edge(2) + b"\n{\n")
    assert result.returncode == 2
    err = result.stderr
    assert "line 2: a line must be a JSON object, got array" in err
    assert "line 4: invalid JSON" in err
    assert not (tmp_path / "data/memory-core/lazy-edges.jsonl").exists()


def test_enqueue_json_is_one_object_whether_it_appends_or_refuses(tmp_path: Path) -> None:
    config = write_config(tmp_path)
    refused = run(["daemons.enqueue", "--json", "--config", str(config)], tmp_path,
                  stdin=edge(1) + b"\n[]\n")
    assert refused.returncode == 2
    (shown,) = refused.stdout.splitlines()
    assert json.loads(shown)["ok"] is False
    assert json.loads(shown)["malformedLines"] == [
        {"line": 2, "detail": "a line must be a JSON object, got array"}]
    appended = run(["daemons.enqueue", "--json", "--config", str(config)], tmp_path,
                   stdin=edge(1) + b"\n" + edge(2) + b"\n")
    assert appended.returncode == 0, appended.stderr
    (shown,) = appended.stdout.splitlines()
    assert json.loads(shown) == {"ok": True, "appended": 2,
                                 "queue": str(tmp_path / "data/memory-core/lazy-edges.jsonl")}


def test_enqueue_then_drain_tick_links_the_edges(tmp_path: Path) -> None:
    config = write_config(tmp_path)
    queue = tmp_path / "data/memory-core/lazy-edges.jsonl"
    appended = run(["daemons.enqueue", "--config", str(config)], tmp_path,
                   stdin=b"\n".join(edge(i) for i in range(3)) + b"\n")
    assert appended.returncode == 0, appended.stderr
    assert len(queue.read_bytes().splitlines()) == 3
    result = run(["daemons.drain", "--tick", "--json", "--config", str(config)], tmp_path)
    assert result.returncode == 0, result.stderr
    figures = json.loads(result.stdout)
    # CONCEPT endpoints are never back-filled: all three go back to the queue.
    assert figures["ok"] is True
    assert figures["drain"]["requeued"] == 3 and figures["drain"]["totalLines"] == 3
    assert len(queue.read_bytes().splitlines()) == 3
    assert not (tmp_path / "home").exists() or not any((tmp_path / "home").iterdir())


def test_drain_tick_exits_1_when_the_store_is_unreachable_and_keeps_the_lines(
    tmp_path: Path,
) -> None:
    config = write_config(tmp_path, 'chromaUrl = "http://127.0.0.1:9"\n')
    queue = tmp_path / "data/memory-core/lazy-edges.jsonl"
    queue.parent.mkdir(parents=True)
    queue.write_bytes(edge(1) + b"\n")
    result = run(["daemons.drain", "--tick", "--json", "--config", str(config)], tmp_path)
    assert result.returncode == 1
    assert json.loads(result.stdout)["ok"] is False
    assert "Chroma server http://127.0.0.1:9" in result.stderr.splitlines()[-1]
    assert queue.read_bytes() == edge(1) + b"\n"


def test_a_config_syntax_error_is_exit_2_with_one_line(tmp_path: Path) -> None:
    config = tmp_path / "kb.toml"
    config.write_text("[knowledgeBase]\nremIntervalMs = \n")
    result = run(["daemons.drain", "--tick", "--config", str(config)], tmp_path)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and f"{config}:2:" in lines[0]


def test_an_unknown_flag_is_exit_2_naming_it(tmp_path: Path) -> None:
    result = run(["daemons.drain", "--tik"], tmp_path)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "--tik" in lines[0]


def queue_of(tmp_path: Path) -> Path:
    return tmp_path / "data/memory-core/lazy-edges.jsonl"


def file_size_limited(limit: int) -> Callable[[], None]:
    """A child whose files cannot grow past `limit` bytes: writes beyond it fail with EFBIG,
    as on a full disk (Python ignores SIGXFSZ, so the write returns the error)."""

    def limit_file_size() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return limit_file_size


def test_enqueue_on_a_full_disk_appends_nothing_and_exits_1(tmp_path: Path) -> None:
    config = write_config(tmp_path)
    queue = queue_of(tmp_path)
    queue.parent.mkdir(parents=True)
    queue.write_bytes(edge(1) + b"\n" + edge(2) + b"\n" + b'{"torn": ')  # a crashed producer
    before = queue.read_bytes()
    lines = b"".join(edge(i) + b"\n" for i in range(100))
    done = subprocess.run(
        [sys.executable, "-m", "daemons.enqueue", "--config", str(config)], input=lines,
        cwd=REPO, env=child_env(tmp_path / "home"), capture_output=True, timeout=120,
        preexec_fn=file_size_limited(len(before) + len(lines) // 2), check=False)
    assert done.returncode == 1, done.stderr.decode()
    assert "nothing appended" in done.stderr.decode().strip().splitlines()[-1]
    assert queue.read_bytes() == before, "cut back to its size before the write, under the lock"


def test_a_write_that_fails_part_way_is_cut_back_and_the_lock_released(tmp_path: Path) -> None:
    queue = tmp_path / "q.jsonl"
    queue.write_bytes(edge(0) + b"\n")

    def fails_after_one_chunk() -> Iterator[bytes]:
        yield edge(1) + b"\n"
        raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.raises(OSError, match="No space"):
        append_stream_locked(queue, fails_after_one_chunk())
    assert queue.read_bytes() == edge(0) + b"\n"
    append_locked(queue, [edge(2)])  # the lock was released
    assert queue.read_bytes() == edge(0) + b"\n" + edge(2) + b"\n"


def test_enqueue_strips_the_drainers_bookkeeping_so_a_fed_back_line_is_new(
    tmp_path: Path,
) -> None:
    config = write_config(tmp_path)
    requeued = json.dumps({"source": "CONCEPT:a", "target": "CONCEPT:b", "relationship": "R",
                           "_drain": {"lineId": "0" * 32 + ":0", "attempts": 9}}).encode()
    done = run(["daemons.enqueue", "--config", str(config)], tmp_path,
               stdin=requeued + b"\n" + edge(3) + b"\n")
    assert done.returncode == 0, done.stderr
    first, second = queue_of(tmp_path).read_bytes().splitlines()
    assert json.loads(first) == {"source": "CONCEPT:a", "target": "CONCEPT:b",
                                 "relationship": "R"}
    assert second == edge(3), "a line without bookkeeping is appended byte for byte"


@pytest.fixture
def symlinked_queue(tmp_path: Path) -> tuple[Path, Path, Path]:
    config = write_config(tmp_path)
    target = tmp_path / "elsewhere" / "real-queue.jsonl"
    target.parent.mkdir()
    target.write_bytes(edge(1) + b"\n")
    link = queue_of(tmp_path)
    link.parent.mkdir(parents=True)
    link.symlink_to(target)
    return config, link, target


@pytest.mark.parametrize("command", [["daemons.drain", "--tick"], ["daemons.drain"],
                                     ["daemons.enqueue"]])
def test_a_symlinked_queue_path_is_refused_with_one_line_and_nothing_moves(
    symlinked_queue: tuple[Path, Path, Path], tmp_path: Path, command: list[str]
) -> None:
    config, link, target = symlinked_queue
    done = run([*command, "--config", str(config)], tmp_path, stdin=edge(2) + b"\n")
    assert done.returncode == 2
    [message] = done.stderr.strip().splitlines()[-1:]
    assert "is a symbolic link" in message and str(link) in message
    assert link.is_symlink() and link.resolve() == target.resolve()
    assert target.read_bytes() == edge(1) + b"\n"
    assert not link.with_name(link.name + ".draining").exists()
