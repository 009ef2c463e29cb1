"""casesignd.pdf.parse builds common strings itself: the object pypdf's
create_string_object builds, with the same class, value and attributes."""

from __future__ import annotations

import random

import pytest
from pypdf.generic import create_string_object

from casesignd.pdf import parse as pdfparse


def _described(obj: object) -> tuple:
    return type(obj), bytes(obj) if isinstance(obj, bytes) else str(obj), list(vars(obj).items())


@pytest.mark.parametrize("raw", [
    b"", b"anonymous", b"D:20260102030405+00'00'", b"\xfe\xff\x00a", b"\xff\xfea\x00",
    b"\xfe\xff", b"\xfeab", b"a\x00", b"\x00a", b"\x18\x19", b"\x7f", b"\x80\x9f", b"\xad",
    b"caf\xe9", b"\xa0", b"tab\tline\nend",
])
def test_strings_are_the_objects_pypdf_builds(raw: bytes) -> None:
    assert _described(pdfparse._string(raw, None)) == _described(create_string_object(raw, None))


def test_every_byte_and_random_strings_are_the_objects_pypdf_builds() -> None:
    rnd = random.Random(1)
    cases = [bytes([b]) for b in range(256)]
    for _ in range(20_000):
        cases.append(bytes(rnd.randrange(256) for _ in range(rnd.randrange(0, 10))))
        cases.append(bytes(rnd.choice(b"ab \xfe\xff\x00\x18\x7f\x80\xad\xa0")
                           for _ in range(rnd.randrange(0, 6))))
    for raw in cases:
        assert _described(pdfparse._string(raw, None)) == \
            _described(create_string_object(raw, None)), raw


@pytest.mark.parametrize("encoding", ["bytes", "latin-1", ["a"] * 256, {97: "b"}])
def test_a_forced_encoding_is_pypdf_s_to_apply(encoding: object) -> None:
    assert _described(pdfparse._string(b"abc", encoding)) == \
        _described(create_string_object(b"abc", encoding))
