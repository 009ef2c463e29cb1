"""Serializing what the update rewrites: values read back as they were read."""

from __future__ import annotations

import io

import pytest
from pypdf import generic as g
from pypdf.generic import read_object

from casesignd.pdf.syntax import real_text, serialize


@pytest.mark.parametrize(
    ("text", "written"),
    [(b"595.303937007874", b"595.303937007874"), (b"841.889763779528", b"841.889763779528"),
     (b"0.00001", b"0.00001"), (b"-12.5", b"-12.5"), (b"10000000000000000.0", None), (b".5", b"0.5"),
     (b"3.0", b"3.0"), (b"123456789012.25", b"123456789012.25")],
)
def test_reals_keep_their_digits(text: bytes, written: bytes | None) -> None:
    value = read_object(io.BytesIO(text + b" "), None)
    out = real_text(value)
    assert b"e" not in out.lower()  # §7.3.3: no exponent form
    if written is not None:
        assert out == written
    assert float(out) == float(value)


def test_a_rewritten_page_keeps_its_media_box() -> None:
    page = read_object(io.BytesIO(b"<</Type /Page /MediaBox [0 0 595.303937007874 841.889763779528]"
                                  b" /Annots [4 0 R]>> "), None)
    again = read_object(io.BytesIO(serialize(g.DictionaryObject(page)) + b" "), None)
    assert [float(x) for x in again["/MediaBox"]] == [0, 0, 595.303937007874, 841.889763779528]
    assert b"595.303937007874 841.889763779528" in serialize(page)
