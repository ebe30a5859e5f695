"""systemd's service notifications: ``READY=1`` once booted, ``WATCHDOG=1`` while healthy,
``STOPPING=1`` on the way out (``Type=notify`` and ``WatchdogSec=`` in deploy/meclaw.service).

The protocol is one datagram of ``KEY=VALUE`` lines sent to the unix socket named by
``$NOTIFY_SOCKET`` (a leading ``@`` names an abstract socket). That is all ``sd_notify(3)``
does, so it is spoken here rather than through a dependency: python-systemd builds against
libsystemd's headers, and the small PyPI packages are this module again. Outside systemd
``NOTIFY_SOCKET`` is unset and every call is a no-op.

The watchdog pings are tied to the colony's health, not to a timer alone: they come from a
task on the colony's event loop, so a loop blocked by a stuck callback stops them, and they
stop for good once the backpressure watchdog (:mod:`colony.watchdog`) has tripped on a mailbox
wait cycle. Either way systemd sees no ``WATCHDOG=1`` for ``WatchdogSec``, kills the daemon
and, under ``Restart=on-failure``, starts it again. A ping is sent every half of
``$WATCHDOG_USEC``, as sd_watchdog_enabled(3) advises.

Sending never raises: a notification lost (systemd restarting, a socket gone) must not stop a
colony; systemd's own timeout is what notices.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
from collections.abc import Callable, Mapping

__all__ = ["Notifier"]


class Notifier:
    """Sends notifications to the socket ``$NOTIFY_SOCKET`` names (none: does nothing)."""

    def __init__(self, environ: Mapping[str, str] | None = None) -> None:
        env = os.environ if environ is None else environ
        address = env.get("NOTIFY_SOCKET", "")
        if address.startswith("@"):
            address = "\0" + address[1:]
        self.address = address or None
        """Where notifications go; None outside systemd (or another supervisor speaking it)."""
        self.watchdog_s = _watchdog_interval(env)
        """How often to ping (half of ``$WATCHDOG_USEC``); None when no watchdog is set for
        this process."""

    def send(self, *fields: str) -> bool:
        """Send ``fields`` (``"READY=1"``, ``"STATUS=…"``) as one notification; whether it
        was sent."""
        if self.address is None:
            return False
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
                sock.sendto("\n".join(fields).encode(), self.address)
        except OSError:
            return False
        return True

    def ready(self, status: str) -> None:
        self.send("READY=1", f"STATUS={status}", f"MAINPID={os.getpid()}")

    def stopping(self) -> None:
        self.send("STOPPING=1", "STATUS=stopping")

    def keep_alive(self, healthy: Callable[[], bool]) -> asyncio.Task[None] | None:
        """Start pinging while ``healthy()`` holds (checked before each ping); None when
        systemd set no watchdog. Cancel the task to stop."""
        if self.address is None or self.watchdog_s is None:
            return None
        return asyncio.create_task(self._pings(healthy, self.watchdog_s), name="sd_watchdog")

    async def _pings(self, healthy: Callable[[], bool], every: float) -> None:
        while healthy():
            self.send("WATCHDOG=1")
            await asyncio.sleep(every)
        self.send("STATUS=unhealthy: the backpressure watchdog tripped; no more watchdog pings")


def _watchdog_interval(env: Mapping[str, str]) -> float | None:
    """Half of ``$WATCHDOG_USEC`` in seconds, when it is set for this process."""
    usec = env.get("WATCHDOG_USEC", "")
    pid = env.get("WATCHDOG_PID", "")
    with contextlib.suppress(ValueError):
        if pid and int(pid) != os.getpid():
            return None  # meant for another process (a parent that exec'd us, say)
        if int(usec) > 0:
            return int(usec) / 2_000_000
    return None
