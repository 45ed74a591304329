"""A network namespace joined to this one by a veth pair: a client whose link can fail.

Half-open TCP (a peer that vanished without closing) cannot be made on loopback: the
kernel always answers for both ends there.  :class:`VethNamespace` makes a namespace
of its own (``ip netns add``) and a veth pair, one end here (``host_address``), the
other inside the namespace (``peer_address``).  A socket made with :meth:`socket`
lives in the namespace and reaches this side's addresses over the pair; after
:meth:`link_down` nothing crosses it any more, in either direction, and neither end
is told: what a client whose Wi-Fi dropped, or whose NAT forgot the flow, looks like
to the server.

    with VethNamespace() as ns:
        node = GatewayProcess(..., host=ns.host_address)   # listens on the pair
        sock = ns.socket(); sock.connect((ns.host_address, node.port))
        ns.link_down()

The addresses are IPv4 link-local (169.254.0.0/16, never routed beyond their link;
here the link is the pair, inside this machine).  Needs root (CAP_NET_ADMIN and
CAP_SYS_ADMIN) and iproute2's ``ip``; :func:`available` says what is missing.  Leaving
the ``with`` deletes the namespace, which deletes the pair.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import random
import shutil
import socket
import subprocess
import threading
import uuid
from types import TracebackType
from typing import Self

IP = "ip"
CLONE_NEWNET = 0x40000000
#: 169.254.<n>.0/30 subnets used here: 169.254.169.0/24 (cloud metadata) is avoided.
_SUBNETS = [n for n in range(16, 250) if n != 169]
_TIMEOUT = 10.0


def _ip(*args: str) -> None:
    result = subprocess.run([IP, *args], capture_output=True, text=True, timeout=_TIMEOUT)
    if result.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {result.stderr.strip()}")


def available() -> str | None:
    """None when namespaces can be made here, else why not."""
    if shutil.which(IP) is None:
        return "iproute2's ip is not installed (apt-get install iproute2)"
    if os.geteuid() != 0:
        return "network namespaces need root"
    return None


class VethNamespace:
    """See the module docstring."""

    def __init__(self) -> None:
        tag = uuid.uuid4().hex[:8]
        self.name = f"gwt-{tag}"
        # Interface names are at most 15 bytes.
        self.host_if = f"gwt{tag}h"
        self.peer_if = f"gwt{tag}p"
        subnet = random.choice(_SUBNETS)
        self.host_address = f"169.254.{subnet}.1"
        self.peer_address = f"169.254.{subnet}.2"
        self._made = False

    # -- lifecycle ---------------------------------------------------------

    def create(self) -> Self:
        _ip("netns", "add", self.name)
        self._made = True
        _ip(
            "link",
            "add",
            self.host_if,
            "type",
            "veth",
            "peer",
            "name",
            self.peer_if,
            "netns",
            self.name,
        )
        _ip("addr", "add", f"{self.host_address}/30", "dev", self.host_if)
        _ip("link", "set", self.host_if, "up")
        _ip("-n", self.name, "addr", "add", f"{self.peer_address}/30", "dev", self.peer_if)
        _ip("-n", self.name, "link", "set", self.peer_if, "up")
        _ip("-n", self.name, "link", "set", "lo", "up")
        return self

    def delete(self) -> None:
        """Delete the namespace (and with it the pair); idempotent."""
        if self._made:
            with contextlib.suppress(RuntimeError):
                _ip("netns", "delete", self.name)
            with contextlib.suppress(RuntimeError):
                _ip("link", "delete", self.host_if)  # normally gone with the namespace
            self._made = False

    def __enter__(self) -> Self:
        try:
            return self.create()
        except BaseException:
            self.delete()
            raise

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.delete()

    # -- faults ------------------------------------------------------------

    def link_down(self) -> None:
        """Take the namespace's end down: nothing crosses the pair, nobody is told."""
        _ip("-n", self.name, "link", "set", self.peer_if, "down")

    def link_up(self) -> None:
        _ip("-n", self.name, "link", "set", self.peer_if, "up")

    # -- sockets -----------------------------------------------------------

    def socket(self, family: int = socket.AF_INET, type: int = socket.SOCK_STREAM) -> socket.socket:
        """A new socket inside the namespace (a socket keeps the namespace it was made in).

        ``setns`` changes the namespace of the calling thread only, so the socket is made
        on a short-lived thread of its own and this thread never leaves its namespace.
        """
        made: list[socket.socket] = []
        failed: list[BaseException] = []

        def enter_and_make() -> None:
            try:
                libc = ctypes.CDLL(None, use_errno=True)
                with open(f"/var/run/netns/{self.name}") as ns:
                    if libc.setns(ns.fileno(), CLONE_NEWNET) != 0:
                        err = ctypes.get_errno()
                        raise OSError(err, f"setns({self.name}): {os.strerror(err)}")
                made.append(socket.socket(family, type))
            except BaseException as exc:
                failed.append(exc)

        thread = threading.Thread(target=enter_and_make, name=f"netns-{self.name}")
        thread.start()
        thread.join(_TIMEOUT)
        if failed:
            raise failed[0]
        if not made:
            raise TimeoutError(f"no socket made in {self.name} within {_TIMEOUT}s")
        return made[0]

    def __repr__(self) -> str:
        return f"VethNamespace({self.name}, {self.host_address} <-> {self.peer_address})"


__all__ = ["VethNamespace", "available"]
