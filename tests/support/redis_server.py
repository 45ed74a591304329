"""Throwaway ``redis-server`` processes for tests, plus key-cleanup helpers.

A ``RedisServer`` owns one ``redis-server`` child process bound to 127.0.0.1 on a
port of its own, with its working directory (RDB file, log) in a temporary
directory.  Everything is passed on the command line; no config file is written.

    with RedisServer() as r:
        client = redis.Redis.from_url(r.url)

Options for connection tests: ``tls`` (the server's certificate, key and the CA that
verifies clients; the port then speaks TLS only, ``auth_clients`` says whether clients
need a certificate), ``unix_socket`` (a socket in the server's directory, :attr:`socket`),
``password`` (``requirepass``: the default user's), ``harness_user`` (for a test that
changes the default user).  With any of them the harness
reaches the server over an admin unix socket as an ACL user of its own (:meth:`admin`),
so that neither TLS nor the default user's password stands in its way.
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

REDIS_SERVER_BINARY = "redis-server"
START_TIMEOUT = 10.0  # seconds until PING must answer
STOP_TIMEOUT = 5.0  # seconds SHUTDOWN may take before we SIGKILL
_POLL_INTERVAL = 0.02


#: Ports for servers of the tests' own: below Linux's ephemeral range (32768-60999 by
#: default), so no outgoing connection takes one between the choice and the bind.
_SERVER_PORTS = range(20_000, 32_000)
#: Ports already handed out by this process (not bound until their server starts).
_handed_out: set[int] = set()


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago, outside the ephemeral range
    (a port the OS hands out for binding to 0 can meanwhile become the local end of
    some outgoing connection: a cluster's bus port then fails to bind)."""
    for _ in range(200):  # bounded: almost every port in the range is free
        port = random.choice(_SERVER_PORTS)
        if port in _handed_out:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            _handed_out.add(port)
            return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _command(port: int, line: bytes, timeout: float) -> bytes:
    """Send one inline command to 127.0.0.1:port; return its reply (status, error or bulk)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(line + b"\r\n")
        reply = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                return reply
            reply += chunk
            head, sep, body = reply.partition(b"\r\n")
            if sep and not head.startswith(b"$"):
                return head  # +status / -error / :integer
            if sep and head.startswith(b"$") and len(body) >= int(head[1:]) + 2:
                return body[: int(head[1:])]


@dataclass(frozen=True)
class ServerTLS:
    """A TLS server's certificate and key, and the CA that verifies client certificates."""

    cert: Path
    key: Path
    ca: Path


#: The harness's own ACL user on servers with the options above.
ADMIN_USER = "gwtest-admin"


