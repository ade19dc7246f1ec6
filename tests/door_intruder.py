"""What another local user tries against the store door (run by `tests/other_user.py` as that
user; stdlib only). It prints one JSON line with what it saw, for the test to judge.

    flood SOCKET SECONDS MAXOPEN   connect again and again for SECONDS, keeping up to MAXOPEN
                                   connections open, each sent one crafted first frame (a huge
                                   length, deep nesting, the ndarray marker, bad UTF-8, the old
                                   secret, HELLO and a request); counts every byte received
    listen unix PATH               squat: listen on a Unix socket at PATH ("ready" once it
                                   listens) until stdin closes; counts connections and bytes
    listen tcp                     the same on a loopback TCP port (prints "ready PORT")
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import select
import socket
import struct
import sys
import time

HELLO = b"kb-daemons store door 2\n"


def frame(body: bytes) -> bytes:
    return struct.pack(">Q", len(body)) + body


CRAFTED = [
    struct.pack(">Q", 1 << 62) + b"x" * 100,
    frame(b"[" * 100_000),
    frame(b'{"__kbNdarray__": [1], "dtype": "(100000,10000)f8"}'),
    frame(b'{"secret": "\xff\xfe\xfd"}'),
    frame(b'{"secret": "' + b"0" * 64 + b'"}'),
    HELLO + frame(b'{"collection": "neo-knowledge-base", "method": "get", "kwargs": {}}'),
]


def flood(path: str, seconds: float, max_open: int) -> dict[str, object]:
    connected, received = 0, 0
    errors: dict[str, int] = {}
    opened: list[socket.socket] = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(1.0)
        try:
            sock.connect(path)
            connected += 1
            sock.sendall(CRAFTED[connected % len(CRAFTED)])
        except OSError as exc:
            name = errno.errorcode.get(exc.errno or 0, type(exc).__name__)
            errors[name] = errors.get(name, 0) + 1
            if name not in ("EPIPE", "ECONNRESET"):
                sock.close()
                time.sleep(0.01)
                continue
        sock.setblocking(False)
        opened.append(sock)
        if len(opened) > max_open:
            opened.pop(0).close()
        received += drain(opened)
    time.sleep(0.2)
    received += drain(opened)
    for sock in opened:
        sock.close()
    return {"connected": connected, "received": received, "errors": errors}


def drain(opened: list[socket.socket]) -> int:
    got = 0
    for sock in opened:
        with contextlib.suppress(OSError):
            got += len(sock.recv(1 << 16))
    return got


def listen(kind: str, path: str | None) -> dict[str, object]:
    if kind == "unix":
        assert path is not None
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        server.bind(path)
        os.chmod(path, 0o777)  # whoever it is moved to may connect
        server.listen(16)
        print("ready", flush=True)
    else:
        server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        server.bind(("127.0.0.1", 0))
        server.listen(16)
        print(f"ready {server.getsockname()[1]}", flush=True)
    accepted, received = 0, 0
    peers: list[socket.socket] = []
    while True:
        ready, _, _ = select.select([server, sys.stdin, *peers], [], [], 5.0)
        if sys.stdin in ready and not sys.stdin.readline():
            break
        if server in ready:
            conn, _ = server.accept()
            accepted += 1
            peers.append(conn)
        for peer in [p for p in peers if p in ready]:
            data = peer.recv(1 << 16)
            received += len(data)
            if not data:
                peers.remove(peer)
                peer.close()
    return {"accepted": accepted, "received": received}


def main(argv: list[str]) -> None:
    if argv[0] == "flood":
        report = flood(argv[1], float(argv[2]), int(argv[3]))
    else:
        report = listen(argv[1], argv[2] if len(argv) > 2 else None)
    print(json.dumps(report), flush=True)


main(sys.argv[1:])
