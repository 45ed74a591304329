"""TeamItem bytes are the RFC 8785 form of the whole item (seed rules 10-12, 21)."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from gateway.canonical import canonical
from gateway.cursor import MAX_INT, Cursor
from gateway.wire import event_stream
from gateway.wire.teamitem import epoch_restarted_item, team_item, team_payload

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53) + 1, 2**53 - 1) | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=20,
)


@given(
    epoch=st.integers(0, MAX_INT),
    offset=st.integers(0, MAX_INT),
    source=st.dictionaries(st.text(max_size=8), json_values, max_size=4),
    event=st.dictionaries(st.text(max_size=8), json_values, max_size=6),
)
def test_concatenation_equals_canonicalising_the_whole_item(
    epoch: int, offset: int, source: dict[str, object], event: dict[str, object]
) -> None:
    whole = {
        "kind": "event",
        "cursor": {"epoch": epoch, "offset": offset},
        "source": source,
        "event": event,
    }
    assert team_item(epoch, offset, team_payload(source, event)) == canonical(whole)


def test_epoch_restarted_item() -> None:
    raw = epoch_restarted_item(Cursor(17, 4))
    assert raw == b'{"cursor":{"epoch":17,"offset":4},"kind":"epoch_restarted"}'
    assert raw == canonical({"kind": "epoch_restarted", "cursor": {"epoch": 17, "offset": 4}})


def test_sse_message_framing() -> None:
    assert event_stream.message(b"{}", b"1:2") == b"id: 1:2\ndata: {}\n\n"
    assert event_stream.message(b"{}") == b"data: {}\n\n"
    # A stray line break can never end the message early or inject a field.
    framed = event_stream.message(b"a\r\nid: 9:9\rb", b"1:2")
    assert framed == b"id: 1:2\ndata: a\ndata: id: 9:9\ndata: b\n\n"
    assert b"\r" not in framed
    assert event_stream.comment(b"x\ny") == b": x y\n\n"
    assert event_stream.KEEPALIVE == b": keepalive\n"
    assert json.loads(team_item(1, 1, team_payload({}, {"t": "a\nb"})))["event"] == {"t": "a\nb"}
