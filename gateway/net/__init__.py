"""Generic networking, knowing nothing of the gateway's routes: the HTTP/1.1 parser and
listener, the WebSocket opening handshake, the tasks a server owns, the open connections
and their timers, connection limits and a connection's log fields.  The fan-out writes to
a connection through the Writer port its :class:`~gateway.net.server.Stream` provides."""
