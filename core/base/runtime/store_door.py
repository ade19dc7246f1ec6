"""The daemon's side of the store door: it serves the embedded Chroma store it holds to the
commands run beside it (`core.base.door.chroma_door` says why and how it is kept safe, and
`core.base.door.door_socket` where the door is and how each side checks the other).

`serve()` opens the door whenever it holds an embedded store, so every way of starting a daemon
behaves alike.

What it guarantees, whatever a peer sends:
- **Another user's process is closed before a byte is read**, at accept (SO_PEERCRED).
- **A few peers at once.** At most `max_peers` connections of the daemon's own user are served
  at a time; any further one is turned away at accept with one short refusal frame.
- **Bounded before HELLO.** A peer must send the fixed HELLO bytes within `hello_timeout_s`;
  nothing else is read or decoded before them. After it, frames are bounded
  (`MAX_FRAME_BYTES`) and each request must arrive within `idle_timeout_s` of the last answer.
- **A peer's failure is the peer's.** Any exception in a peer's handler ends that peer with
  one warning line and no traceback; the accept loop, the other peers and the ticks go on.
- **Refusals are counted, not logged one by one**: at most one warning line per
  `REFUSAL_LOG_INTERVAL_S` says how many were refused and why the last one was.
- **Closed before the store**: first no new peer (the socket unlinked and closed), then the
  connections, each ended where it waits.
"""

from __future__ import annotations

import asyncio
import os
import socket
import time
from collections.abc import Callable
from contextlib import suppress
from pathlib import Path
from typing import Any

import structlog

from core.base.chroma import VectorStore
from core.base.door.chroma_door import (
    ENSURE_COLLECTION,
    HEADER_BYTES,
    HELLO,
    PEER_METHODS,
    decode_body,
    encode_frame,
    error_payload,
    frame_length,
)
from core.base.door.door_socket import (
    Listening,
    close_listening,
    door_folder,
    open_listening,
    peer_of,
)
from core.base.rules.door_trust import Peer, peer_uid_problem
from core.base.rules.errors import StoreUnavailable

log = structlog.get_logger(__name__)

#: How many commands the door serves at once: bounds the daemon's descriptors and memory.
MAX_PEERS = 8
#: Connections the kernel queues for the door before it accepts them (kernel memory only; a
#: command finding the queue full tries again for CONNECT_TIMEOUT_S).
LISTEN_BACKLOG = 64
#: A peer must send HELLO within this many seconds of connecting (a command sends it at once).
HELLO_TIMEOUT_S = 5.0
#: A peer that sends no request for this long is stuck or gone, and is ended.
IDLE_TIMEOUT_S = 600.0
#: At most one `store_door.refused` line in this many seconds, whatever the refusal rate.
REFUSAL_LOG_INTERVAL_S = 10.0
#: After a failed accept (out of descriptors), the door waits this long before the next one,
#: so a flood cannot spin the event loop.
ACCEPT_BACKOFF_S = 0.1


