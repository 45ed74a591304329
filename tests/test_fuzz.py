"""Fuzzing the parsers clients reach: never a crash, only typed errors."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.errors import GatewayError
from gateway.validate import validate_team_publish
from gateway.wire import messages

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=30),
    lambda children: (
        st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=12), children, max_size=5)
    ),
    max_leaves=30,
)


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=200) | st.text(max_size=200).map(str.encode))
def test_websocket_decoder_raw_bytes(raw: bytes) -> None:
    try:
        messages.decode_client(raw)
    except messages.MessageError as exc:
        assert exc.code == "invalid_request" and exc.message


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.fixed_dictionaries(
        {},
        optional={
            "type": st.sampled_from(["subscribe", "unsubscribe", "auth", "other"]) | json_values,
            "feed": st.text(max_size=400) | json_values,
            "after": st.text(max_size=40) | json_values,
            "token": st.text(max_size=40) | json_values,
        },
    )
    | json_values
)
def test_websocket_decoder_json_shapes(value: Any) -> None:
    try:
        message = messages.decode_client(json.dumps(value))
    except messages.MessageError as exc:
        assert exc.code == "invalid_request"
        assert exc.feed is None or isinstance(exc.feed, str)
    else:
        assert isinstance(message, messages.Subscribe | messages.Unsubscribe | messages.Auth)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    json_values
    | st.lists(
        st.fixed_dictionaries(
            {"source": json_values, "event": json_values},
            optional={"extra": json_values},
        ),
        max_size=3,
    )
)
def test_publish_body_validation(body: Any) -> None:
    try:
        validate_team_publish(body, tenant="acme", team="0190f5a2-7c1e-7b3d-8a4f-000000000001")
    except GatewayError as exc:
        assert exc.code == "invalid_request" and exc.message
