"""A small token-checking reverse proxy on 127.0.0.1, as a secured deployment puts in front of a
`chroma run` (Chroma 1.x's own server has no authentication): it serves the server under a path
prefix, lets through only requests that carry the expected token in the expected header, and
counts what it saw. Standard library only (http.server, http.client), one thread.

An echoing proxy (`echo`) answers its refusals with the request quoted back in every encoding
a debugging proxy uses (`request_echo`), as the attack on issue 31 found; `secret_encodings_in`
is the tests' own detector of a secret in any of them, independent of the scrubber."""

from __future__ import annotations

import base64
import http.client
import json
import re
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import quote, unquote

#: Bytes of a secret the detector looks for: any run this long of it counts as a leak.
LEAK_WINDOW = 12
#: When the proxy refuses a request in an echo (a wrong token, or `echo` says so): how.
EchoRule = Callable[[str, str], bool]


def request_echo(raw: bytes) -> str:
    """A refusal that quotes the request `raw` back: as text, percent-encoded, in hex, and in
    base64 (standard and URL-safe) shifted by 0, 1 and 2 bytes, so the request's every byte is
    seen at each of the three alignments."""
    parts = [raw.decode("latin-1"), quote(raw, safe=""), raw.hex()]
    for shift in range(3):
        shifted = b"\n" * shift + raw
        parts += [base64.b64encode(shifted).decode(), base64.urlsafe_b64encode(shifted).decode()]
    return "refused, the request was: " + " | ".join(parts)


def secret_encodings_in(text: str, secret: str) -> list[str]:
    """How `text` carries LEAK_WINDOW bytes or more of `secret` in a row, as it is, once
    percent-decoded or JSON-unescaped: raw, in hex (either case), or in base64 (either
    alphabet, any alignment: every run is decoded from each of its first four characters).
    Empty when it carries none."""
    data = secret.encode()
    size = min(LEAK_WINDOW, len(data))
    windows = {data[i:i + size] for i in range(len(data) - size + 1)}
    found = set()
    views = {"as written": text, "percent-decoded": unquote(text),
             "json-unescaped": text.replace("\\/", "/")}
    for name, view in views.items():
        if any(w.decode("latin-1") in view for w in windows):
            found.add(f"raw, {name}")
        if any(w.hex() in view.lower() for w in windows):
            found.add(f"hex, {name}")
        for run in re.findall(r"[A-Za-z0-9+/_-]{8,}", view):
            normalized = run.replace("-", "+").replace("_", "/")
            for start in range(4):
                piece = normalized[start:]
                try:
                    decoded = base64.b64decode(piece[: len(piece) // 4 * 4], validate=True)
                except ValueError:
                    continue
                if any(w in decoded for w in windows):
                    found.add(f"base64, {name}")
    return sorted(found)

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
             log: ProxyLog, echo: EchoRule | None, echo_json: bool
             ) -> type[BaseHTTPRequestHandler]:
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

        def _refuse(self, status: int, why: str, raw: bytes = b"") -> None:
            log.refused.append(why)
            if echo is not None:
                if echo_json:  # a Chroma error body: the client raises it with this message
                    body = json.dumps({"error": "AuthorizationError",
                                       "message": request_echo(raw)}).encode()
                else:
                    body = request_echo(raw).encode("latin-1")
                self._reply(status, body, [("Content-Type", "text/plain")])
                return
            body = json.dumps({"error": "Unauthorized" if status == 401 else "NotFound",
                               "message": why}).encode()
            self._reply(status, body, [("Content-Type", "application/json")])

        def _forward(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            if not (self.path == prefix or self.path.startswith(prefix + "/")):
                self._refuse(404, f"not under {prefix}")
                return
            raw = f"{self.requestline}\r\n{self.headers.as_string()}".encode() + body
            if self.headers.get(header) != expected:
                self._refuse(401, f"missing or wrong {header}", raw)
                return
            if echo is not None and echo(self.command, self.path):
                self._refuse(500, "echo", raw)
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
def token_proxy(*, upstream_port: int, prefix: str, header: str, token: str,
                echo: EchoRule | None = None, echo_json: bool = False,
                ) -> Iterator[TokenProxy]:
    """Serve `http://127.0.0.1:<port><prefix>` -> `http://127.0.0.1:<upstream_port>` while
    inside, for requests whose `header` carries `token` (`Bearer` for Authorization).

    With `echo`, every refusal quotes the request back (`request_echo`; in a Chroma error's
    JSON `message` with `echo_json`), and a request with the right token for which
    `echo(method, path)` is true is refused too (500)."""
    log = ProxyLog()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(
        upstream_port=upstream_port, prefix=prefix, header=header, token=token, log=log,
        echo=echo, echo_json=echo_json))
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, name="token-proxy", daemon=True)
    thread.start()
    try:
        yield TokenProxy(f"http://127.0.0.1:{server.server_address[1]}{prefix}", log)
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)
