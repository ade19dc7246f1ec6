"""The door to an embedded Chroma store held by a running daemon: how a command beside the
daemon reaches the store the daemon has open (the client side, and the wire format both sides
share; the daemon's side is `core.runtime.store_door`).

Why a door: an embedded store admits one process, so `python -m daemons` (what `make
run-daemons` and the units run) holds it under an exclusive lock for as long as it runs. A
command started beside it (`kb-reconcile explain`, `restore`, a `--tick`, `kb-backfill`, the
demo) that finds that lock held asks the daemon instead: the daemon runs each of the command's
Chroma calls on its own open store and sends back the result. Everything else (flags, SQLite,
the decisions, the output, the exit code) happens in the command's own process, exactly as
when it runs alone, so its output and exit codes are the same by construction; only where the
Chroma calls run changes.

Why it is safe:
- **Same user only.** The daemon listens on 127.0.0.1 (never another interface) on a port the
  kernel picks, and writes the port with a random 256-bit secret into `<chromaPath>/DOOR_NAME`,
  created with mode 0600. A peer must send that secret first or is disconnected, so only a
  process that can read the store's own folder as its owner gets in.
- **Serialized with the daemon's own work.** The daemon runs a peer's call on its one Chroma
  thread, between its own calls, as the calls of two processes on one Chroma server
  interleave. Nothing a command does goes around the store's own rules: `restore` still adds
  only absent ids (preserve-live, decided by the store), and a pass still deletes only what
  its `where` matches when the delete runs.
- **Only collection reads and writes.** A peer may call `count`, `get`, `add`, `upsert` and
  `delete` on a named collection and create a missing one; nothing else of the client (no
  reset, no drop) is reachable.
- **The daemon's drain is untouched.** The daemon itself keeps its in-process store (no
  network hop in its own calls); the door costs it one idle listening socket.

A command that finds the lock held and no daemon answering (the holder is another kind of
process, or a daemon still starting) gets LockHeld: one line, exit 1, nothing done.
"""

from __future__ import annotations

import json
import os
import socket
import struct
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: The door file inside an embedded store folder: `{"pid", "port", "secret"}`, mode 0600.
DOOR_NAME = ".kb-daemons.door"
#: The collection methods a peer may call (reads and the writes the commands make).
PEER_METHODS = frozenset({"count", "get", "add", "upsert", "delete"})
#: The pseudo-method that creates a missing collection (`get_or_create_collection`).
ENSURE_COLLECTION = "ensure_collection"
#: How long a command waits for one call's answer. A peer's call waits behind at most the one
#: daemon call in progress on the Chroma thread (a page, a batch, a delete: seconds), so ten
#: minutes means the daemon is stuck; the command then fails (exit 1) rather than hang.
PEER_CALL_TIMEOUT_S = 600.0
#: How long a command waits to connect and be let in.
CONNECT_TIMEOUT_S = 5.0
#: The largest frame either side accepts (a page of 5,000 rows with their embeddings is tens of
#: MB); anything larger is a broken or hostile peer.
MAX_FRAME_BYTES = 1 << 30
_LENGTH = struct.Struct(">Q")
_NDARRAY = "__kbNdarray__"

#: Rebuilds a store error raised in the daemon from the names of its class's MRO and its
#: message, so the command's VectorStore maps it exactly as it would have mapped the original.
ErrorRebuilder = Callable[[list[tuple[str, str]], str], Exception]


def door_path(chroma_path: Path) -> Path:
    """The door file of the embedded store at `chroma_path`."""
    return chroma_path / DOOR_NAME


# --------------------------------------------------------------------------------------------
# Wire format: frames of an 8-byte big-endian length and a JSON object.
# --------------------------------------------------------------------------------------------


def _default(value: Any) -> Any:
    """JSON for what Chroma hands back besides plain values: numpy arrays (kept as arrays of
    the same dtype on the other side, so a result reads as it would in-process) and scalars."""
    tolist = getattr(value, "tolist", None)
    if tolist is not None and getattr(value, "ndim", None) is not None:
        if value.ndim == 0:
            return value.item()
        return {_NDARRAY: tolist(), "dtype": str(value.dtype)}
    raise TypeError(f"{type(value).__name__} cannot cross the store door")


def _object_hook(value: dict[str, Any]) -> Any:
    if len(value) == 2 and _NDARRAY in value and "dtype" in value:
        import numpy

        return numpy.asarray(value[_NDARRAY], dtype=value["dtype"])
    return value


def encode_frame(message: Mapping[str, Any]) -> bytes:
    """One frame: the length, then the JSON (floats exact: JSON carries float64 round-trip)."""
    body = json.dumps(message, default=_default, separators=(",", ":")).encode("utf-8")
    return _LENGTH.pack(len(body)) + body


def frame_length(header: bytes, *, limit: int = MAX_FRAME_BYTES) -> int:
    """The body length a frame's header announces; ValueError when beyond `limit`."""
    (length,) = _LENGTH.unpack(header)
    if length > limit:
        raise ValueError(f"frame of {length} bytes refused (at most {limit})")
    return int(length)


def decode_body(body: bytes) -> Any:
    """A frame's JSON object (numpy arrays restored)."""
    return json.loads(body.decode("utf-8"), object_hook=_object_hook)


HEADER_BYTES = _LENGTH.size


