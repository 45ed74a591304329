"""A real HAProxy (Debian's ``haproxy`` package) in front of gateway nodes, for tests.

:class:`HAProxy` writes a configuration, runs ``haproxy`` in the foreground on a free
127.0.0.1 port and talks to its runtime API (a Unix socket in its temporary
directory).  The configuration is what a production setup in front of the gateway
would use:

- HTTP mode, ``balance roundrobin`` over the nodes;
- a health check ``GET /readyz`` every :data:`CHECK_INTERVAL_MS` ms: a node is taken
  out after ``fall`` failed checks (a draining node answers 503; a killed one refuses)
  and back in after ``rise`` good ones;
- ``retries`` with ``option redispatch``: a connection a node refuses is tried on
  another node, so a client rarely sees a node that died between two checks;
- long ``timeout tunnel`` (WebSocket) and ``timeout server`` (SSE streams are idle
  between events; the gateway's keepalive comments must come more often);
- every response carries ``X-Gateway-Node: <server name>``, so a test can tell which
  node served a stream (the 101 of a WebSocket upgrade and an SSE response's headers).

    with HAProxy([("gw0", 8001), ("gw1", 8002)]) as lb:
        await lb.wait_states({"gw0": "UP", "gw1": "UP"})
        lb.shutdown_sessions("gw0")      # cut every stream of gw0 at once

Every wait is bounded; leaving the ``with`` stops the process and removes its directory.
"""

from __future__ import annotations

import contextlib
import csv
import io
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Self

import anyio

from tests.support.redis_server import free_port

HAPROXY_BINARY = "haproxy"
BACKEND = "gateways"
#: Health check period and how many checks change a node's state.
CHECK_INTERVAL_MS = 200
FALL = 2
RISE = 1
#: Seconds an idle SSE response may stay silent (keep the gateway's keepalive shorter).
SERVER_TIMEOUT_S = 60
START_TIMEOUT = 10.0
STOP_TIMEOUT = 5.0
_POLL = 0.02


def config(
    servers: Sequence[tuple[str, int]],
    *,
    port: int,
    socket_path: Path,
    server_host: str = "127.0.0.1",
    check_interval_ms: int = CHECK_INTERVAL_MS,
    fall: int = FALL,
    rise: int = RISE,
    server_timeout_s: int = SERVER_TIMEOUT_S,
) -> str:
    """The configuration text (see the module docstring)."""
    lines = [
        "global",
        f"    stats socket {socket_path} mode 600 level admin",
        "    maxconn 5000",
        "    log stdout format raw local0 info",
        "defaults",
        "    mode http",
        "    log global",
        "    option httplog",
        "    option dontlognull",
        "    timeout connect 2s",
        "    timeout client 1h",
        f"    timeout server {server_timeout_s}s",
        "    timeout tunnel 1h",
        "    timeout http-request 10s",
        "    timeout http-keep-alive 10s",
        "    retries 3",
        "    option redispatch 1",
        "frontend gateway",
        f"    bind 127.0.0.1:{port}",
        "    maxconn 5000",
        f"    default_backend {BACKEND}",
        f"backend {BACKEND}",
        "    balance roundrobin",
        "    option httpchk GET /readyz",
        "    http-check expect status 200",
        "    http-response set-header X-Gateway-Node %[srv_name]",
        f"    default-server inter {check_interval_ms}ms fastinter {check_interval_ms}ms "
        f"downinter {check_interval_ms}ms fall {fall} rise {rise}",
    ]
    lines += [f"    server {name} {server_host}:{p} check" for name, p in servers]
    return "\n".join(lines) + "\n"


