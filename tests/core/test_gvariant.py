"""The GVariant codec against the examples of GLib's "GVariant Serialisation" specification,
round trips, and malformed data."""

from __future__ import annotations

from pathlib import Path

import pytest

from builder.core import gvariant
from builder.core.gvariant import FileSlice, GVariantError, Variant

# (type, value, serialized bytes) from the specification's worked examples.
SPEC_EXAMPLES = [
    ("s", "hello world", b"hello world\0"),
    ("(si)", ("foo", -1), bytes.fromhex("666f6f00ffffffff04")),
    ("as", ["i", "can", "has", "strings?"],
     b"i\0can\0has\0strings?\0" + bytes([0x02, 0x06, 0x0A, 0x13])),
    ("a{si}", [("hi", -2), ("bye", -1)],
     bytes.fromhex("68690000feffffff0300000062796500ffffffff040915")),
    ("ai", [1, 2], bytes.fromhex("0100000002000000")),
    ("(yy)", (1, 2), bytes.fromhex("0102")),
]


@pytest.mark.parametrize(("type_text", "value", "data"), SPEC_EXAMPLES)
def test_encoding_matches_the_specification(type_text: str, value: object, data: bytes) -> None:
    assert gvariant.join(gvariant.encode(type_text, value)) == data
    assert gvariant.decode(type_text, data) == value


def test_variants_keep_their_child_opaque_and_round_trip() -> None:
    inner = gvariant.join(gvariant.encode("(uu)", (1, 2)))
    data = gvariant.join(gvariant.encode("v", Variant("(uu)", inner)))
    assert data == inner + b"\0(uu)"
    decoded = gvariant.decode("v", data)
    assert isinstance(decoded, Variant) and decoded.type == "(uu)"
    assert bytes(decoded.data) == inner  # type: ignore[arg-type]


def test_containers_over_255_bytes_use_wider_framing_offsets() -> None:
    value = [("x" * 200, Variant("s", b"y" * 100 + b"\0")), ("z", Variant("t", bytes(8)))]
    data = gvariant.join(gvariant.encode("a{sv}", value))
    assert len(data) > 255
    assert int.from_bytes(data[-2:], "little") == len(data) - 4  # two 2-byte offsets
    decoded = gvariant.decode("a{sv}", data)
    assert [(k, v.type, bytes(v.data)) for k, v in decoded] == [  # type: ignore[attr-defined]
        (k, v.type, v.data) for k, v in value]


def test_file_slices_are_streamed_into_the_output(tmp_path: Path) -> None:
    blob = tmp_path / "part"
    blob.write_bytes(b"\x00" + b"payload" * 1000)
    pieces = gvariant.encode("(sv)", ("key", Variant("(yay)", FileSlice(blob, 7001))))
    out = tmp_path / "out"
    with out.open("wb") as handle:
        written = gvariant.write_pieces(pieces, handle, chunk=512)
    expected = gvariant.join(gvariant.encode("(sv)", ("key", Variant("(yay)", blob.read_bytes()))))
    assert written == len(expected) and out.read_bytes() == expected


def test_big_endian_numbers_when_asked() -> None:
    assert gvariant.join(gvariant.encode("(ut)", (1, 2), byteorder="big")) == (
        bytes.fromhex("00000001") + bytes(4) + bytes.fromhex("0000000000000002"))
    assert gvariant.decode("(ut)", bytes.fromhex("00000001000000000000000000000002"),
                           byteorder="big") == (1, 2)


@pytest.mark.parametrize("byteorder", ["Big", "network", ""])
def test_an_unknown_byte_order_is_refused_not_guessed(byteorder: str) -> None:
    with pytest.raises(ValueError, match=f"byteorder must be 'little' or 'big', not "
                                         f"{byteorder!r}"):
        gvariant.decode("u", bytes(4), byteorder=byteorder)
    with pytest.raises(ValueError, match="byteorder must be"):
        gvariant.encode("u", 1, byteorder=byteorder)


@pytest.mark.parametrize(("type_text", "data", "problem"), [
    ("s", b"no terminator", "NUL"),
    ("as", b"abc\0\xff", "framing"),
    ("ai", b"\x01\x02\x03", "multiple"),
    ("(su)", b"\x05", "outside"),
    ("v", b"no type string", "type string"),
])
def test_malformed_data_is_an_error_not_garbage(type_text: str, data: bytes,
                                                problem: str) -> None:
    with pytest.raises(GVariantError, match=problem):
        gvariant.decode(type_text, data)


def test_unsupported_types_are_refused() -> None:
    with pytest.raises(GVariantError, match="unsupported type 'm' in 'ms'"):
        gvariant.parse_type("ms")
