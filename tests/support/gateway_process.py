"""Real ``gateway serve`` processes for black-box tests: started, signalled, measured.

Everything here goes through the gateway's public surfaces only: the ``gateway serve``
command line with ``GATEWAY_*`` variables, ``/readyz`` and ``/metrics``.  Each process
writes its output to ``<dir>/<name>.log`` (appended across restarts, one header line
per start) so that a failing test can show it::

    async with Fleet(tmp_path, 3, {"GATEWAY_REDIS_URL": url}) as fleet:
        a, b, c = fleet.nodes
        a.kill()                 # SIGKILL
        await a.restart()        # the same port, waits for /readyz
        print(fleet.diagnostics())

Contracts: ports are free ports of 127.0.0.1 (or of ``host``); every wait is bounded
(:data:`START_TIMEOUT`, :data:`EXIT_TIMEOUT`); leaving a :class:`Fleet` SIGKILLs
whatever still runs.  The environment of a node is the caller's without any inherited
``GATEWAY_*`` variable, plus the test secret, JSON logs and what the caller passes.
"""

from __future__ import annotations

import contextlib
import json
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from types import TracebackType
from typing import Self

import anyio
import httpx
from prometheus_client.parser import text_string_to_metric_families

from tests.support.env import without_settings
from tests.support.node import SECRET
from tests.support.redis_server import free_port

ROOT = Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-m", "gateway.cli", "serve"]
#: Seconds a node may take from exec to its first 200 on /readyz.
START_TIMEOUT = 30.0
#: Seconds a signalled node may take to exit before a test calls it stuck.
EXIT_TIMEOUT = 30.0
#: Seconds one /readyz or /metrics request may take.
REQUEST_TIMEOUT = 5.0
_POLL = 0.05


def _sigint_default() -> None:
    # A child of a non-interactive shell's background job inherits SIGINT ignored.
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def base_env(extra: Mapping[str, str]) -> dict[str, str]:
    """The process environment of a node: no inherited ``GATEWAY_*``, test defaults, ``extra``."""
    env = without_settings()
    env.update(
        GATEWAY_JWT_SECRET=SECRET,
        GATEWAY_LOG_FORMAT="json",
        GATEWAY_LOG_LEVEL="info",
    )
    env.update(extra)
    return env


class GatewayProcess:
    """One ``gateway serve`` process; it keeps its port across restarts.

    With ``internal_port`` (True: a free one) the node serves ``/readyz`` and
    ``/metrics`` there (``GATEWAY_INTERNAL_PORT``), and this class asks there.
    ``preexec`` runs in the child before the exec (e.g. to lower its limits)."""

    def __init__(
        self,
        name: str,
        log_dir: Path,
        env: Mapping[str, str],
        *,
        host: str = "127.0.0.1",
        port: int | None = None,
        internal_port: int | bool | None = None,
        preexec: Callable[[], None] | None = None,
    ) -> None:
        self.name = name
        self.host = host
        self.port = port if port is not None else free_port()
        if internal_port is True:
            internal_port = free_port()
        self.internal_port: int | None = internal_port or None
        self.preexec = preexec
        self.env = dict(env)
        self.log = Path(log_dir) / f"{name}.log"
        self.starts = 0
        self._proc: subprocess.Popen[bytes] | None = None

    # -- properties --------------------------------------------------------

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def ops_url(self) -> str:
        """Where ``/readyz`` and ``/metrics`` are: the internal port, or :attr:`url`."""
        if self.internal_port is None:
            return self.url
        return f"http://{self.host}:{self.internal_port}"

    @property
    def ws_url(self) -> str:
        return f"ws://{self.host}:{self.port}/v1/ws"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def returncode(self) -> int | None:
        return self._proc.poll() if self._proc is not None else None

    # -- lifecycle ---------------------------------------------------------

    def spawn(self) -> None:
        """Exec ``gateway serve`` (does not wait; see :meth:`start`)."""
        if self.running:
            raise RuntimeError(f"{self.name} is already running")
        self.starts += 1
        env = base_env(self.env)
        env.update(GATEWAY_HOST=self.host, GATEWAY_PORT=str(self.port))
        if self.internal_port is not None:
            env.update(GATEWAY_INTERNAL_PORT=str(self.internal_port))
        preexec = self.preexec

        def before_exec() -> None:
            _sigint_default()
            if preexec is not None:
                preexec()

        self.log.parent.mkdir(parents=True, exist_ok=True)
        with self.log.open("ab") as out:
            out.write(f"=== start {self.starts} of {self.name} on {self.url} ===\n".encode())
            out.flush()
            self._proc = subprocess.Popen(
                CLI,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=ROOT,
                preexec_fn=before_exec,
            )

    async def start(self, within: float = START_TIMEOUT) -> Self:
        """Spawn and wait until ``/readyz`` answers 200."""
        self.spawn()
        await self.wait_ready(within)
        return self

    async def restart(self, within: float = START_TIMEOUT) -> Self:
        """Start again on the same port (the previous process must have exited)."""
        if self.running:
            raise RuntimeError(f"{self.name} still runs (pid {self.pid}); stop it first")
        return await self.start(within)

    async def wait_ready(self, within: float = START_TIMEOUT) -> None:
        """Poll ``/readyz`` until 200; fail with the log tail if the process exits or it
        takes longer than ``within`` seconds."""
        deadline = time.monotonic() + within
        async with httpx.AsyncClient(base_url=self.ops_url, timeout=2) as client:
            while True:
                if not self.running:
                    raise RuntimeError(
                        f"{self.name} exited with {self.returncode} before it was ready\n"
                        + self.log_tail()
                    )
                with contextlib.suppress(httpx.HTTPError):
                    if (await client.get("/readyz")).status_code == 200:
                        return
                if time.monotonic() > deadline:
                    raise TimeoutError(
                        f"{self.name} not ready within {within}s\n" + self.log_tail()
                    )
                await anyio.sleep(_POLL)  # polling another process, bounded above

    def signal(self, signum: signal.Signals) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.send_signal(signum)

    def kill(self) -> None:
        """SIGKILL (a crash) and reap it."""
        if self._proc is not None and self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait(timeout=EXIT_TIMEOUT)

    def terminate(self) -> None:
        """SIGTERM: the gateway drains (D8) and exits by itself."""
        self.signal(signal.SIGTERM)

    def pause(self) -> None:
        """SIGSTOP: the process keeps its sockets and answers nothing."""
        self.signal(signal.SIGSTOP)

    def resume(self) -> None:
        self.signal(signal.SIGCONT)

    async def wait_exit(self, within: float = EXIT_TIMEOUT) -> int:
        """Wait for the process to exit; its exit code."""
        deadline = time.monotonic() + within
        while self.running:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{self.name} did not exit within {within}s\n{self.log_tail()}")
            await anyio.sleep(_POLL)  # polling another process, bounded above
        code = self.returncode
        assert code is not None
        return code

    # -- measurements ------------------------------------------------------

    def rss_bytes(self) -> int | None:
        """Resident memory of the process (``VmRSS``); None once it has exited."""
        if self._proc is None or self._proc.poll() is not None:
            return None
        try:
            status = Path(f"/proc/{self._proc.pid}/status").read_text()
        except OSError:
            return None
        for line in status.splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        return None

    async def metrics(self) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
        """``/metrics`` as ``{(sample name, labels): value}``."""
        async with httpx.AsyncClient(base_url=self.ops_url, timeout=REQUEST_TIMEOUT) as client:
            r = await client.get("/metrics")
        r.raise_for_status()
        samples: dict[tuple[str, frozenset[tuple[str, str]]], float] = {}
        for family in text_string_to_metric_families(r.text):
            for s in family.samples:
                samples[(s.name, frozenset(s.labels.items()))] = s.value
        return samples

    async def metric(self, name: str, **labels: str) -> float:
        """One sample of ``/metrics`` (0 when absent)."""
        return (await self.metrics()).get((name, frozenset(labels.items())), 0.0)

    async def readyz(self, request_timeout: float = REQUEST_TIMEOUT) -> tuple[int, str]:
        """One ``/readyz`` request: (status, body)."""
        async with httpx.AsyncClient(base_url=self.ops_url, timeout=request_timeout) as client:
            r = await client.get("/readyz")
        return r.status_code, r.text

    def log_tail(self, lines: int = 40) -> str:
        if not self.log.exists():
            return f"--- {self.log} (none) ---"
        text = self.log.read_text(errors="replace").splitlines()[-lines:]
        return f"--- {self.log} (last {len(text)} lines) ---\n" + "\n".join(text)

    def __repr__(self) -> str:
        return f"GatewayProcess({self.name}, {self.url}, pid={self.pid})"


