"""The ``gateway.v1`` session (gateway/session.py), sans I/O: client bytes in, server
bytes and actions out, no sockets, no event loop (docs/protocol.md)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from websockets.frames import Close, Frame, Opcode

from gateway.auth import Principal
from gateway.config import Settings
from gateway.cursor import Cursor
from gateway.errors import CloseCode, NotFound, Unauthenticated, Unavailable
from gateway.feed import FeedKind
from gateway.session import (
    CLOSE_TIMEOUT,
    Abort,
    Action,
    Finish,
    Join,
    Leave,
    Reschedule,
    Session,
)
from gateway.wire.formats import RUN_WS, TEAM_WS

TEAM = "0190f5a2-7c1e-7b3d-8a4f-000000000001"
OTHER_TEAM = "0190f5a2-7c1e-7b3d-8a4f-000000000002"
FEED = f"team/{TEAM}"
OTHER = f"team/{OTHER_TEAM}"
RUN = "run/t1/r1"
NOW = 1000.0
WALL = 1_800_000_000.0


def principal(subject: str = "agent", teams: frozenset[str] | None = None) -> Principal:
    return Principal(
        issuer="test",
        tenant="acme",
        subject=subject,
        scopes=frozenset({"subscribe"}),
        teams=teams,
        threads=None,
        expires_at=WALL + 3600,
    )


TOKENS: dict[str, Principal] = {
    "same": principal(),
    "other-subject": principal(subject="someone-else"),
    "narrower": principal(teams=frozenset({OTHER_TEAM})),
    "no-scope": Principal(
        issuer="test",
        tenant="acme",
        subject="agent",
        scopes=frozenset(),
        teams=None,
        threads=None,
        expires_at=WALL + 3600,
    ),
}


def verify(token: str) -> Principal:
    try:
        return TOKENS[token]
    except KeyError:
        raise Unauthenticated("invalid token") from None


class Clock:
    def __init__(self) -> None:
        self.now = NOW

    def __call__(self) -> float:
        return self.now


def session(**settings: Any) -> tuple[Session, Clock]:
    clock = Clock()
    return Session(principal(), Settings(**settings), verify, clock=clock), clock


def client_frame(opcode: Opcode, data: bytes) -> bytes:
    """A frame as a client sends it (masked, RFC 6455 5.3)."""
    return Frame(opcode, data).serialize(mask=True)


def text(message: dict[str, Any] | str) -> bytes:
    body = message if isinstance(message, str) else json.dumps(message)
    return client_frame(Opcode.TEXT, body.encode())


def frames(data: bytes) -> list[tuple[int, bytes]]:
    """The server's frames (unmasked, unfragmented) as (opcode, payload)."""
    out = []
    while data:
        assert data[0] & 0x80, "a final frame"
        opcode, size, at = data[0] & 0x0F, data[1] & 0x7F, 2
        assert not data[1] & 0x80, "server frames are not masked"
        if size == 126:
            size, at = int.from_bytes(data[2:4], "big"), 4
        elif size == 127:
            size, at = int.from_bytes(data[2:10], "big"), 10
        out.append((opcode, data[at : at + size]))
        data = data[at + size :]
    return out


def replies(s: Session) -> list[dict[str, Any]]:
    """The text messages the session has to send, decoded."""
    sent = frames(s.data_to_send())
    assert all(op == Opcode.TEXT.value for op, _ in sent), sent
    return [json.loads(payload) for _, payload in sent]


def close_sent(s: Session) -> Close:
    sent = frames(s.data_to_send())
    assert [op for op, _ in sent] == [Opcode.CLOSE.value], sent
    return Close.parse(sent[0][1])


def joined(s: Session, message: dict[str, Any]) -> Join:
    s.receive_data(text({"type": "subscribe", **message}))
    actions = s.actions()
    assert isinstance(actions[-1], Join), actions
    assert s.data_to_send() == b""
    return actions[-1]


# -- subscribe -----------------------------------------------------------------------------


def test_subscribe_asks_to_join_and_subscribed_frames_the_head() -> None:
    s, _ = session()
    join = joined(s, {"feed": FEED})
    assert (join.feed, join.key.kind, join.fmt, join.cursor, join.piece) == (
        FEED,
        FeedKind.TEAM,
        TEAM_WS,
        None,
        None,
    )
    lead = s.subscribed(FEED, join.ref, Cursor(7, 3))
    assert lead is not None
    assert frames(lead) == [
        (Opcode.TEXT.value, b'{"type":"subscribed","feed":"%s","cursor":"7:3"}' % FEED.encode())
    ]


