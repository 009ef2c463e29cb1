"""The fast object reader against pypdf's over every document of the corpora: whole
readers object for object, and the bytes at object starts and random offsets; the
fast header reader the same way, at every object header and random offsets."""

from __future__ import annotations

import io
import random
import re
from typing import Any

from pypdf import PdfReader, _reader
from pypdf.generic import _data_structures

from casesignd.pdf import parse as pdfparse
from tests.helpers_corpus import assemble, bad_corpus, good_corpus  # noqa: F401 - fixtures
from tests.unit.test_pdfparse import _outcome, assert_agree, assert_headers_agree, stack_bound

_OBJ = re.compile(rb"\d+\s+\d+\s+obj\s*")
_READER_ID = re.compile(r"(IndirectObject\(\d+, \d+), \d+\)")


def _all_objects(data: bytes, read: Any, monkeypatch: Any) -> list[tuple[Any, ...]]:
    monkeypatch.setattr(_reader, "read_object", read)
    try:
        reader = PdfReader(io.BytesIO(data), strict=False)
    except Exception as e:  # noqa: BLE001 - compared between the two readers
        return [("error", type(e), str(e))]
    ids = sorted({(i, g) for g, table in reader.xref.items() for i in table}
                 | {(i, 0) for i in reader.xref_objStm})
    out: list[tuple[Any, ...]] = [("trailer", dict(reader.trailer))]
    for idnum, gen in ids:
        out.append(_outcome(lambda _f, _p, i=idnum, g=gen: reader.get_object(
            _data_structures.IndirectObject(i, g, reader)), data, 0, None))
    return out


def _plain(value: Any) -> str:
    """A repr without the reader's identity (each side has its own reader)."""
    return _READER_ID.sub(r"\1)", repr(value))


def _agree_whole(data: bytes, monkeypatch: Any) -> None:
    ours = _all_objects(data, pdfparse.read_object, monkeypatch)
    theirs = _all_objects(data, _data_structures.read_object, monkeypatch)
    assert len(ours) == len(theirs)
    if any(map(stack_bound, ours + theirs)):
        assert any(map(stack_bound, ours)) and any(map(stack_bound, theirs))
        return
    for a, b in zip(ours, theirs, strict=True):
        assert a[0] == b[0]
        if a[0] == "error":
            assert a[1:] == b[1:]
        else:
            assert _plain(a[1:]) == _plain(b[1:])


def _agree_offsets(data: bytes, rng: random.Random) -> None:
    try:
        pdf = PdfReader(io.BytesIO(data), strict=False)
    except Exception:  # noqa: BLE001 - a file pypdf cannot open: its bytes still parse
        pdf = PdfReader(io.BytesIO(assemble([b"<< /Type /Catalog >>"])), strict=False)
    starts = [m.end() for m in _OBJ.finditer(data)][:3000]
    for pos in starts + [rng.randrange(len(data)) for _ in range(500 if data else 0)]:
        assert_agree(data, pos, pdf)
    headers = pdfparse.reader(io.BytesIO(assemble([b"<< /Type /Catalog >>"])))
    heads = [m.start() for m in _OBJ.finditer(data)][:3000]
    for pos in heads + [rng.randrange(len(data)) for _ in range(200 if data else 0)]:
        assert_headers_agree(data, pos, headers)


def test_every_corpus_document_reads_alike(good_corpus, bad_corpus, monkeypatch):  # noqa: F811
    rng = random.Random(7)
    paths = list(good_corpus.values()) + [p for p, _code in bad_corpus.values()]
    assert len(paths) >= 10
    for path in paths:
        data = path.read_bytes()
        if len(data) > 20 << 20:
            continue
        _agree_whole(data, monkeypatch)
        _agree_offsets(data, rng)
