"""A small token-checking reverse proxy on 127.0.0.1, as a secured deployment puts in front of a
`chroma run` (Chroma 1.x's own server has no authentication): it serves the server under a path
prefix, lets through only requests that carry the expected token in the expected header, and
counts what it saw. Standard library only (http.server, http.client), one thread."""

from __future__ import annotations

import http.client
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

#: Headers that belong to one connection, not to the request being forwarded.
_HOP_BY_HOP = frozenset({"connection", "keep-alive", "proxy-authenticate",
                         "proxy-authorization", "te", "trailers", "transfer-encoding",
                         "upgrade", "host", "content-length"})


@dataclass
class ProxyLog:
    """What the proxy saw: requests let through, and requests refused (and why)."""

    forwarded: int = 0
    refused: list[str] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class TokenProxy:
    """A running proxy: its URL (prefix included) and its log."""

    url: str
    log: ProxyLog


def _handler(*, upstream_port: int, prefix: str, header: str, token: str,
             log: ProxyLog) -> type[BaseHTTPRequestHandler]:
    expected = f"Bearer {token}" if header == "Authorization" else token

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: object) -> None:
            """Quiet: the test reads `ProxyLog`."""

        def _reply(self, status: int, body: bytes, headers: list[tuple[str, str]]) -> None:
            self.send_response(status)
            for name, value in headers:
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _refuse(self, status: int, why: str) -> None:
            log.refused.append(why)
            body = json.dumps({"error": "Unauthorized" if status == 401 else "NotFound",
                               "message": why}).encode()
            self._reply(status, body, [("Content-Type", "application/json")])

        def _forward(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            if not (self.path == prefix or self.path.startswith(prefix + "/")):
                self._refuse(404, f"not under {prefix}")
                return
            if self.headers.get(header) != expected:
                self._refuse(401, f"missing or wrong {header}")
                return
            upstream = http.client.HTTPConnection("127.0.0.1", upstream_port, timeout=60)
            try:
                upstream.request(
                    self.command, self.path[len(prefix):] or "/", body=body or None,
                    headers={k: v for k, v in self.headers.items()
                             if k.lower() not in _HOP_BY_HOP})
                response = upstream.getresponse()
                payload = response.read()
                kept = [(k, v) for k, v in response.getheaders()
                        if k.lower() not in _HOP_BY_HOP]
            finally:
                upstream.close()
            log.forwarded += 1
            self._reply(response.status, payload, kept)

        do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = _forward

    return Handler


@contextmanager
def token_proxy(*, upstream_port: int, prefix: str, header: str, token: str
                ) -> Iterator[TokenProxy]:
    """Serve `http://127.0.0.1:<port><prefix>` -> `http://127.0.0.1:<upstream_port>` while
    inside, for requests whose `header` carries `token` (`Bearer` for Authorization)."""
    log = ProxyLog()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(
        upstream_port=upstream_port, prefix=prefix, header=header, token=token, log=log))
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, name="token-proxy", daemon=True)
    thread.start()
    try:
        yield TokenProxy(f"http://127.0.0.1:{server.server_address[1]}{prefix}", log)
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)
