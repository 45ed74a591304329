"""The hand-built server frame header is byte-identical to websockets' codec."""

from __future__ import annotations

import pytest
from websockets.frames import Frame, Opcode

from gateway.wire.messages import frame

# Each boundary of RFC 6455's three length encodings (7-bit, 16-bit, 64-bit).
SIZES = [0, 1, 125, 126, 127, 65_535, 65_536, 70_000]


@pytest.mark.parametrize("size", SIZES)
def test_frame_matches_websockets_serialize(size: int) -> None:
    payload = bytes(i % 251 for i in range(size))
    assert frame(payload) == Frame(Opcode.TEXT, payload).serialize(mask=False)