class Fleet:
    """``n`` nodes with one environment, started together; SIGKILLed on exit."""

    def __init__(
        self,
        log_dir: Path,
        n: int,
        env: Mapping[str, str],
        *,
        host: str = "127.0.0.1",
        names: str = "gw",
    ) -> None:
        self.nodes = [GatewayProcess(f"{names}{i}", log_dir, env, host=host) for i in range(n)]

    @property
    def ports(self) -> list[int]:
        return [n.port for n in self.nodes]

    def by_name(self, name: str) -> GatewayProcess:
        for node in self.nodes:
            if node.name == name:
                return node
        raise KeyError(name)

    async def __aenter__(self) -> Self:
        try:
            for node in self.nodes:
                node.spawn()  # all at once: they start in parallel
            for node in self.nodes:
                await node.wait_ready()
        except BaseException:
            self.close()
            raise
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        for node in self.nodes:
            node.resume()  # a stopped process cannot be reaped before SIGCONT
            node.kill()

    def rss(self) -> dict[str, int | None]:
        return {n.name: n.rss_bytes() for n in self.nodes}

    def diagnostics(self, lines: int = 30) -> str:
        return "\n".join(n.log_tail(lines) for n in self.nodes)


_EXCEPTION_LINE = re.compile(r"^[\s|+]*([A-Za-z_][\w.]*(Error|Exception)\b.*)$")


def _last_exception(lines: list[str]) -> str | None:
    found = [m.group(1) for line in lines if (m := _EXCEPTION_LINE.match(line))]
    return found[-1][:200] if found else None


def tracebacks(log_dir: Path) -> list[str]:
    """``"<log>: <last exception line>"`` for every log in ``log_dir`` with a traceback,
    printed (an uncaught exception) or logged (a JSON line's ``exception`` field)."""
    found = []
    for log in sorted(log_dir.glob("*.log")):
        text = log.read_text(errors="replace")
        if "Traceback" not in text:
            continue
        last = None
        for line in text.splitlines():
            if "Traceback" in line and line.startswith("{"):
                with contextlib.suppress(ValueError, AttributeError):
                    last = _last_exception(str(json.loads(line).get("exception")).splitlines())
        last = _last_exception(text.splitlines()) or last
        found.append(f"{log.name}: {last or 'Traceback'}")
    return found


__all__ = ["CLI", "START_TIMEOUT", "Fleet", "GatewayProcess", "base_env", "tracebacks"]