def error_payload(exc: BaseException) -> dict[str, Any]:
    """How a store error crosses the door: its class's MRO by (module, name), and its text."""
    return {"classes": [[cls.__module__, cls.__qualname__] for cls in type(exc).__mro__],
            "message": str(exc)}


# --------------------------------------------------------------------------------------------
# Client side (blocking: it runs on the command's one Chroma thread, like a chromadb client).
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DoorFile:
    """What the daemon wrote: who it is, where it listens, the secret a peer must send."""

    pid: int
    port: int
    secret: str


def read_door(path: Path) -> DoorFile:
    """The door file's content; OSError or ValueError when absent or unreadable."""
    data = json.loads(path.read_text(encoding="utf-8"))
    return DoorFile(int(data["pid"]), int(data["port"]), str(data["secret"]))


class DoorClosed(Exception):
    """No daemon answers at the door (why is the message)."""


class DaemonStoreClient:
    """A chromadb client look-alike whose collection calls run in the daemon that holds the
    store (only what `core.stores.chroma.VectorStore` uses of a client)."""

    def __init__(self, sock: socket.socket, *, max_batch: int, daemon_pid: int,
                 rebuild_error: ErrorRebuilder) -> None:
        self._sock = sock
        self._max_batch = max_batch
        self.daemon_pid = daemon_pid
        self._rebuild_error = rebuild_error

    @classmethod
    def connect(cls, chroma_path: Path, *, rebuild_error: ErrorRebuilder) -> DaemonStoreClient:
        """Knock at the door of the store at `chroma_path`; DoorClosed saying why when no
        daemon lets us in (no door file, nothing listening, a wrong secret)."""
        path = door_path(chroma_path)
        try:
            door = read_door(path)
        except FileNotFoundError:
            raise DoorClosed(f"no daemon serves it (no {path})") from None
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise DoorClosed(f"its door file {path} is unreadable: {exc}") from None
        try:
            sock = socket.create_connection(("127.0.0.1", door.port), timeout=CONNECT_TIMEOUT_S)
        except OSError as exc:
            raise DoorClosed(f"no daemon answers at its door (pid {door.pid}, "
                             f"127.0.0.1:{door.port}: {exc.strerror or exc})") from None
        try:
            welcome = _exchange(sock, {"secret": door.secret})
            if not isinstance(welcome, dict) or not isinstance(welcome.get("maxBatch"), int):
                raise DoorClosed(f"the process at 127.0.0.1:{door.port} is not its daemon")
            sock.settimeout(PEER_CALL_TIMEOUT_S)
            return cls(sock, max_batch=welcome["maxBatch"], daemon_pid=door.pid,
                       rebuild_error=rebuild_error)
        except (OSError, ValueError) as exc:
            sock.close()
            raise DoorClosed(f"the daemon at its door (pid {door.pid}) did not let us in: "
                             f"{exc}") from None
        except BaseException:
            sock.close()
            raise

    def call(self, name: str, method: str, kwargs: Mapping[str, Any]) -> Any:
        """`collection(name).<method>(**kwargs)` in the daemon: its result, or its error
        rebuilt (a lost connection is a ConnectionError: the store is unavailable)."""
        try:
            answer = _exchange(self._sock, {"collection": name, "method": method,
                                            "kwargs": dict(kwargs)})
        except (OSError, ValueError) as exc:
            raise ConnectionError(f"the daemon (pid {self.daemon_pid}) holding the store "
                                  f"stopped answering: {exc}") from exc
        if "error" in answer:
            error = answer["error"]
            raise self._rebuild_error([tuple(c) for c in error["classes"]], error["message"])
        return answer.get("result")

    def get_max_batch_size(self) -> int:
        return self._max_batch

    def get_collection(self, name: str, **_: Any) -> _PeerCollection:
        return _PeerCollection(self, name)

    def get_or_create_collection(self, name: str, **_: Any) -> _PeerCollection:
        self.call(name, ENSURE_COLLECTION, {})
        return _PeerCollection(self, name)

    def close(self) -> None:
        self._sock.close()


class _PeerCollection:
    """A collection whose methods run in the daemon."""

    def __init__(self, door: DaemonStoreClient, name: str) -> None:
        self._door = door
        self._name = name

    def __getattr__(self, method: str) -> Callable[..., Any]:
        if method not in PEER_METHODS:
            raise AttributeError(method)
        return lambda **kwargs: self._door.call(self._name, method, kwargs)


def _exchange(sock: socket.socket, message: Mapping[str, Any]) -> Any:
    sock.sendall(encode_frame(message))
    length = frame_length(_receive(sock, HEADER_BYTES))
    return decode_body(_receive(sock, length))


def _receive(sock: socket.socket, size: int) -> bytes:
    chunks: list[bytes] = []
    left = size
    while left:
        chunk = sock.recv(min(left, 1 << 20))
        if not chunk:
            raise ConnectionError("connection closed")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def write_private_file(path: Path, text: str) -> None:
    """Write `text` to `path` readable by its owner only (0600 from creation, then renamed in:
    no moment where another user could read it, no torn file)."""
    temporary = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    temporary.unlink(missing_ok=True)
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.write(fd, text.encode("utf-8"))
        os.fsync(fd)
    finally:
        os.close(fd)
    temporary.replace(path)
