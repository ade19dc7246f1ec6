"""The systemd notify protocol: a few datagrams on the socket named by `$NOTIFY_SOCKET`.

`READY=1` once the stores are open, `WATCHDOG=1` while ticks make progress, `STOPPING=1` on
shutdown. Outside systemd (no `$NOTIFY_SOCKET`) every call is a no-op, so the daemons behave
the same from a terminal. No dependency: the protocol is one `sendto` per message.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping

import structlog

log = structlog.get_logger(__name__)


class Notifier:
    """Sends state changes to systemd, if systemd asked for them."""

    def __init__(self, environ: Mapping[str, str] | None = None) -> None:
        env = os.environ if environ is None else environ
        address = env.get("NOTIFY_SOCKET", "")
        # A leading "@" names a socket in the abstract namespace.
        self._address = "\0" + address[1:] if address.startswith("@") else address
        self.watchdog_interval_s = _watchdog_interval(env)

    @property
    def enabled(self) -> bool:
        """Whether a notify socket was given."""
        return bool(self._address)

    def send(self, *states: str) -> bool:
        """Send `KEY=value` lines in one datagram; False (logged once per call) on failure."""
        if not self._address:
            return False
        payload = "\n".join(states).encode()
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
                sock.sendto(payload, self._address)
        except OSError as exc:
            log.warning("sdnotify.failed", states=list(states), error=str(exc))
            return False
        return True


def _watchdog_interval(env: Mapping[str, str]) -> float | None:
    """Half of `$WATCHDOG_USEC` in seconds (systemd's advice), or None when no watchdog is
    set for this process."""
    usec = env.get("WATCHDOG_USEC", "")
    pid = env.get("WATCHDOG_PID", "")
    if not usec.isdigit() or int(usec) == 0:
        return None
    if pid and pid.isdigit() and int(pid) != os.getpid():
        return None
    return int(usec) / 2 / 1_000_000