def test_subscribe_after_a_cursor_and_in_a_format() -> None:
    s, _ = session()
    join = joined(s, {"feed": RUN, "after": "7:2", "format": "ag-ui"})
    assert (join.key.kind, join.fmt, join.cursor) == (FeedKind.RUN, RUN_WS, Cursor(7, 2))


def test_subscribing_again_replaces_the_subscription() -> None:
    s, _ = session()
    first = joined(s, {"feed": FEED})
    s.receive_data(text({"type": "subscribe", "feed": FEED, "after": "7:1"}))
    leave, second = s.actions()
    assert leave == Leave(FEED) and isinstance(second, Join) and second.ref != first.ref
    # The first one, opened late, is not announced: its adapter closes it.
    assert s.subscribed(FEED, first.ref, Cursor(7, 3)) is None
    assert s.subscribed(FEED, second.ref, Cursor(7, 3))


def test_unsubscribe_leaves_without_an_answer() -> None:
    s, _ = session()
    join = joined(s, {"feed": FEED})
    s.receive_data(text({"type": "unsubscribe", "feed": FEED}))
    assert s.actions() == [Leave(FEED)]
    s.receive_data(text({"type": "unsubscribe", "feed": FEED}))  # nothing to leave
    assert s.actions() == [] and s.data_to_send() == b""
    assert s.subscribed(FEED, join.ref, Cursor(7, 3)) is None


@pytest.mark.parametrize(
    ("message", "code", "feed"),
    [
        ({"feed": FEED, "after": "nope"}, "invalid_cursor", FEED),
        ({"feed": FEED, "format": "ag-ui"}, "invalid_request", FEED),
        ({"feed": "elsewhere/x"}, "invalid_request", "elsewhere/x"),
        ({"feed": "team/not-a-uuid"}, "not_found", "team/not-a-uuid"),
        ({"feed": FEED, "colour": "red"}, "invalid_request", FEED),
        ({"feed": FEED, "after": 3}, "invalid_request", FEED),
    ],
)
def test_a_subscribe_that_cannot_be_acted_on_is_an_error_about_its_feed(
    message: dict[str, Any], code: str, feed: str
) -> None:
    s, _ = session()
    s.receive_data(text({"type": "subscribe", **message}))
    assert s.actions() == []
    [reply] = replies(s)
    assert reply["type"] == "error" and reply["code"] == code and reply["feed"] == feed
    assert set(reply) == {"type", "feed", "code", "message"} and reply["message"]


def test_an_error_about_a_feed_ends_that_subscription_only() -> None:
    s, _ = session()
    joined(s, {"feed": FEED})
    joined(s, {"feed": OTHER})
    s.receive_data(text({"type": "subscribe", "feed": FEED, "after": "bad"}))
    assert s.actions() == [Leave(FEED)]
    assert [r["code"] for r in replies(s)] == ["invalid_cursor"]
    assert list(s.feeds) == [OTHER]


def test_subscriptions_past_the_limit_are_refused() -> None:
    s, _ = session(ws_max_subscriptions=1)
    joined(s, {"feed": FEED})
    s.receive_data(text({"type": "subscribe", "feed": OTHER}))
    assert s.actions() == []
    assert replies(s) == [
        {
            "type": "error",
            "feed": OTHER,
            "code": "rate_limited",
            "message": "at most 1 subscriptions per socket",
        }
    ]
    # Replacing the one it has is not one more.
    joined(s, {"feed": FEED, "after": "7:1"})


# -- what became of a subscription ---------------------------------------------------------


def test_a_join_that_fails_is_an_error_about_its_feed() -> None:
    s, _ = session()
    join = joined(s, {"feed": FEED})
    s.join_failed(FEED, join.ref, NotFound("the store's own words"))
    assert replies(s) == [
        {"type": "error", "feed": FEED, "code": "not_found", "message": "no such feed"}
    ]
    assert s.feeds == {}
    other = joined(s, {"feed": OTHER})
    s.join_failed(OTHER, other.ref, Unavailable("the feed store cannot be reached"))
    assert replies(s) == [
        {
            "type": "error",
            "feed": OTHER,
            "code": "unavailable",
            "message": "the feed store cannot be reached",
        }
    ]