class HAProxy:
    """One ``haproxy`` process.  See the module docstring."""

    def __init__(
        self,
        servers: Sequence[tuple[str, int]],
        *,
        server_host: str = "127.0.0.1",
        binary: str = HAPROXY_BINARY,
        **options: int,
    ) -> None:
        if not servers:
            raise ValueError("HAProxy needs at least one server")
        self.servers = list(servers)
        self.port = free_port()
        # A short path: Unix socket paths are limited to 107 bytes.
        self.dir = Path(tempfile.mkdtemp(prefix="gwha-"))
        self.socket_path = self.dir / "admin.sock"
        self.config_path = self.dir / "haproxy.cfg"
        self.log = self.dir / "haproxy.log"
        self.config_path.write_text(
            config(
                self.servers,
                port=self.port,
                socket_path=self.socket_path,
                server_host=server_host,
                **options,
            )
        )
        self._binary = binary
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def ws_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/v1/ws"

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    # -- lifecycle ---------------------------------------------------------

    def start(self, timeout: float = START_TIMEOUT) -> Self:
        """Check the configuration, start, and return once the runtime API answers."""
        check = subprocess.run(
            [self._binary, "-c", "-f", str(self.config_path)],
            capture_output=True,
            timeout=timeout,
        )
        if check.returncode != 0:
            raise RuntimeError(
                f"haproxy rejected its configuration:\n{check.stdout.decode()}"
                f"{check.stderr.decode()}\n{self.config_path.read_text()}"
            )
        with self.log.open("ab") as out:
            self._proc = subprocess.Popen(
                [self._binary, "-db", "-f", str(self.config_path)],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + timeout
        while True:
            if self._proc.poll() is not None:
                raise RuntimeError(
                    f"haproxy exited with {self._proc.returncode}\n{self.log_tail()}"
                )
            with contextlib.suppress(OSError):
                if "pxname" in self.command("show stat"):
                    return self
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"haproxy did not start within {timeout}s\n{self.log_tail()}")
            time.sleep(_POLL)

    def stop(self) -> None:
        proc = self._proc
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(timeout=STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=STOP_TIMEOUT)

    def close(self) -> None:
        try:
            self.stop()
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> Self:
        try:
            return self.start()
        except BaseException:
            self.close()
            raise

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- runtime API -------------------------------------------------------

    def command(self, line: str, timeout: float = 2.0) -> str:
        """Send one runtime API command; its whole answer."""
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(timeout)
            s.connect(str(self.socket_path))
            s.sendall(line.encode() + b"\n")
            chunks = []
            while chunk := s.recv(65536):
                chunks.append(chunk)
        return b"".join(chunks).decode(errors="replace")

    def states(self) -> dict[str, str]:
        """``{server name: status}`` of the backend (``UP``, ``DOWN``, ``MAINT``, ...)."""
        text = self.command("show stat").lstrip("# ")
        rows = csv.DictReader(io.StringIO(text))
        return {
            row["svname"]: row["status"].split()[0]
            for row in rows
            if row.get("pxname") == BACKEND and row.get("svname") not in ("BACKEND", "FRONTEND")
        }

    def current_sessions(self) -> dict[str, int]:
        """Open sessions per server (``scur``)."""
        text = self.command("show stat").lstrip("# ")
        rows = csv.DictReader(io.StringIO(text))
        return {
            row["svname"]: int(row["scur"] or 0)
            for row in rows
            if row.get("pxname") == BACKEND and row.get("svname") not in ("BACKEND", "FRONTEND")
        }

    async def wait_states(self, expected: Mapping[str, str], within: float = 10.0) -> None:
        """Wait until every named server has its expected status."""
        deadline = time.monotonic() + within
        while True:
            states = await anyio.to_thread.run_sync(self.states)
            if all(states.get(name) == want for name, want in expected.items()):
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"haproxy states {states}, want {dict(expected)} ({within}s)")
            await anyio.sleep(_POLL)  # polling another process, bounded above

    def shutdown_sessions(self, server: str) -> None:
        """Cut every open session (stream, socket) to ``server`` at once."""
        self.command(f"shutdown sessions server {BACKEND}/{server}")

    def disable(self, server: str) -> None:
        """Maintenance: no new sessions go to ``server``; open ones stay."""
        self.command(f"disable server {BACKEND}/{server}")

    def enable(self, server: str) -> None:
        self.command(f"enable server {BACKEND}/{server}")

    def log_tail(self, lines: int = 40) -> str:
        if not self.log.exists():
            return "--- haproxy log (none) ---"
        text = self.log.read_text(errors="replace").splitlines()[-lines:]
        return f"--- {self.log} (last {len(text)} lines) ---\n" + "\n".join(text)


def available() -> str | None:
    """None when ``haproxy`` can run here, else what is missing (for a clear failure)."""
    if shutil.which(HAPROXY_BINARY) is None:
        return "haproxy is not installed (apt-get install haproxy; scripts/test does it)"
    return None


__all__ = ["BACKEND", "HAProxy", "available", "config"]
