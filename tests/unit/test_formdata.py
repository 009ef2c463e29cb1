"""The kiosk's multipart/form-data parser, against bodies that real clients build."""

from __future__ import annotations

import pytest
from aiohttp import FormData
from hypothesis import given, settings
from hypothesis import strategies as st

from casesignd.core.errors import BadRequest
from casesignd.http import formdata

DOC = b"%PDF-1.7\r\n--not-a-boundary\r\n\x00\xff binary \r\n\r\n%%EOF\n"


def body(boundary: str, parts: list[tuple[bytes, bytes]], preamble: bytes = b"",
         epilogue: bytes = b"", padding: bytes = b"") -> bytes:
    b = boundary.encode()
    out = preamble + (b"\r\n" if preamble else b"")
    for headers, content in parts:
        out += b"--" + b + padding + b"\r\n" + headers + b"\r\n" + content + b"\r\n"
    return out + b"--" + b + b"--" + epilogue


def named(name: str, extra: bytes = b"") -> bytes:
    return b'Content-Disposition: form-data; name="' + name.encode() + b'"' + extra + b"\r\n"


def parsed(raw: bytes, content_type: str) -> dict[str, bytes]:
    return {n: bytes(c) for n, c in formdata.parse(raw, formdata.boundary(content_type))}


def test_the_two_parts_come_back_byte_for_byte():
    raw = body("xyz", [(named("manifest"), b'{"a":1}'),
                       (named("document", b'; filename="d.pdf"') + b"Content-Type: application/pdf\r\n", DOC)])
    assert parsed(raw, "multipart/form-data; boundary=xyz") == {"manifest": b'{"a":1}', "document": DOC}


@pytest.mark.parametrize("content_type", [
    'multipart/form-data; boundary="a b:c"',
    "Multipart/Form-Data;BOUNDARY=a b:c".replace("a b:c", '"a b:c"'),
    'multipart/form-data; charset=utf-8; boundary="a b:c"',
])
def test_boundary_parameter_forms(content_type):
    raw = body("a b:c", [(named("manifest"), b"{}")])
    assert parsed(raw, content_type) == {"manifest": b"{}"}


def test_preamble_epilogue_and_transport_padding_are_ignored():
    raw = body("q", [(named("manifest"), b"{}"), (named("document"), DOC)],
               preamble=b"this is a preamble", epilogue=b"\r\nepilogue", padding=b"  \t")
    assert parsed(raw, "multipart/form-data; boundary=q") == {"manifest": b"{}", "document": DOC}


def test_the_boundary_inside_content_not_followed_by_a_line_end_is_content():
    content = b"before\r\n--qq-not-the-end\r\nafter"
    raw = body("qq", [(named("document"), content)])
    assert parsed(raw, "multipart/form-data; boundary=qq") == {"document": content}


def test_a_part_without_headers_and_an_empty_part():
    raw = b"--b\r\n" + named("manifest") + b"\r\n\r\n--b--"
    assert parsed(raw, "multipart/form-data; boundary=b") == {"manifest": b""}


@pytest.mark.parametrize("raw,content_type", [
    (b"--b\r\n" + named("manifest") + b"\r\n{}", "multipart/form-data; boundary=b"),  # no close
    (b"--b\r\nContent-Type: text/plain\r\n\r\n{}\r\n--b--", "multipart/form-data; boundary=b"),
    (b"--b\r\nContent-Disposition: attachment; name=\"x\"\r\n\r\n{}\r\n--b--",
     "multipart/form-data; boundary=b"),
    (b"--b\nContent-Disposition: form-data; name=\"x\"\n\n{}\n--b--", "multipart/form-data; boundary=b"),
    (b"nothing here", "multipart/form-data; boundary=b"),
    (b"--b\r\n" + named("m") + b"\r\n{}\r\n--b--", "multipart/form-data"),
    (b"--b\r\n" + named("m") + b"\r\n{}\r\n--b--", "multipart/form-data; boundary=" + "b" * 71),
    (b"--b\r\nno colon here\r\n\r\n{}\r\n--b--", "multipart/form-data; boundary=b"),
])
def test_malformed_bodies_are_invalid_multipart(raw, content_type):
    with pytest.raises(BadRequest) as e:
        formdata.parse(raw, formdata.boundary(content_type))
    assert e.value.code == "invalid_multipart"


@settings(max_examples=200, deadline=None)
@given(manifest=st.binary(max_size=300), document=st.binary(max_size=3000))
def test_whatever_aiohttp_formdata_encodes_parses_back(manifest, document):
    form = FormData()
    form.add_field("manifest", manifest, filename="manifest.json", content_type="application/json")
    form.add_field("document", document, filename="doc.pdf", content_type="application/pdf")
    writer = form()
    chunks: list[bytes] = []

    class Sink:
        async def write(self, data: bytes) -> None:
            chunks.append(bytes(data))

    import asyncio

    asyncio.run(writer.write(Sink()))
    assert parsed(b"".join(chunks), writer.content_type) == {"manifest": manifest, "document": document}


@given(document=st.binary(max_size=3000))
def test_whatever_urllib3_encodes_parses_back(document):
    urllib3 = pytest.importorskip("urllib3")
    raw, content_type = urllib3.encode_multipart_formdata(
        {"manifest": ("m.json", b"{}", "application/json"), "document": ("d.pdf", document, "application/pdf")})
    assert parsed(raw, content_type) == {"manifest": b"{}", "document": document}


def test_media_type():
    assert formdata.media_type("Multipart/Form-Data ; boundary=x") == "multipart/form-data"
    assert formdata.media_type(None) == ""