def test_what_ends_after_it_was_replaced_says_nothing() -> None:
    s, _ = session()
    first = joined(s, {"feed": FEED})
    second = joined(s, {"feed": FEED})
    s.join_failed(FEED, first.ref, NotFound("gone"))
    s.ended(FEED, first.ref, Unavailable("down"))
    assert s.data_to_send() == b"" and s.feeds == {FEED: second.ref}


def test_a_subscription_that_ends_with_an_error_tells_the_client() -> None:
    s, _ = session()
    join = joined(s, {"feed": FEED})
    s.ended(FEED, join.ref, Unavailable("the feed store cannot be reached"))
    assert [(r["code"], r["feed"]) for r in replies(s)] == [("unavailable", FEED)]
    assert s.feeds == {}
    again = joined(s, {"feed": FEED})
    s.ended(FEED, again.ref)  # without an error: nothing to say
    assert s.data_to_send() == b""


# -- bad messages --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "data",
    [
        text("{not json"),
        text("[1, 2]"),
        text({"type": "publish"}),
        text({"type": "subscribe"}),
        client_frame(Opcode.BINARY, b"\x00"),
    ],
    ids=["not-json", "not-an-object", "unknown-type", "missing-feed", "binary"],
)
def test_a_bad_message_is_an_error_without_a_feed(data: bytes) -> None:
    s, _ = session()
    s.receive_data(data)
    [reply] = replies(s)
    assert reply["type"] == "error" and reply["code"] == "invalid_request"
    assert "feed" not in reply and reply["message"]
    assert s.actions() == []


def test_too_many_bad_messages_close_the_socket_with_1008() -> None:
    s, _ = session(ws_max_bad_messages=2)
    joined(s, {"feed": FEED})
    s.receive_data(text("x") * 3 + text({"type": "subscribe", "feed": OTHER}))
    # The subscribe after the close is ignored; a close sent while reading ends the
    # connection once it is written (the protocol expects the close).
    assert s.actions() == [Leave(FEED), Reschedule(), Finish()]
    sent = frames(s.data_to_send())
    assert [op for op, _ in sent] == [Opcode.TEXT.value] * 3 + [Opcode.CLOSE.value]
    assert Close.parse(sent[-1][1]) == Close(1008, "too many invalid messages")
    assert s.next_due(NOW, WALL) == NOW + CLOSE_TIMEOUT
    assert s.final_code() == CloseCode.POLICY_VIOLATION


def test_a_message_too_big_closes_with_1009() -> None:
    s, _ = session(ws_max_message_bytes=64)
    s.receive_data(text({"type": "subscribe", "feed": FEED, "after": "1" * 100}))
    assert close_sent(s).code == 1009
    assert s.final_code() == 1009


# -- credentials ---------------------------------------------------------------------------


def test_a_refreshed_token_of_the_same_subject_is_taken_silently() -> None:
    s, _ = session()
    s.receive_data(text({"type": "auth", "token": "same"}))
    assert s.actions() == [Reschedule()] and s.data_to_send() == b""


@pytest.mark.parametrize(
    ("token", "message"),
    [
        ("forged", "invalid token"),
        ("other-subject", "a refreshed token must have the same iss, tenant and sub"),
        ("no-scope", "token lacks the subscribe scope"),
    ],
)
def test_a_refused_token_keeps_the_old_credentials(token: str, message: str) -> None:
    s, _ = session()
    before = s.principal
    s.receive_data(text({"type": "auth", "token": token}))
    assert replies(s) == [{"type": "error", "code": "unauthenticated", "message": message}]
    assert s.actions() == [] and s.principal is before


def test_a_token_that_no_longer_allows_a_feed_ends_its_subscription() -> None:
    s, _ = session()
    joined(s, {"feed": FEED})
    joined(s, {"feed": OTHER})
    s.receive_data(text({"type": "auth", "token": "narrower"}))
    assert s.actions() == [Reschedule(), Leave(FEED)]
    assert replies(s) == [
        {"type": "error", "feed": FEED, "code": "not_found", "message": "no such feed"}
    ]
    assert list(s.feeds) == [OTHER]


