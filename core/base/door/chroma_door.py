"""The store door's client side and the wire format both sides share (the socket and its
checks: `core.base.door.door_socket`; the daemon's side: `core.base.runtime.store_door`).

An embedded store admits one process, so `python -m daemons` holds it under an exclusive lock
while it runs. A command started beside it (`kb-reconcile explain`, `restore`, a `--tick`,
`kb-backfill`, the demo) that finds the lock held asks the daemon to run each of its Chroma
calls on the daemon's open store. Everything else (flags, SQLite, the decisions, the output,
the exit code) happens in the command's own process, so its output is the same by
construction.

Why it is safe:
- **Same user only, checked by the kernel both ways** (SO_PEERCRED; how:
  `core.base.door.door_socket`): the daemon closes another user's connection before reading
  a byte, and a command sends nothing before it has verified the door. There is no secret.
- **Nothing decoded for a peer not yet let in.** A command first sends HELLO, fixed bytes the
  daemon compares; after it, frames are bounded (MAX_FRAME_BYTES) and arrays only of plain
  numeric dtypes (`ARRAY_DTYPES`).
- **Serialized with the daemon's own work.** A peer's call runs on the daemon's one Chroma
  thread, between its own calls, as two processes' calls on one Chroma server interleave; the
  store's own rules still hold (`restore` adds only absent ids, a delete removes only what
  its `where` matches when it runs).
- **Only collection reads and writes**: `PEER_METHODS` on a named collection, and creating a
  missing one; nothing else of the client (no reset, no drop) is reachable.

A command that finds the lock held and no daemon it can trust answering (no door, a stale one,
another user's, a daemon still starting) gets LockHeld: one line, exit 1, nothing sent.
"""

from __future__ import annotations

import json
import socket
import struct
from collections.abc import Callable, Mapping
from contextlib import suppress
from pathlib import Path
from typing import Any

from core.base.door.door_socket import DoorClosed, connect_verified, door_path

__all__ = ["DaemonStoreClient", "DoorClosed", "door_path"]

#: The compound a pass deletes by (`ChromaWrites.delete_unchanged`): read by id, compare,
#: delete the identical rows, run by the daemon as one call on its one Chroma thread.
DELETE_UNCHANGED = "delete_unchanged"
#: The collection methods a peer may call (reads and the writes the commands make).
PEER_METHODS = frozenset({"count", "get", "add", "upsert", "delete", DELETE_UNCHANGED})
#: The pseudo-method that creates a missing collection (`get_or_create_collection`).
ENSURE_COLLECTION = "ensure_collection"
#: What a command sends first, once it has verified the daemon: fixed bytes, compared by the
#: daemon as they are (nothing is decoded before them); the version names this wire format.
HELLO = b"kb-daemons store door 2\n"
#: How long a command waits for one call's answer (behind at most the one daemon call in
#: progress): past it the daemon is stuck, and the command fails rather than hang.
PEER_CALL_TIMEOUT_S = 600.0
#: How long a command waits to connect and be let in.
CONNECT_TIMEOUT_S = 5.0
#: The largest frame either side accepts once the other is let in; larger is a broken peer.
MAX_FRAME_BYTES = 1 << 30
#: The largest answer to HELLO (the welcome, or why the daemon turns the command away).
WELCOME_FRAME_BYTES = 4_096
#: The only dtypes an array crossing the door may have: plain numbers. Any other dtype string
#: (a subarray shape such as "(9999,9999)f8", an object dtype) is refused before numpy sees
#: it, so a frame's size bounds the memory its arrays take.
ARRAY_DTYPES = frozenset({"float16", "float32", "float64", "int8", "int16", "int32", "int64",
                          "uint8", "uint16", "uint32", "uint64", "bool"})
_LENGTH = struct.Struct(">Q")
_NDARRAY = "__kbNdarray__"

#: Rebuilds a store error raised in the daemon from the names of its class's MRO and its
#: message, so the command's VectorStore maps it exactly as it would have mapped the original.
ErrorRebuilder = Callable[[list[tuple[str, str]], str], Exception]


# --------------------------------------------------------------------------------------------
# Wire format: frames of an 8-byte big-endian length and a JSON object.
# --------------------------------------------------------------------------------------------