class RefusalLog:
    """Refused connections, counted, with one warning line at most per `interval_s`: the first
    refusal is logged at once, later ones with the next line (or at `flush`)."""

    def __init__(self, *, interval_s: float = REFUSAL_LOG_INTERVAL_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._interval_s = interval_s
        self._clock = clock
        self._unlogged = 0
        self._last_line: float | None = None

    def note(self, reason: str, **fields: Any) -> None:
        """Count one refusal; log it (with the count since the last line) unless a line was
        written within the interval."""
        self._unlogged += 1
        now = self._clock()
        if self._last_line is None or now - self._last_line >= self._interval_s:
            log.warning("store_door.refused", reason=reason, refused=self._unlogged, **fields)
            self._unlogged, self._last_line = 0, now

    def flush(self) -> None:
        """Log the refusals not logged yet (at close)."""
        if self._unlogged:
            log.warning("store_door.refused", reason="(counted since the last line)",
                        refused=self._unlogged)
            self._unlogged = 0


class StoreDoor:
    """A listening door to one open VectorStore; `close()` shuts it."""

    def __init__(self, vectors: VectorStore, listening: Listening, *, max_peers: int,
                 hello_timeout_s: float, idle_timeout_s: float) -> None:
        self._vectors = vectors
        self._listening = listening
        self._max_peers = max_peers
        self._hello_timeout_s = hello_timeout_s
        self._idle_timeout_s = idle_timeout_s
        self._peers: set[asyncio.Task[None]] = set()
        self._refusals = RefusalLog()
        self._accepting: asyncio.Task[None] | None = None

    @classmethod
    async def open(cls, vectors: VectorStore, chroma_path: Path, *,
                   max_peers: int = MAX_PEERS, hello_timeout_s: float = HELLO_TIMEOUT_S,
                   idle_timeout_s: float = IDLE_TIMEOUT_S) -> StoreDoor:
        """Open the door (`door_socket.open_listening`) and start accepting; StoreUnavailable
        (one line) when the door's place cannot be made this daemon's."""
        try:
            listening = open_listening(chroma_path, backlog=LISTEN_BACKLOG)
        except OSError as exc:
            raise StoreUnavailable(f"cannot open the store door {door_folder(chroma_path)}: "
                                   f"{exc.strerror or exc}") from None
        door = cls(vectors, listening, max_peers=max_peers, hello_timeout_s=hello_timeout_s,
                   idle_timeout_s=idle_timeout_s)
        door._accepting = asyncio.create_task(door._accept_peers(), name="store-door")
        log.info("store_door.open", store=vectors.description, door=str(listening.folder),
                 maxPeers=max_peers)
        return door

    async def close(self) -> None:
        """Stop accepting, remove the door (if still ours), end the connections."""
        if self._accepting is not None:
            self._accepting.cancel()
            await asyncio.gather(self._accepting, return_exceptions=True)
            self._accepting = None
            close_listening(self._listening)
        for task in list(self._peers):
            task.cancel()
        await asyncio.gather(*self._peers, return_exceptions=True)
        self._refusals.flush()

    async def _accept_peers(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                conn, _ = await loop.sock_accept(self._listening.sock)
            except Exception as exc:  # out of descriptors and the like: wait, then go on
                reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
                self._refusals.note(f"accept failed: {reason}")
                await asyncio.sleep(ACCEPT_BACKOFF_S)
                continue
            try:
                self._admit(conn)
            except Exception as exc:  # the door keeps accepting whatever one peer did
                conn.close()
                self._refusals.note(f"{type(exc).__name__}: {exc}")

    def _admit(self, conn: socket.socket) -> None:
        """Close another user's connection unread, turn one away over the cap, else serve it."""
        peer = peer_of(conn)
        problem = peer_uid_problem(peer, my_uid=os.geteuid())
        if problem is not None:
            conn.close()
            self._refusals.note(f"another user's process: {problem}", peerPid=peer.pid,
                                peerUid=peer.uid)
            return
        if len(self._peers) >= self._max_peers:
            with suppress(OSError):  # a small frame into an empty buffer: it never blocks
                conn.send(encode_frame({"refused": f"it serves {self._max_peers} commands "
                                                   "at once already; try again"}))
            conn.close()
            self._refusals.note("busy", peerPid=peer.pid, maxPeers=self._max_peers)
            return
        task = asyncio.create_task(self._serve_peer(conn, peer), name=f"door-peer-{peer.pid}")
        self._peers.add(task)
        task.add_done_callback(self._peers.discard)

    async def _serve_peer(self, conn: socket.socket, peer: Peer) -> None:
        writer: asyncio.StreamWriter | None = None
        try:
            reader, writer = await asyncio.open_unix_connection(sock=conn)
            async with asyncio.timeout(self._hello_timeout_s):
                hello = await reader.readexactly(len(HELLO))
            if hello != HELLO:
                raise ValueError("its first bytes are not the store door's HELLO")
            await self._send(writer, {"maxBatch": self._vectors.max_batch})
            log.info("store_door.peer_in", peerPid=peer.pid)
            while (request := await self._next_request(reader)) is not None:
                await self._send(writer, await self._answer(request))
        except Exception as exc:  # whatever it was, it ends this peer only, in one line
            reason = " ".join(f"{type(exc).__name__}: {exc}".split())[:300]
            log.warning("store_door.peer_dropped", peerPid=peer.pid, reason=reason)
        finally:
            if writer is None:
                conn.close()
            else:
                writer.close()
                with suppress(Exception):
                    await writer.wait_closed()

    async def _next_request(self, reader: asyncio.StreamReader) -> Any:
        """The next request, or None when the peer closed between two (its command is done)."""
        async with asyncio.timeout(self._idle_timeout_s):
            try:
                header = await reader.readexactly(HEADER_BYTES)
            except asyncio.IncompleteReadError as eof:
                if not eof.partial:
                    return None
                raise
            body = await reader.readexactly(frame_length(header))
        return decode_body(body)

    async def _send(self, writer: asyncio.StreamWriter, message: dict[str, Any]) -> None:
        writer.write(encode_frame(message))
        async with asyncio.timeout(self._idle_timeout_s):  # a peer that stops reading ends
            await writer.drain()

    async def _answer(self, request: Any) -> dict[str, Any]:
        """One call's answer: `{"result": ...}` or `{"error": ...}` (the store's own error, to
        be rebuilt by the peer; a request outside PEER_METHODS is refused as a ValueError)."""
        try:
            if not isinstance(request, dict):
                raise ValueError("a store door request is a JSON object")
            name, method = request.get("collection"), request.get("method")
            kwargs = request.get("kwargs") or {}
            if not (isinstance(name, str) and isinstance(kwargs, dict)
                    and (method in PEER_METHODS or method == ENSURE_COLLECTION)):
                raise ValueError(f"the store door does not serve {str(method)[:60]!r}")
            return {"result": await self._vectors.call_for_peer(name, method, kwargs)}
        except Exception as exc:
            return {"error": error_payload(exc)}
