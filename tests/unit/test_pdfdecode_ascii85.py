"""casesignd.pdf.decode.ascii85 against the decoder it replaces (pypdf's ASCII85Decode,
over the standard library's base64.a85decode): the same bytes, the same warning and
the same error, on producers' encodings and on hostile and malformed data."""

from __future__ import annotations

import base64
import logging
import random
import zlib

import pytest
from pypdf.filters import ASCII85Decode

from casesignd.core.errors import LimitExceeded
from casesignd.pdf import decode as pdfdecode

_WS = b"\x00\t\n\x0c\r "


def _outcome(decode, data: bytes, caplog: pytest.LogCaptureFixture) -> tuple:
    """What decoding ``data`` gives: the bytes or the error, and pypdf's warnings."""
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="pypdf"):
        try:
            result: object = decode(data)
        except Exception as e:  # noqa: BLE001 - the error itself is compared
            result = (type(e), str(e))
    return result, [r.getMessage() for r in caplog.records]


def _same(data: bytes, caplog: pytest.LogCaptureFixture) -> None:
    assert _outcome(pdfdecode.ascii85, data, caplog) == \
        _outcome(ASCII85Decode.decode, data, caplog), data[:200]


def _encodings() -> list[bytes]:
    """Well-formed encodings of many lengths and contents, as producers write them."""
    rnd = random.Random(85)
    out = []
    for size in [*range(0, 41), 64, 100, 255, 1000, 4099, 50_000]:
        data = bytes(rnd.randrange(256) for _ in range(size))
        out.append(base64.a85encode(data, adobe=True))
        out.append(base64.a85encode(data, adobe=True)[2:])  # no "<~", as reportlab writes
        out.append(base64.a85encode(data, adobe=True, wrapcol=72))
        out.append(base64.a85encode(zlib.compress(data), adobe=True, pad=True))
    for zeros in ([0] * 4, [0] * 8, [0] * 7, [1, 0, 0, 0, 0, 2], [0] * 4 + [255] * 4):
        out.append(base64.a85encode(bytes(zeros), adobe=True))  # "z" groups
    out.append(base64.a85encode(b"\xff" * 12, adobe=True))  # "s8W-!" groups, the largest
    return out


@pytest.mark.parametrize("data", _encodings(), ids=lambda d: f"{len(d)}B")
def test_well_formed_encodings_decode_as_pypdf_decodes_them(
        data: bytes, caplog: pytest.LogCaptureFixture) -> None:
    _same(data, caplog)


HOSTILE = [
    b"", b"~>", b"<~~>", b"<~>", b"~", b">", b"<~", b"z~>", b"zzzz~>", b"<~z~>",
    # white space: around, inside groups, between "~" and ">", and \x0b (not PDF's)
    b" \n<~87cURD]i,\"Ebo80~>\r\n", b"8\x007\tc\nU\x0cR\rD ]i,\"Ebo80~>",
    b"87cURD]i,\"Ebo80~ \n >", b"87cURD]i,\"Ebo80~\x00>", b"87cUR\x0bD]i,\"Ebo80~>",
    b"87cURD]i,\"Ebo80~>  \x00", b"87cURD]i,\"Ebo80 ~ >",
    # the terminator missing, doubled, followed by data, or inside
    b"87cURD]i,\"Ebo80", b"87cURD]i,\"Ebo80~", b"87cURD]i,\"Ebo80>", b"87cURD]i,\"Ebo80~>~>",
    b"87cURD]i,\"Ebo80~>abc", b"87cUR~>D]i,\"Ebo80~>", b"<~<~87cURD]i~>", b"<~87cURD]i,\"Ebo80",
    # "z": inside a group, after a short last group, as the whole data
    b"87z~>", b"87cURz~>", b"87cUzRD~>", b"z87cURz~>", b"87cURD]i,\"Ebo80z~>", b"zz8~>",
    # a truncated last group: 1 digit (nothing), 2, 3 and 4 digits
    b"8~>", b"87~>", b"87c~>", b"87cU~>", b"87cURD~>",
    # characters outside the alphabet
    b"87cvR~>", b"87c{R~>", b"87c~R~>", b"87c\x80R~>", b"87c\x1fR~>", b"yyyy~>", b"87cURy~>",
    # groups past 2**32 - 1, the largest one, and short groups that pad past it
    b's8W-"~>', b"s8W-!~>", b"uuuuu~>", b"s8W-!s8W-\"~>", b"s8W~>", b"s8W-~>", b"uuuu~>",
    b"uu~>", b"z" * 9 + b's8W-#~>', b"<~s8W-\"~>",
]


@pytest.mark.parametrize("data", HOSTILE)
def test_hostile_and_malformed_data_fail_or_are_repaired_as_pypdf_does(
        data: bytes, caplog: pytest.LogCaptureFixture) -> None:
    _same(data, caplog)


def test_mutated_encodings_decode_or_fail_as_pypdf_does(caplog: pytest.LogCaptureFixture) -> None:
    # A byte or two replaced, dropped or added, from the characters that matter.
    rnd = random.Random(3185)
    alphabet = b"!\"8uvyz{~<>s\x00\n \x0b\xff"
    for _ in range(3000):
        data = bytearray(base64.a85encode(bytes(rnd.randrange(256)
                                                for _ in range(rnd.randrange(0, 30))),
                                          adobe=rnd.random() < 0.7))
        for _ in range(rnd.randrange(1, 3)):
            at = rnd.randrange(len(data) + 1)
            op = rnd.randrange(3)
            if op == 0 and at < len(data):
                data[at] = rnd.choice(alphabet)
            elif op == 1 and at < len(data):
                del data[at]
            else:
                data.insert(at, rnd.choice(alphabet))
        _same(bytes(data), caplog)


def _measure_with(decoder, data: bytes, filters: list[str], budget: int) -> tuple:
    saved = dict(pdfdecode.BOUNDED_DECODERS)
    pdfdecode.BOUNDED_DECODERS.update({"/ASCII85Decode": decoder, "/A85": decoder})
    try:
        return ("ok", pdfdecode.measure_decoded(data, filters, budget, 64))
    except LimitExceeded as e:
        return ("limit", e.code, e.detail)
    except Exception as e:  # noqa: BLE001 - the error itself is compared
        return (type(e), str(e))
    finally:
        pdfdecode.BOUNDED_DECODERS.clear()
        pdfdecode.BOUNDED_DECODERS.update(saved)


@pytest.mark.parametrize("data", [
    base64.a85encode(zlib.compress(b"BT /F1 12 Tf (hello) Tj ET" * 40), adobe=True)[2:],
    base64.a85encode(zlib.compress(bytes(100_000)), adobe=True),
    base64.a85encode(b"not flate data at all", adobe=True),
    b'87cURs8W-"~>', b"87cvR~>", b"87cURD]i,\"Ebo80",
])
@pytest.mark.parametrize("budget", [10, 5000, 1 << 20])
def test_measured_streams_get_the_same_size_or_refusal(data: bytes, budget: int) -> None:
    # What the checks do with an ASCII85 + Flate stream (reportlab's content streams).
    for filters in (["/ASCII85Decode", "/FlateDecode"], ["/A85"]):
        assert _measure_with(pdfdecode.ascii85, data, filters, budget) == \
            _measure_with(ASCII85Decode.decode, data, filters, budget)