class RedisServer:
    """One ``redis-server`` process of our own.  See the module docstring."""

    def __init__(
        self,
        *,
        persistence: bool = False,
        replica_of: RedisServer | None = None,
        port: int | None = None,
        dir: Path | None = None,
        binary: str = REDIS_SERVER_BINARY,
        extra_args: Sequence[str] = (),
        tls: ServerTLS | None = None,
        auth_clients: bool = False,
        unix_socket: bool = False,
        password: str | None = None,
        harness_user: bool = False,
    ) -> None:
        self.persistence = persistence
        self.tls = tls
        self.auth_clients = auth_clients
        self.unix_socket = unix_socket
        self.password = password
        #: The harness's way in past TLS and passwords (see the module docstring).
        self._admin_password = (
            uuid.uuid4().hex if tls is not None or unix_socket or password or harness_user else None
        )
        #: More ``redis-server`` options, appended to the command line (``--name value``).
        self.extra_args = list(extra_args)
        self.replica_of = replica_of
        self.binary = binary
        self._port = port if port is not None else free_port()
        self._owns_dir = dir is None
        self._dir = Path(dir) if dir is not None else Path(tempfile.mkdtemp(prefix="gwtest-redis-"))
        self._proc: subprocess.Popen[bytes] | None = None

    # -- properties --------------------------------------------------------

    @property
    def port(self) -> int:
        return self._port

    @property
    def url(self) -> str:
        """``redis://127.0.0.1:<port>/0`` (``rediss://`` with TLS; no credentials)."""
        scheme = "rediss" if self.tls is not None else "redis"
        return f"{scheme}://127.0.0.1:{self._port}/0"

    @property
    def socket(self) -> Path:
        """The unix socket (with ``unix_socket``, TLS or a password)."""
        return self._dir / "redis.sock"

    def admin(self, db: int = 0) -> redis.Redis:
        """A client of the harness's own (see the module docstring), or a plain one."""
        if self._admin_password is None:
            return redis.Redis(port=self._port, db=db, socket_timeout=5.0)
        return redis.Redis(
            unix_socket_path=str(self.socket),
            username=ADMIN_USER,
            password=self._admin_password,
            db=db,
            socket_timeout=5.0,
            retry=Retry(NoBackoff(), 0),  # SHUTDOWN's lost connection is no reason to wait
        )

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    @property
    def dir(self) -> Path:
        return self._dir

    @property
    def logfile(self) -> Path:
        return self._dir / "redis.log"

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    # -- lifecycle ---------------------------------------------------------

    @property
    def _dbfilename(self) -> str:
        # Without persistence the RDB file (written only by an explicit SAVE, or by a
        # replica's full sync) gets a name of its own and is removed on every start.
        return "dump.rdb" if self.persistence else "volatile.rdb"

    def _args(self) -> list[str]:
        args = [
            self.binary,
            "--port", str(self._port),
            "--bind", "127.0.0.1",
            "--dir", str(self._dir),
            "--dbfilename", self._dbfilename,
            "--save", "",  # never save on a timer: only explicit SAVE/BGSAVE
            "--appendonly", "no",
            "--logfile", str(self.logfile),
            "--daemonize", "no",
            "--repl-diskless-sync-delay", "0",  # replicas sync at once, not after 5 s
        ]  # fmt: skip
        if self.replica_of is not None:
            args += ["--replicaof", "127.0.0.1", str(self.replica_of.port)]
        if self.tls is not None:
            args[1:3] = ["--port", "0"]
            args += [
                "--tls-port", str(self._port),
                "--tls-cert-file", str(self.tls.cert),
                "--tls-key-file", str(self.tls.key),
                "--tls-ca-cert-file", str(self.tls.ca),
                "--tls-auth-clients", "yes" if self.auth_clients else "no",
            ]  # fmt: skip
        if self._admin_password is not None:
            args += ["--unixsocket", str(self.socket), "--unixsocketperm", "700"]
            args += ["--user", ADMIN_USER, "on", f">{self._admin_password}", "~*", "&*", "+@all"]
        if self.password is not None:
            args += ["--requirepass", self.password]
        return args + self.extra_args

    def start(self, timeout: float = START_TIMEOUT) -> RedisServer:
        """Start the process and return once it answers PING with PONG."""
        if self.running:
            raise RuntimeError(f"redis-server on port {self._port} is already running")
        self._dir.mkdir(parents=True, exist_ok=True)
        if not self.persistence:
            (self._dir / self._dbfilename).unlink(missing_ok=True)  # always start empty
        with open(self._dir / "redis.stdout", "ab") as out:
            self._proc = subprocess.Popen(
                self._args(), stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT
            )
        deadline = time.monotonic() + timeout
        while True:
            if self._proc.poll() is not None:
                raise RuntimeError(
                    f"redis-server on port {self._port} exited with code "
                    f"{self._proc.returncode} during startup\n{self.log_tail()}"
                )
            try:
                if self._answers_ping():
                    return self
            except (OSError, redis.RedisError):
                pass  # not listening yet
            if time.monotonic() >= deadline:
                self.kill()
                raise RuntimeError(
                    f"redis-server on port {self._port} did not answer PING within "
                    f"{timeout:.0f}s\n{self.log_tail()}"
                )
            time.sleep(_POLL_INTERVAL)

    def _answers_ping(self) -> bool:
        """PONG from our own process (not from some other server on the port)."""
        assert self._proc is not None
        if self._admin_password is not None:
            if not self.socket.exists():
                return False
            with self.admin() as admin:
                return bool(admin.info("server")["process_id"] == self._proc.pid and admin.ping())
        info = _command(self._port, b"INFO server", timeout=0.5)
        if f"process_id:{self._proc.pid}\r\n".encode() not in info:
            return False
        return _command(self._port, b"PING", timeout=0.5) == b"+PONG"

    def stop(self, timeout: float = STOP_TIMEOUT) -> None:
        """SHUTDOWN NOSAVE, wait for the process to exit; SIGKILL it if it does not."""
        proc = self._proc
        if proc is None or proc.poll() is not None:
            return
        self.resume()  # a SIGSTOPped server cannot answer SHUTDOWN
        if self._admin_password is not None:
            with contextlib.suppress(redis.RedisError, OSError), self.admin() as admin:
                admin.shutdown(nosave=True)
        else:
            with contextlib.suppress(OSError):  # the shutdown itself closes the connection
                _command(self._port, b"SHUTDOWN NOSAVE", timeout=min(timeout, 2.0))
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=timeout)

    def kill(self) -> None:
        """SIGKILL, as in a crash: nothing is saved."""
        proc = self._proc
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait(timeout=STOP_TIMEOUT)

    def pause(self) -> None:
        """SIGSTOP: the process keeps its port but answers nothing."""
        if self.running:
            assert self._proc is not None
            os.kill(self._proc.pid, signal.SIGSTOP)

    def resume(self) -> None:
        """SIGCONT after ``pause()``."""
        if self.running:
            assert self._proc is not None
            os.kill(self._proc.pid, signal.SIGCONT)

    def close(self) -> None:
        """Stop the server and remove its directory if we created it."""
        try:
            self.stop()
        finally:
            if self._owns_dir:
                shutil.rmtree(self._dir, ignore_errors=True)

    def log_tail(self, lines: int = 30) -> str:
        parts = []
        for name in ("redis.stdout", "redis.log"):
            path = self._dir / name
            if path.exists():
                text = path.read_text(errors="replace").splitlines()[-lines:]
                parts.append(f"--- {path} (last {len(text)} lines) ---\n" + "\n".join(text))
        return "\n".join(parts) or f"(no log in {self._dir})"

    def __enter__(self) -> RedisServer:
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

    def __repr__(self) -> str:
        return f"RedisServer(port={self._port}, pid={self.pid}, dir={str(self._dir)!r})"


def delete_keys_with_prefix(
    url: str, prefix: str, *, batch: int = 500, timeout: float = 30.0
) -> int:
    """UNLINK every key starting with ``prefix`` on ``url``; return how many were removed.

    SCAN MATCH/COUNT then UNLINK in batches, bounded by ``timeout`` seconds.
    """
    if not prefix:
        raise ValueError("refusing to delete with an empty prefix")
    pattern = "".join("\\" + c if c in "*?[]\\^-" else c for c in prefix) + "*"
    deadline = time.monotonic() + timeout
    removed = 0
    client = redis.Redis.from_url(url, socket_timeout=5.0)
    try:
        pending: list[bytes] = []
        for key in client.scan_iter(match=pattern, count=batch):
            pending.append(key)
            if len(pending) >= batch:
                removed += int(client.unlink(*pending))
                pending.clear()
            if time.monotonic() > deadline:
                raise TimeoutError(f"deleting keys {pattern!r} took more than {timeout:.0f}s")
        if pending:
            removed += int(client.unlink(*pending))
    finally:
        client.close()
    return removed