def _default(value: Any) -> Any:
    """JSON for numpy arrays (rebuilt with their dtype on the other side) and scalars."""
    tolist = getattr(value, "tolist", None)
    if tolist is not None and getattr(value, "ndim", None) is not None:
        if value.ndim == 0:
            return value.item()
        return {_NDARRAY: tolist(), "dtype": str(value.dtype)}
    raise TypeError(f"{type(value).__name__} cannot cross the store door")


def _object_hook(value: dict[str, Any]) -> Any:
    if len(value) == 2 and _NDARRAY in value and "dtype" in value:
        dtype, items = value["dtype"], value[_NDARRAY]
        if not isinstance(dtype, str) or dtype not in ARRAY_DTYPES or not isinstance(items, list):
            raise ValueError(f"an array of dtype {str(dtype)[:40]!r} cannot cross the store door")
        import numpy

        return numpy.asarray(items, dtype=dtype)
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
    """A frame's JSON object (numpy arrays of ARRAY_DTYPES restored); ValueError for bad UTF-8,
    bad JSON or another array, RecursionError for nesting deeper than Python's limit."""
    return json.loads(body.decode("utf-8"), object_hook=_object_hook)


HEADER_BYTES = _LENGTH.size


def error_payload(exc: BaseException) -> dict[str, Any]:
    """How a store error crosses the door: its class's MRO by (module, name), and its text."""
    return {"classes": [[cls.__module__, cls.__qualname__] for cls in type(exc).__mro__],
            "message": str(exc)}


# --------------------------------------------------------------------------------------------
# Client side (blocking: it runs on the command's one Chroma thread, like a chromadb client).
# --------------------------------------------------------------------------------------------


class DaemonStoreClient:
    """A chromadb client look-alike whose collection calls run in the daemon that holds the
    store (only what `core.base.chroma.VectorStore` uses of a client)."""

    def __init__(self, sock: socket.socket, *, max_batch: int, daemon_pid: int,
                 rebuild_error: ErrorRebuilder) -> None:
        self._sock = sock
        self._max_batch = max_batch
        self.daemon_pid = daemon_pid
        self._rebuild_error = rebuild_error

    @classmethod
    def connect(cls, chroma_path: Path, *, rebuild_error: ErrorRebuilder) -> DaemonStoreClient:
        """Reach the daemon serving the store at `chroma_path` once the door is verified
        (nothing is sent before), then say HELLO; DoorClosed saying why when refused."""
        try:
            sock, pid = connect_verified(chroma_path, timeout=CONNECT_TIMEOUT_S)
        except OSError as exc:
            raise DoorClosed(f"its door cannot be checked: {exc}; nothing was sent") from None
        try:
            # A daemon serving its cap turns us away at accept, before reading HELLO: its
            # refusal frame is already ours to read, whether or not HELLO could be written.
            with suppress(BrokenPipeError, ConnectionResetError):
                sock.sendall(HELLO)
            welcome = _receive_frame(sock, limit=WELCOME_FRAME_BYTES)
            if isinstance(welcome, dict) and isinstance(welcome.get("refused"), str):
                raise DoorClosed(f"the daemon at its door (pid {pid}) turned us away: "
                                 f"{welcome['refused']}")
            if not isinstance(welcome, dict) or not isinstance(welcome.get("maxBatch"), int):
                raise DoorClosed(f"the process at its door (pid {pid}) is not its daemon")
            sock.settimeout(PEER_CALL_TIMEOUT_S)
            return cls(sock, max_batch=welcome["maxBatch"], daemon_pid=pid,
                       rebuild_error=rebuild_error)
        except (OSError, ValueError, RecursionError) as exc:
            sock.close()
            raise DoorClosed(f"the daemon at its door (pid {pid}) did not let us in: "
                             f"{exc}") from None
        except BaseException:
            sock.close()
            raise

    def call(self, name: str, method: str, kwargs: Mapping[str, Any]) -> Any:
        """`collection(name).<method>(**kwargs)` in the daemon: its result, or its error
        rebuilt (a lost connection is a ConnectionError: the store is unavailable)."""
        try:
            self._sock.sendall(encode_frame({"collection": name, "method": method,
                                             "kwargs": dict(kwargs)}))
            answer = _receive_frame(self._sock)
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


def _receive_frame(sock: socket.socket, *, limit: int = MAX_FRAME_BYTES) -> Any:
    length = frame_length(_receive(sock, HEADER_BYTES), limit=limit)
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
