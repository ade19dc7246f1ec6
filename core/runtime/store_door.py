"""The daemon's side of the store door: it serves the embedded Chroma store it holds to the
commands run beside it (`core.stores.chroma_door` says why and how it is kept safe).

`serve()` opens the door whenever it holds an embedded store, so every way of starting a daemon
(`python -m daemons`, `python -m daemons.drain`, `python -m daemons.reconcile`, `make
run-daemons`, the units) behaves alike. The door listens on 127.0.0.1 only, lets in a peer
that sends the secret of the 0600 door file, and runs each of its calls on the store's one
Chroma thread. It is closed before the store: first no new peer, then the connections, then
the door file (only when it is still ours).
"""

from __future__ import annotations

import asyncio
import hmac
import json
import os
import secrets
from contextlib import suppress
from pathlib import Path
from typing import Any

import structlog

from core.stores.chroma import VectorStore
from core.stores.chroma_door import (
    ENSURE_COLLECTION,
    HEADER_BYTES,
    MAX_FRAME_BYTES,
    PEER_METHODS,
    decode_body,
    door_path,
    encode_frame,
    error_payload,
    frame_length,
    read_door,
    write_private_file,
)

log = structlog.get_logger(__name__)

#: A peer must send the secret within this many seconds of connecting.
AUTH_TIMEOUT_S = 5.0
#: The largest first frame (the secret) a peer may send: a peer not yet let in cannot make
#: the daemon hold more than this.
AUTH_FRAME_BYTES = 4_096


class StoreDoor:
    """A listening door to one open VectorStore; `close()` shuts it."""

    def __init__(self, vectors: VectorStore, path: Path, secret: str) -> None:
        self._vectors = vectors
        self._path = path
        self._secret = secret
        self._server: asyncio.Server | None = None
        self._peers: set[asyncio.Task[None]] = set()

    @classmethod
    async def open(cls, vectors: VectorStore, chroma_path: Path) -> StoreDoor:
        """Listen on a kernel-chosen loopback port and write the door file (0600)."""
        door = cls(vectors, door_path(chroma_path), secrets.token_hex(32))
        door._server = await asyncio.start_server(door._serve_peer, host="127.0.0.1", port=0)
        port = door._server.sockets[0].getsockname()[1]
        write_private_file(door._path, json.dumps(
            {"pid": os.getpid(), "port": port, "secret": door._secret}) + "\n")
        log.info("store_door.open", store=vectors.description, port=port)
        return door

    async def close(self) -> None:
        """Stop letting peers in, end their connections, remove the door file if ours."""
        if self._server is not None:
            self._server.close()
            self._server = None
        for task in list(self._peers):
            task.cancel()
        await asyncio.gather(*self._peers, return_exceptions=True)
        with suppress(OSError, ValueError, KeyError, TypeError):
            if read_door(self._path).secret == self._secret:
                self._path.unlink()

    async def _serve_peer(self, reader: asyncio.StreamReader,
                          writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._peers.add(task)
        try:
            async with asyncio.timeout(AUTH_TIMEOUT_S):
                hello = await _read_frame(reader, limit=AUTH_FRAME_BYTES)
            offered = hello.get("secret") if isinstance(hello, dict) else None
            if not isinstance(offered, str) or not hmac.compare_digest(
                    offered.encode(), self._secret.encode()):
                log.warning("store_door.refused", reason="wrong secret")
                return
            writer.write(encode_frame({"maxBatch": self._vectors.max_batch}))
            await writer.drain()
            log.info("store_door.peer_in")
            while True:
                try:
                    request = await _read_frame(reader)
                except asyncio.IncompleteReadError:
                    return  # the peer closed its connection: its command is done
                writer.write(encode_frame(await self._answer(request)))
                await writer.drain()
        except (OSError, ValueError, TimeoutError, asyncio.IncompleteReadError) as exc:
            log.warning("store_door.peer_dropped", reason=str(exc) or type(exc).__name__)
        finally:
            self._peers.discard(task)
            writer.close()
            with suppress(Exception):
                await writer.wait_closed()

    async def _answer(self, request: Any) -> dict[str, Any]:
        """One call's answer: `{"result": ...}` or `{"error": ...}` (the store's own error, to
        be rebuilt by the peer; a request outside PEER_METHODS is refused as a ValueError)."""
        try:
            name, method = request["collection"], request["method"]
            kwargs = request.get("kwargs") or {}
            if not (isinstance(name, str) and isinstance(kwargs, dict)
                    and (method in PEER_METHODS or method == ENSURE_COLLECTION)):
                raise ValueError(f"the store door does not serve {method!r}")
            return {"result": await self._vectors.call_for_peer(name, method, kwargs)}
        except Exception as exc:
            return {"error": error_payload(exc)}


async def _read_frame(reader: asyncio.StreamReader, *, limit: int = MAX_FRAME_BYTES) -> Any:
    length = frame_length(await reader.readexactly(HEADER_BYTES), limit=limit)
    return decode_body(await reader.readexactly(length))
