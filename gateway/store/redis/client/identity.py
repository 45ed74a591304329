"""Which Redis server a node writes to, and whether it is still the same process.

Commands retried on a fresh connection hide a restart from their callers; the server's
``run_id`` (``INFO server``) does not: every new connection (redis-py's pool, the
pipelined connection) reports what it reached, and when the ``run_id`` changes
everything the node follows is verified before it reads on (a restored snapshot or a
promoted replica may have rolled feeds back).
"""

from __future__ import annotations


class ServerIdentity:
    """What a node knows of the server behind its connections.

    ``identity`` is the server the node writes to (``host:port`` as configured; the
    master's address when ``follows_master``, a Sentinel URL; a cluster's placeholder):
    the append step records it with every feed and moves a feed last written on another
    server to a new epoch.  ``suspect`` is set when the node reaches a different Redis
    server process (a restart, a failover) or its listener was lost: the live reader
    then verifies every feed it follows before reading on, and clears it.
    """

    def __init__(self, configured: str, *, follows_master: bool = False) -> None:
        self.identity = configured
        self.suspect = False
        #: How many times this node found itself talking to another Redis process.
        self.server_changes = 0
        self._follows_master = follows_master
        self._run_id: bytes | None = None

    def reached(self, info: bytes, address: str) -> None:
        """A new connection reached the server at ``address`` (``host:port``), whose
        ``INFO server`` reply is ``info``: note which server this node writes to now
        (when it follows a master), and whether its ``run_id`` names another process
        than before (then :attr:`suspect`)."""
        run_id = None
        for line in info.splitlines():
            if line.startswith(b"run_id:"):
                run_id = line[7:].strip()
        if self._follows_master:
            self.identity = address
        if run_id != self._run_id:
            if self._run_id is not None:
                self.suspect = True
                self.server_changes += 1
            self._run_id = run_id
