"""Media sniffing by content and the evidence check (table-driven)."""

from __future__ import annotations

import io
import pickle
import struct
import zipfile
from pathlib import Path

import pytest

from casesignd.core import media
from casesignd.core.errors import MediaTypeMismatch, MediaTypeNotAllowed, PermanentJobError
from casesignd.core.media import (
    DOCX,
    EXECUTABLE_TYPES,
    OCTET_STREAM,
    PPTX,
    XLSX,
    check_evidence,
    media_type_matches,
    normalize_media_type,
    sniff_bytes,
    sniff_media_type,
)


def _zip(names: list[str]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for name in names:
            z.writestr(name, "<x/>")
    return buf.getvalue()


def _ftyp(brand: bytes) -> bytes:
    return struct.pack(">I", 24) + b"ftyp" + brand + b"\x00\x00\x00\x00" + brand + b"mif1"


SAMPLES: list[tuple[str, bytes, str]] = [
    ("pdf", b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n1 0 obj", "application/pdf"),
    ("pdf_after_junk", b"\r\n" * 100 + b"%PDF-1.4\n", "application/pdf"),
    ("jpeg", b"\xff\xd8\xff\xe0\x00\x10JFIF\x00", "image/jpeg"),
    ("png", b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", "image/png"),
    ("gif87", b"GIF87a\x01\x00", "image/gif"),
    ("gif89", b"GIF89a\x01\x00", "image/gif"),
    ("tiff_le", b"II*\x00\x08\x00\x00\x00", "image/tiff"),
    ("tiff_be", b"MM\x00*\x00\x00\x00\x08", "image/tiff"),
    ("webp", b"RIFF\x24\x00\x00\x00WEBPVP8 ", "image/webp"),
    ("heic", _ftyp(b"heic"), "image/heic"),
    ("heif", _ftyp(b"mif1"), "image/heif"),
    ("avif", _ftyp(b"avif"), "image/avif"),
    ("mp4_is_not_an_image", _ftyp(b"isom"), OCTET_STREAM),
    ("zip", _zip(["a.txt"]), "application/zip"),
    ("empty_zip", b"PK\x05\x06" + bytes(18), "application/zip"),
    ("docx", _zip(["[Content_Types].xml", "word/document.xml"]), DOCX),
    ("xlsx", _zip(["[Content_Types].xml", "xl/workbook.xml"]), XLSX),
    ("pptx", _zip(["[Content_Types].xml", "ppt/presentation.xml"]), PPTX),
    ("zip_with_word_dir_only", _zip(["word/document.xml"]), "application/zip"),
    ("text_ascii", b"Dear J. Doe,\nthe contract is attached.\n", "text/plain"),
    ("text_utf8", "Grüße, 北京, ☃\n".encode(), "text/plain"),
    ("text_bom", b"\xef\xbb\xbfhello\n", "text/plain"),
    ("text_with_nul", b"hello\x00world", OCTET_STREAM),
    ("latin1_is_not_utf8", "Grüße".encode("latin-1"), OCTET_STREAM),
    ("exe", b"MZ\x90\x00\x03\x00\x00\x00", "application/x-msdownload"),
    ("elf", b"\x7fELF\x02\x01\x01\x00", "application/x-executable"),
    ("macho64", b"\xcf\xfa\xed\xfe\x07\x00\x00\x01", "application/x-mach-binary"),
    ("macho_fat", b"\xca\xfe\xba\xbe\x00\x00\x00\x02", "application/x-mach-binary"),
    ("shebang", b"#!/bin/sh\nrm -rf ~\n", "text/x-shellscript"),
    ("empty", b"", OCTET_STREAM),
    ("random_binary", bytes(range(256)) * 4, OCTET_STREAM),
]


@pytest.mark.parametrize(("name", "data", "expected"), SAMPLES, ids=[s[0] for s in SAMPLES])
def test_sniff_media_type(tmp_path: Path, name: str, data: bytes, expected: str) -> None:
    path = tmp_path / name
    path.write_bytes(data)
    assert sniff_media_type(path) == expected


def test_text_is_checked_to_the_end(tmp_path: Path) -> None:
    # Valid text for megabytes, then one invalid byte: not text.
    path = tmp_path / "long.txt"
    path.write_bytes(b"a" * (3 << 20) + b"\xff")
    assert sniff_media_type(path) == OCTET_STREAM
    # A multi-byte character across a read boundary is still valid UTF-8.
    chunk = media._TEXT_CHUNK_BYTES
    path.write_bytes(b"a" * (chunk - 1) + "é".encode() + b"a" * chunk)
    assert sniff_media_type(path) == "text/plain"
    # One left open at a read's end is not closed by the ASCII chunk after it.
    path.write_bytes(b"a" * (chunk - 1) + "é".encode()[:1] + b"a" * chunk)
    assert sniff_media_type(path) == OCTET_STREAM
    path.write_bytes(b"a" * (chunk - 1) + "é".encode()[:1])
    assert sniff_media_type(path) == OCTET_STREAM


def test_executables_are_listed() -> None:
    for head in (b"MZ", b"\x7fELF", b"\xfe\xed\xfa\xcf", b"#!"):
        assert sniff_bytes(head + bytes(16)) in EXECUTABLE_TYPES


@pytest.mark.parametrize(("declared", "expected"), [
    ("image/jpeg", "image/jpeg"),
    ("IMAGE/JPEG", "image/jpeg"),
    ("image/jpg", "image/jpeg"),
    ("text/plain; charset=utf-8", "text/plain"),
    (" application/PDF ", "application/pdf"),
])
def test_normalize_media_type(declared: str, expected: str) -> None:
    assert normalize_media_type(declared) == expected


@pytest.mark.parametrize(("declared", "sniffed", "ok"), [
    ("image/jpeg", "image/jpeg", True),
    ("image/jpg", "image/jpeg", True),
    ("image/png", "image/jpeg", False),
    ("text/csv", "text/plain", True),
    ("application/json", "text/plain", True),
    ("text/plain", "application/x-msdownload", False),
    ("application/zip", DOCX, True),
    (DOCX, "application/zip", False),
    ("application/pdf", "text/plain", False),
])
def test_media_type_matches(declared: str, sniffed: str, ok: bool) -> None:
    assert media_type_matches(declared, sniffed) is ok


ALLOWED = ["application/pdf", "image/jpeg", "image/png", "text/plain"]


@pytest.mark.parametrize(("declared", "data", "outcome"), [
    ("image/jpeg", b"\xff\xd8\xff\xe0rest", "image/jpeg"),
    ("image/jpg", b"\xff\xd8\xff\xe0rest", "image/jpeg"),
    ("text/plain; charset=utf-8", b"hello\n", "text/plain"),
    ("image/png", b"\xff\xd8\xff\xe0rest", "media_type_mismatch"),
    ("image/jpeg", b"MZ\x90\x00payload", "media_type_mismatch"),
    ("text/plain", b"#!/bin/sh\necho hi\n", "media_type_mismatch"),
    ("application/x-msdownload", b"MZ\x90\x00payload", "media_type_not_allowed"),
    ("image/gif", b"GIF89a....", "media_type_not_allowed"),
])
def test_check_evidence(tmp_path: Path, declared: str, data: bytes, outcome: str) -> None:
    path = tmp_path / "item"
    path.write_bytes(data)
    field = "items[2].media_type"
    if "/" in outcome:
        assert check_evidence(declared, path, ALLOWED, field) == outcome
        return
    with pytest.raises(PermanentJobError) as info:
        check_evidence(declared, path, ALLOWED, field)
    err = info.value
    assert err.code == outcome
    assert err.field == field
    assert err.status == 422 and not err.retryable
    assert isinstance(err, MediaTypeMismatch if outcome == "media_type_mismatch"
                      else MediaTypeNotAllowed)
    again = pickle.loads(pickle.dumps(err))
    assert (again.code, again.field) == (err.code, err.field)


def _check_by_chunks(pending: media.PendingText, data: bytes, chunk: int) -> str:
    """A pending text check finished as the signing worker finishes it: the file's
    chunks fed in order, the verdict given once one shows it is not text."""
    scan = media.TextScan()
    for at in range(0, len(data), chunk):
        if not scan.feed(data[at:at + chunk]):
            break
    return pending.judge(scan.finish())


DECLARED = ["text/plain", "application/json", "application/octet-stream", "image/jpeg"]


@pytest.mark.parametrize(("name", "data", "expected"), SAMPLES, ids=[s[0] for s in SAMPLES])
@pytest.mark.parametrize("declared", DECLARED)
@pytest.mark.parametrize("chunk", [1, 3, 4096])
def test_the_head_and_a_pending_text_check_judge_as_the_whole_check(
        tmp_path: Path, name: str, data: bytes, expected: str, declared: str, chunk: int) -> None:
    # check_evidence_head, with the rest finished on the file's chunks, gives what
    # check_evidence gives: the same type, or the same error on the same field.
    path = tmp_path / name
    path.write_bytes(data)
    allowed = [*ALLOWED, "application/json", "application/octet-stream"]
    field = "items[1].media_type"

    def whole() -> str:
        return check_evidence(declared, path, allowed, field)

    def split() -> str:
        pending = media.check_evidence_head(declared, path, allowed, field)
        return "settled" if pending is None else _check_by_chunks(pending, data, chunk)

    try:
        want: str | tuple[str, str, dict] = whole()
    except PermanentJobError as e:
        want = (e.code, e.message, e.detail)
    try:
        got: str | tuple[str, str, dict] = split()
    except PermanentJobError as e:
        got = (e.code, e.message, e.detail)
    if got == "settled":  # the head alone decided, and found nothing wrong
        assert isinstance(want, str) and want == expected
    else:
        assert got == want


def test_a_pending_text_check_sees_past_the_head(tmp_path: Path) -> None:
    # Text for megabytes, then a NUL: the head says nothing, the chunks do.
    data = b"Dear J. Doe,\n" * 300_000 + b"\x00" + b"tail\n"
    path = tmp_path / "note.txt"
    path.write_bytes(data)
    pending = media.check_evidence_head("text/plain", path, ALLOWED, "items[1].media_type")
    assert pending is not None
    with pytest.raises(MediaTypeMismatch) as info:
        _check_by_chunks(pending, data, 1 << 20)
    assert info.value.field == "items[1].media_type"
    assert info.value.detail == {"declared": "text/plain", "sniffed": OCTET_STREAM}
    # It crosses a process's pipe to the signing worker.
    assert pickle.loads(pickle.dumps(pending)) == pending
    # Declared binary, it is: the NUL settles that, and nothing is raised.
    pending = media.check_evidence_head("application/octet-stream", path,
                                        [*ALLOWED, "application/octet-stream"], "f")
    assert pending is not None and _check_by_chunks(pending, data, 1 << 20) == OCTET_STREAM
