"""RFC 8785 canonical JSON, checked against the RFC's own examples."""

from __future__ import annotations

import json
import struct

import pytest
import rfc8785
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.canonical import canonical
from gateway.errors import InvalidRequest

# RFC 8785 Appendix B: IEEE 754 bit patterns and their canonical serialisation.
NUMBERS = [
    ("0000000000000000", "0"),
    ("8000000000000000", "0"),
    ("0000000000000001", "5e-324"),
    ("8000000000000001", "-5e-324"),
    ("7fefffffffffffff", "1.7976931348623157e+308"),
    ("ffefffffffffffff", "-1.7976931348623157e+308"),
    ("4340000000000000", "9007199254740992"),
    ("c340000000000000", "-9007199254740992"),
    ("4430000000000000", "295147905179352830000"),
    ("44b52d02c7e14af5", "9.999999999999997e+22"),
    ("44b52d02c7e14af6", "1e+23"),
    ("44b52d02c7e14af7", "1.0000000000000001e+23"),
    ("444b1ae4d6e2ef4e", "999999999999999700000"),
    ("444b1ae4d6e2ef4f", "999999999999999900000"),
    ("444b1ae4d6e2ef50", "1e+21"),
    ("3eb0c6f7a0b5ed8c", "9.999999999999997e-7"),
    ("3eb0c6f7a0b5ed8d", "0.000001"),
    ("41b3de4355555553", "333333333.3333332"),
    ("41b3de4355555554", "333333333.33333325"),
    ("41b3de4355555555", "333333333.3333333"),
    ("41b3de4355555556", "333333333.3333334"),
    ("41b3de4355555557", "333333333.33333343"),
    ("becbf647612f3696", "-0.0000033333333333333333"),
    ("43143ff3c1cb0959", "1424953923781206.2"),
]


def from_bits(bits: str) -> float:
    value: float = struct.unpack(">d", bytes.fromhex(bits))[0]
    return value


@pytest.mark.parametrize(("bits", "expected"), NUMBERS)
def test_appendix_b_numbers(bits: str, expected: str) -> None:
    assert canonical(from_bits(bits)) == expected.encode()


@pytest.mark.parametrize("bits", ["7fffffffffffffff", "7ff0000000000000", "fff0000000000000"])
def test_nan_and_infinity_are_rejected(bits: str) -> None:
    with pytest.raises(InvalidRequest):
        canonical(from_bits(bits))


def test_section_3_2_2_example() -> None:
    # The input of RFC 8785 section 3.2.2, parsed as JSON (so 4.50 and 1E30 are floats).
    text = (
        '{"numbers": [333333333.33333329, 1E30, 4.50, 2e-3, 0.000000000000000000000000001],'
        ' "string": "\\u20ac$\\u000F\\u000aA\'\\u0042\\u0022\\u005c\\\\\\"\\/",'
        ' "literals": [null, true, false]}'
    )
    expected = (
        '{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],'
        '"string":"\u20ac$\\u000f\\nA\'B\\"\\\\\\\\\\"/"}'
    )
    assert canonical(json.loads(text)) == expected.encode("utf-8")


def test_section_3_2_3_property_sorting() -> None:
    value = {
        "\u20ac": "Euro Sign",
        "\r": "Carriage Return",
        "\ufb33": "Hebrew Letter Dalet With Dagesh",
        "1": "One",
        "\U0001f600": "Emoji: Grinning Face",
        "\u0080": "Control",
        "\u00f6": "Latin Small Letter O With Diaeresis",
    }
    # Sorted by UTF-16 code units: the emoji's surrogate pair sorts before U+FB33.
    expected = (
        '{"\\r":"Carriage Return","1":"One","\u0080":"Control",'
        '"\u00f6":"Latin Small Letter O With Diaeresis","\u20ac":"Euro Sign",'
        '"\U0001f600":"Emoji: Grinning Face","\ufb33":"Hebrew Letter Dalet With Dagesh"}'
    )
    assert canonical(value) == expected.encode("utf-8")


def test_integers_beyond_double_precision_are_rejected() -> None:
    assert canonical(9007199254740991) == b"9007199254740991"
    with pytest.raises(InvalidRequest):
        canonical(2**64)


# Any JSON value, with the characters where JCS and plain sorted JSON could differ:
# controls, quotes, backslashes, U+2028, characters just below and beyond U+FFFF (key
# order), and numbers on both sides of the fast path's integer bound.
_text = st.text(
    alphabet=st.one_of(
        st.sampled_from('\x00\x01\x08\x09\x0a\x0c\x0d\x1f"\\/\x7f\u2028\u00e9\ue000\uffff'),
        st.characters(min_codepoint=0x10000, max_codepoint=0x1F6FF),
        st.characters(codec="utf-8"),
    ),
    max_size=8,
)
_json = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**60), max_value=2**60)
    | st.sampled_from([2**53 - 1, -(2**53 - 1), 2**53, -(2**53)])
    | st.floats(allow_nan=False, allow_infinity=False)
    | _text,
    lambda children: st.lists(children, max_size=5) | st.dictionaries(_text, children, max_size=5),
    max_leaves=30,
)


def assert_same_as_reference(value: object) -> None:
    """canonical() gives rfc8785's bytes, or InvalidRequest where rfc8785 refuses."""
    try:
        expected = rfc8785.dumps(value)
    except (rfc8785.CanonicalizationError, ValueError, TypeError):
        with pytest.raises(InvalidRequest):
            canonical(value)
    else:
        assert canonical(value) == expected


@settings(max_examples=500, deadline=None)
@given(_json)
def test_fast_path_agrees_with_the_reference_encoder(value: object) -> None:
    assert_same_as_reference(value)


@pytest.mark.parametrize(
    "value",
    [
        {"\ue000": 1, "\U0001f600": 2},  # the two orders differ here
        {"a": [1.5, 2]},  # a float below the top level
        {"n": 2**53},  # an integer beyond the fast path's bound
        (1, 2),  # not plain JSON data
        {1: "x"},  # a non-string key
        "\ud800",  # a lone surrogate
    ],
)
def test_values_outside_the_fast_path_match_the_reference(value: object) -> None:
    assert_same_as_reference(value)
