"""The ``gateway.v1`` WebSocket session (docs/protocol.md), sans I/O.

A :class:`Session` takes the bytes a client sends (:meth:`Session.receive_data`), the
ticks of its timers (:meth:`Session.tick`) and what became of the subscriptions it asked
for (:meth:`Session.subscribed`, :meth:`Session.join_failed`, :meth:`Session.ended`),
and gives back the bytes to send (:meth:`Session.data_to_send`: replies, errors, pings,
the close frame) and the actions its adapter performs (:meth:`Session.actions`: open or
end a subscription, reschedule the timers, drop or end the connection).  It reads no
socket and starts no task, as python-websockets' ``protocol.py``, whose sans-I/O
``ServerProtocol`` it drives for the frames: the adapter
(:mod:`gateway.http.websocket`) does the I/O, and the tests feed it bytes.

Event frames do not pass through here: the fan-out writes them straight to the socket.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from websockets.frames import Close, Frame, Opcode
from websockets.protocol import State
from websockets.server import ServerProtocol

from gateway import access
from gateway.auth import Principal
from gateway.config import Settings
from gateway.cursor import Cursor, parse_cursor
from gateway.dialects.ai_sdk.framing import parse_chunk_id
from gateway.errors import CloseCode, ErrorCode, GatewayError, InvalidRequest, NotFound
from gateway.feed import FeedKey
from gateway.wire import messages
from gateway.wire.ai_sdk_formats import AI_SDK_WS
from gateway.wire.format import Format
from gateway.wire.registry import ws_format

#: websockets' logger, looked up once (its protocol asks for one per socket).
_WS_LOGGER = logging.getLogger("websockets.server")

#: How long a closing socket waits for the client's close frame.
CLOSE_TIMEOUT = 2.0


def subscribe_cursor(fmt: Format, after: str | None) -> tuple[Cursor | None, int | None]:
    """The subscription's ``after``: a cursor, or for the AI SDK format a chunk id
    ``E:O:K`` too (resume after chunk K of the event at ``E:O``)."""
    if after is None:
        return None, None
    if fmt is AI_SDK_WS:
        chunk = parse_chunk_id(after)
        return chunk.cursor, chunk.chunk
    return parse_cursor(after), None


# -- what the adapter does ---------------------------------------------------------------


@dataclass(slots=True)
class Join:
    """Open a subscription to ``feed`` and drive it; then tell the session
    :meth:`Session.subscribed` (or :meth:`Session.join_failed`) with ``ref``, which
    names this subscription among those the feed has had on the socket."""

    feed: str
    ref: int
    key: FeedKey
    fmt: Format
    cursor: Cursor | None
    piece: int | None


@dataclass(slots=True)
class Leave:
    """End the subscription to ``feed`` (its task and its place in the fan-out)."""

    feed: str


@dataclass(slots=True)
class Reschedule:
    """The timers moved earlier: the next tick is due at :meth:`Session.next_due`."""


@dataclass(slots=True)
class Abort:
    """Drop the connection at once, without the close handshake (a peer that does not
    answer may not read either); ``why`` and ``detail`` are for the log."""

    why: str
    detail: dict[str, object] = field(default_factory=dict)


@dataclass(slots=True)
class Finish:
    """The session is over: send what is left to send, then end the connection."""


#: What a session asks of its adapter.  Plain slotted classes, not frozen ones: a
#: frozen dataclass costs ~2 us more to make, a share of every reconnect.
Action = Join | Leave | Reschedule | Abort | Finish


class Session:
    """One socket's ``gateway.v1`` session, after the opening handshake.

    ``verify`` turns a token into its principal (raising :class:`GatewayError`);
    ``clock`` is the monotonic time in seconds.  Both are injected so that the
    session computes nothing from the world it was not given.
    """

    def __init__(
        self,
        principal: Principal,
        settings: Settings,
        verify: Callable[[str], Principal],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.principal = principal
        self.settings = settings
        self._verify = verify
        self._clock = clock
        # websockets' protocol, already open (the opening handshake is ours), with one
        # logger for every socket instead of a lookup per socket.
        self.protocol = ServerProtocol(
            state=State.OPEN, max_size=settings.ws_max_message_bytes, logger=_WS_LOGGER
        )
        #: The subscriptions by feed name, each with the ref of its :class:`Join`.
        self.feeds: dict[str, int] = {}
        self._refs = 0
        # None until there is one: an idle session keeps no list.
        self._actions: list[Action] | None = None
        self._bad_messages = 0
        #: Set by :meth:`close` and :meth:`stop`: no message is acted on any more.
        self.closing = False
        self._finished = False
        self._ping_payload = b""
        #: Monotonic time the outstanding ping was sent (None: none outstanding).
        self._ping_sent: float | None = None
        self._next_ping = clock() + settings.ws_ping_interval
        self._close_deadline: float | None = None
        #: The close code the server chose (None: none yet).
        self.close_code: int | None = None

    # -- output ------------------------------------------------------------------------

    def data_to_send(self) -> bytes:
        """The bytes to write to the socket now (possibly none), in order."""
        return b"".join(self.protocol.data_to_send())

    def actions(self) -> list[Action]:
        """The actions to perform, in order, since the last call."""
        actions = self._actions
        if actions is None:
            return []
        self._actions = None
        return actions

    def _ask(self, action: Action) -> None:
        """Queue ``action`` for the adapter (see :meth:`actions`)."""
        if self._actions is None:
            self._actions = [action]
        else:
            self._actions.append(action)

    # -- bytes in ----------------------------------------------------------------------

    def receive_data(self, data: bytes) -> None:
        """Bytes the client sent."""
        self.protocol.receive_data(data)
        self._process()

    def receive_eof(self) -> None:
        """The client closed its side of the connection."""
        self.protocol.receive_eof()
        self._process()

    def _process(self) -> None:
        for event in self.protocol.events_received():
            if not isinstance(event, Frame):
                continue
            if event.opcode is Opcode.TEXT:
                self._on_text(bytes(event.data))
            elif event.opcode is Opcode.BINARY:
                self._bad(InvalidRequest("binary frames are not part of gateway.v1"))
            elif event.opcode is Opcode.PONG:
                if self._ping_sent is not None and event.data == self._ping_payload:
                    self._ping_sent = None
                    self._next_ping = self._clock() + self.settings.ws_ping_interval
            elif event.opcode is Opcode.CLOSE:
                self._leave_all()
        if self.protocol.state is State.CLOSED or self.protocol.close_expected():
            self._finish()

    def _send(self, payload: bytes) -> None:
        """A message to the client, unless the socket is no longer open."""
        if self.protocol.state is State.OPEN:
            self.protocol.send_text(payload)

    def _error(self, exc: GatewayError, feed: str | None = None, message: str = "") -> None:
        self._send(messages.error(str(exc.code), message or exc.message, feed))

    def _bad(self, exc: GatewayError, feed: str | None = None) -> None:
        self._bad_messages += 1
        self._error(exc, feed)
        if self._bad_messages > self.settings.ws_max_bad_messages:
            self.close(CloseCode.POLICY_VIOLATION, "too many invalid messages")

    def _on_text(self, text: bytes) -> None:
        if self.closing:
            return
        try:
            message = messages.decode_client(text)
        except messages.MessageError as exc:
            self._bad(exc, exc.feed)
            return
        if isinstance(message, messages.Subscribe):
            self._subscribe(message)
        elif isinstance(message, messages.Unsubscribe):
            self._leave(message.feed)
        else:
            self._refresh(message.token)

    # -- subscriptions -----------------------------------------------------------------

    def _subscribe(self, message: messages.Subscribe) -> None:
        name = message.feed
        try:
            key = access.feed_named(self.principal, name)
            fmt = ws_format(key.kind, message.format)
            cursor, piece = subscribe_cursor(fmt, message.after)
        except GatewayError as exc:
            # An error about a feed ends that feed's subscription, and only that one.
            self._leave(name)
            if isinstance(exc, InvalidRequest):
                self._bad(exc, name)
            else:
                self._error(exc, name)
            return
        limit = self.settings.ws_max_subscriptions
        if name not in self.feeds and len(self.feeds) >= limit:
            self._send(
                messages.error(
                    str(ErrorCode.RATE_LIMITED), f"at most {limit} subscriptions per socket", name
                )
            )
            return
        # Subscribing again replaces the subscription (e.g. after epoch_restarted).
        self._leave(name)
        self._refs += 1
        self.feeds[name] = self._refs
        self._ask(Join(name, self._refs, key, fmt, cursor, piece))

    def _leave(self, name: str) -> None:
        if self.feeds.pop(name, None) is not None:
            self._ask(Leave(name))

    def _leave_all(self) -> None:
        for name in list(self.feeds):
            self._leave(name)

    def subscribed(self, feed: str, ref: int, head: Cursor) -> bytes | None:
        """The subscription ``ref`` to ``feed`` is open at ``head``.  Returns the
        ``subscribed`` frame, which goes out with the subscription's first bytes
        (empty once the socket is no longer open), or None if the subscription was
        replaced or ended meanwhile (the adapter closes it).

        Framed here, not by the protocol, which keeps no state for the frames the
        server sends: the adapter writes it as the lead of the subscription's first
        write.
        """
        if self.feeds.get(feed) != ref:
            return None
        if self.protocol.state is not State.OPEN:
            return b""
        return messages.frame(messages.subscribed(feed, head))

    def join_failed(self, feed: str, ref: int, exc: GatewayError) -> None:
        """The subscription ``ref`` to ``feed`` could not be opened: the client is told
        (unless it was replaced or ended meanwhile)."""
        if self.feeds.get(feed) != ref:
            return
        del self.feeds[feed]
        self._error(exc, feed, access.NO_SUCH_FEED if isinstance(exc, NotFound) else "")

    def ended(self, feed: str, ref: int, error: GatewayError | None = None) -> None:
        """The subscription ``ref`` to ``feed`` ended by itself (the adapter has
        released it); with ``error`` (the store failed mid-way) the client is told, and
        resubscribes from its last cursor."""
        if self.feeds.get(feed) != ref:
            return
        del self.feeds[feed]
        if error is not None:
            self._error(error, feed)

    # -- credentials -------------------------------------------------------------------

    def _refresh(self, token: str) -> None:
        try:
            fresh = self._verify(token)
        except GatewayError as exc:
            self._error(exc)
            return
        old = self.principal
        if (fresh.issuer, fresh.tenant, fresh.subject) != (old.issuer, old.tenant, old.subject):
            self._send(
                messages.error(
                    str(ErrorCode.UNAUTHENTICATED),
                    "a refreshed token must have the same iss, tenant and sub",
                )
            )
            return
        try:
            fresh.require_subscribe()
        except GatewayError as exc:
            self._error(exc)
            return
        self.principal = fresh
        # The fresh token may expire sooner than the one it replaces.
        self._ask(Reschedule())
        for name in list(self.feeds):
            try:
                access.feed_named(fresh, name)
            except GatewayError:
                self._leave(name)
                self._send(messages.error(str(ErrorCode.NOT_FOUND), access.NO_SUCH_FEED, name))

    # -- timers ------------------------------------------------------------------------

    def tick(self, now: float, wall: float) -> float:
        """Run the timers that are due (``now`` monotonic, ``wall`` the clock, seconds):
        the close handshake's timeout, token expiry, pings and their timeout.  Returns
        when the next one is due (monotonic)."""
        if self._close_deadline is not None:
            if now >= self._close_deadline:
                self._finish()
                return now + CLOSE_TIMEOUT
            return self._close_deadline
        if wall >= self.principal.expires_at:
            self.close(CloseCode.UNAUTHENTICATED, "token expired")
            return now + CLOSE_TIMEOUT
        if self._ping_sent is not None:
            if now - self._ping_sent > self.settings.ws_ping_timeout:
                timeout = self.settings.ws_ping_timeout
                self.abandon(CloseCode.KEEPALIVE_TIMEOUT, "ping timeout", timeout=timeout)
                return now + CLOSE_TIMEOUT
        elif now >= self._next_ping and self.protocol.state is State.OPEN:
            self._ping_payload = os.urandom(4)
            self._ping_sent = now
            self.protocol.send_ping(self._ping_payload)
        return self.next_due(now, wall)

    def next_due(self, now: float, wall: float) -> float:
        """When the close handshake's timeout, the ping (or its timeout) or the token's
        expiry is next due (monotonic)."""
        if self._close_deadline is not None:
            return self._close_deadline
        if self._ping_sent is not None:
            ping = self._ping_sent + self.settings.ws_ping_timeout
        else:
            ping = self._next_ping
        return min(ping, now + max(0.0, self.principal.expires_at - wall))

    # -- closing -----------------------------------------------------------------------

    def close(self, code: int, reason: str) -> None:
        """Close with ``code``: subscriptions end, the close frame goes out, and the
        session finishes when the client answers or after :data:`CLOSE_TIMEOUT`."""
        if self.closing:
            return
        self.closing = True
        self.close_code = code
        self._leave_all()
        if self.protocol.state is State.OPEN:
            self.protocol.send_close(code, reason)
        # The client's close frame ends it sooner (see _process).
        self._close_deadline = self._clock() + CLOSE_TIMEOUT
        self._ask(Reschedule())

    def abandon(self, code: int, why: str, **detail: object) -> None:
        """Give up on the peer (it does not answer, or does not read): subscriptions
        end and the connection is dropped without the close handshake; ``code`` is
        the reason recorded."""
        self.close_code = code
        self._leave_all()
        self._ask(Abort(why, detail))
        self._finish()

    def stop(self) -> None:
        """The connection is over (closed or lost): end every subscription and act on
        no message any more."""
        self.closing = True
        self._leave_all()

    def _finish(self) -> None:
        if not self._finished:
            self._finished = True
            self._ask(Finish())

    def final_code(self) -> int | None:
        """The close code the server chose, or None when the client closed first."""
        if self.close_code is None and isinstance(self.protocol.close_sent, Close):
            # The protocol closed by itself (a message too big, a protocol error) or
            # answered the client's close.
            sent = self.protocol.close_sent.code
            received = self.protocol.close_rcvd
            if not (isinstance(received, Close) and received.code == sent):
                return sent
        return self.close_code

    def shutdown(self) -> None:
        """Drain: close with 1012 so the client reconnects elsewhere and resumes."""
        self.close(CloseCode.SERVICE_RESTART, "service restart: reconnect and resume")


__all__ = [
    "CLOSE_TIMEOUT",
    "Abort",
    "Action",
    "Finish",
    "Join",
    "Leave",
    "Reschedule",
    "Session",
    "subscribe_cursor",
]