# -- timers --------------------------------------------------------------------------------


def test_a_ping_is_sent_when_due_and_its_pong_sets_the_next() -> None:
    s, clock = session(ws_ping_interval=20.0, ws_ping_timeout=5.0)
    assert s.tick(NOW + 1, WALL) == NOW + 20  # nothing due yet
    assert s.data_to_send() == b""
    assert s.tick(NOW + 20, WALL) == NOW + 25  # the ping, then its timeout
    [(opcode, payload)] = frames(s.data_to_send())
    assert opcode == Opcode.PING.value and len(payload) == 4
    clock.now = NOW + 21
    s.receive_data(client_frame(Opcode.PONG, b"else"))  # not our ping's: ignored
    assert s.next_due(NOW + 21, WALL) == NOW + 25
    s.receive_data(client_frame(Opcode.PONG, payload))
    assert s.next_due(NOW + 21, WALL) == NOW + 41
    assert s.actions() == []


def test_a_ping_unanswered_drops_the_connection_with_1011() -> None:
    s, _ = session(ws_ping_interval=20.0, ws_ping_timeout=5.0)
    joined(s, {"feed": FEED})
    s.tick(NOW + 20, WALL)
    s.data_to_send()
    s.tick(NOW + 25.5, WALL)
    assert s.actions() == [Leave(FEED), Abort("ping timeout", {"timeout": 5.0}), Finish()]
    assert s.data_to_send() == b""  # no close handshake with a peer that does not answer
    assert s.final_code() == CloseCode.KEEPALIVE_TIMEOUT


def test_pings_are_answered_by_the_protocol() -> None:
    s, _ = session()
    s.receive_data(client_frame(Opcode.PING, b"hi"))
    assert frames(s.data_to_send()) == [(Opcode.PONG.value, b"hi")]


def test_an_expired_token_closes_with_4001() -> None:
    s, _ = session()
    joined(s, {"feed": FEED})
    assert s.next_due(NOW, WALL) == NOW + 20  # the ping comes before the expiry
    assert s.next_due(NOW, WALL + 3590) == NOW + 10  # the expiry before the ping
    s.tick(NOW + 10, WALL + 3600)
    assert s.actions() == [Leave(FEED), Reschedule()]
    assert close_sent(s) == Close(4001, "token expired")


def test_the_close_handshake_times_out() -> None:
    s, _ = session()
    s.shutdown()
    assert close_sent(s) == Close(1012, "service restart: reconnect and resume")
    assert s.actions() == [Reschedule()]
    assert s.tick(NOW + 1, WALL) == NOW + CLOSE_TIMEOUT
    assert s.actions() == []
    s.tick(NOW + CLOSE_TIMEOUT, WALL)
    assert s.actions() == [Finish()]
    assert s.final_code() == CloseCode.SERVICE_RESTART


# -- closing -------------------------------------------------------------------------------


def test_the_client_closing_first_ends_the_subscriptions_and_is_answered() -> None:
    s, _ = session()
    joined(s, {"feed": FEED})
    s.receive_data(client_frame(Opcode.CLOSE, Close(1000, "bye").serialize()))
    assert s.actions() == [Leave(FEED), Finish()]
    assert close_sent(s) == Close(1000, "bye")
    assert s.final_code() is None


def test_a_lost_connection_finishes() -> None:
    s, _ = session()
    s.receive_eof()
    assert s.actions() == [Finish()]


def test_abandon_drops_the_connection() -> None:
    s, _ = session()
    joined(s, {"feed": FEED})
    s.abandon(CloseCode.TOO_SLOW, "client does not read its replies")
    expected: list[Action] = [
        Leave(FEED),
        Abort("client does not read its replies"),
        Finish(),
    ]
    assert s.actions() == expected
    assert s.final_code() == CloseCode.TOO_SLOW


def test_a_stopped_session_acts_on_nothing() -> None:
    s, _ = session()
    joined(s, {"feed": FEED})
    s.stop()
    assert s.actions() == [Leave(FEED)]
    s.receive_data(text({"type": "subscribe", "feed": OTHER}) + text("x"))
    assert s.actions() == [] and s.data_to_send() == b""
    s.close(CloseCode.GOING_AWAY, "bye")  # stopped already: nothing more
    assert s.actions() == [] and s.data_to_send() == b""
