"""The fast object reader builds exactly what pypdf's own reader builds.

Both readers run from the same position of the same bytes; they must agree on the
object (classes, values, stream data, attribute for attribute), on where the stream is
left, on the exception when there is one, and on pypdf's warnings."""

from __future__ import annotations

import io
import logging
import random
from pathlib import Path
from typing import Any

import pytest
from pypdf import PdfReader
from pypdf.generic import _data_structures

from casesignd.pdf import parse as pdfparse
from tests.helpers_corpus import _one_page, assemble, stream
from tests.helpers_pki import reportlab_pdf


class _Warnings(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.records: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record.getMessage())


def _same(a: Any, b: Any) -> bool:
    """Deep equality of two parsed objects, class for class (iterative: nesting bombs
    are among the inputs)."""
    todo = [(a, b)]
    while todo:
        x, y = todo.pop()
        if type(x) is not type(y):
            return False
        if isinstance(x, dict):  # raw entries: indexing would resolve references
            ex, ey = list(dict.items(x)), list(dict.items(y))
            if len(ex) != len(ey) or getattr(x, "_data", None) != getattr(y, "_data", None):
                return False
            for (kx, vx), (ky, vy) in zip(ex, ey, strict=True):
                if kx != ky:
                    return False
                todo.append((vx, vy))
        elif isinstance(x, list):
            ex, ey = list(list.__iter__(x)), list(list.__iter__(y))
            if len(ex) != len(ey):
                return False
            todo.extend(zip(ex, ey, strict=True))
        elif hasattr(x, "idnum"):
            if (x.idnum, x.generation, x.pdf) != (y.idnum, y.generation, y.pdf):
                return False
        elif not (x == y and repr(x) == repr(y)
                  and getattr(x, "__dict__", None) == getattr(y, "__dict__", None)):
            return False
    return True


def _outcome(read: Any, data: bytes, pos: int, pdf: Any) -> tuple[Any, ...]:
    f = io.BytesIO(data)
    f.seek(pos)
    handler = _Warnings()
    log = logging.getLogger("pypdf")
    log.addHandler(handler)
    try:
        return ("ok", read(f, pdf), f.tell(), handler.records)
    except RecursionError:  # its message depends on where the stack ran out
        return ("error", RecursionError, "", handler.records)
    except Exception as e:  # noqa: BLE001 - compared between the two readers
        return ("error", type(e), str(e), handler.records)
    finally:
        log.removeHandler(handler)


def stack_bound(outcome: tuple[Any, ...]) -> bool:
    """pypdf ran out of stack (a nesting bomb): where it stopped, and so what it
    returns, depends on how deep its caller's stack already was."""
    return outcome[1] is RecursionError or any("Error reading PDF file" in w for w in outcome[-1])


def assert_agree(data: bytes, pos: int, pdf: Any) -> bool:
    """Both readers at ``pos``; True when the fast reader read the object itself."""
    ours = _outcome(pdfparse.read_object, data, pos, pdf)
    theirs = _outcome(_data_structures.read_object, data, pos, pdf)
    if stack_bound(ours) or stack_bound(theirs):
        assert stack_bound(ours) and stack_bound(theirs)
        return False
    assert ours[0] == theirs[0], (pos, data[pos:pos + 80], ours, theirs)
    if ours[0] == "ok":
        assert _same(ours[1], theirs[1]), (pos, data[pos:pos + 80], ours[1], theirs[1])
        assert ours[2:] == theirs[2:], (pos, data[pos:pos + 80])
    else:
        assert ours[1:] == theirs[1:], (pos, data[pos:pos + 80])
    return ours[0] == "ok"


def check_document(data: bytes, positions: list[int] | None = None) -> int:
    """Every offset (or those given) of a document; how many both read."""
    pdf = PdfReader(io.BytesIO(data), strict=False)
    return sum(assert_agree(data, pos, pdf) for pos in (positions or range(len(data))))


@pytest.fixture(scope="module")
def documents(tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    tmp = tmp_path_factory.mktemp("pdfparse")
    docs = {"reportlab": reportlab_pdf(tmp / "r.pdf").read_bytes()}
    page = _one_page(catalog_extra=b"/OpenAction << /S /JavaScript /JS (app.alert\\(1\\)) >>",
                     page_extra=b"/Annots [<< /Type /Annot /Subtype /Link /Rect [0 0 1.5 -.5] "
                                b"/A << /S /URI /URI <68747470 3a2f2f6578616d706c652f> >> >>]")
    docs["hand-built"] = page
    docs["odd-tokens"] = assemble([
        b"<< /Type /Catalog /Pages 2 0 R /A#20B 1 /Odd (a\\)b) /N null /T true /F false "
        b"/Deep [[[[1]]]] /Hex <4 1 4> /Sp  [ 1  2\t3\x0b4 ] % comment\n /Z 1.5.5 >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R >>",
        stream(b"BT /F1 12 Tf (x) Tj ET"),
        b"<< /Length 5 >>\nstream\r\nabcdeendstream",
        b"<< /Length 99 >>\nstream\nshort\nendstream",
        b"<< /Length 3 0 R >> stream\nabc\nendstream",
        b"<< /K /V /K /W >>",
        b"[" + b"1 " * 3000 + b"]",
        b"(" + b"x" * 5000 + b")",
    ])
    return docs


def test_whole_documents_read_alike_from_every_offset(documents):
    for name, data in documents.items():
        assert check_document(data) > 0, name


def test_mutated_objects_read_alike(documents):
    rng = random.Random(20261129)
    alphabet = b"()<>[]{}/%#\\ \r\n\t\x00\x0b\x0c0123456789+-.Rstreamndobjnulltruefalse"
    pieces = [documents["odd-tokens"], documents["hand-built"], documents["reportlab"]]
    agreed = 0
    for _ in range(3000):
        data = bytearray(rng.choice(pieces))
        start = rng.randrange(len(data))
        for _ in range(rng.randint(1, 6)):
            if start >= len(data):
                break
            at = rng.randrange(start, min(len(data), start + 200))
            op = rng.random()
            if op < 0.4:
                data[at] = rng.choice(alphabet)
            elif op < 0.7:
                data.insert(at, rng.choice(alphabet))
            else:
                del data[at]
        pdf = PdfReader(io.BytesIO(bytes(documents["hand-built"])), strict=False)
        agreed += assert_agree(bytes(data), start, pdf)
    assert agreed > 300  # the mutations left enough objects to read


def test_objects_larger_than_the_window_are_read_whole():
    big = b"<< /W [" + b" ".join(b"%d" % i for i in range(5000)) + b"] /S (" + b"y" * 9000 + b") >>"
    data = b"1 0 obj\n" + big + b"\nendobj\n"
    pdf = PdfReader(io.BytesIO(assemble([b"<< /Type /Catalog >>"])), strict=False)
    assert assert_agree(data, data.index(b"<<"), pdf)


def test_install_makes_pypdf_read_with_it(tmp_path: Path, monkeypatch):
    from pypdf import _reader

    monkeypatch.setattr(_reader, "read_object", _reader.read_object)
    calls: list[int] = []
    real = pdfparse.read_object

    def counted(*args: Any, **kw: Any) -> Any:
        calls.append(1)
        return real(*args, **kw)

    monkeypatch.setattr(pdfparse, "read_object", counted)
    pdfparse.install()
    reader = PdfReader(io.BytesIO(reportlab_pdf(tmp_path / "r.pdf").read_bytes()))
    assert len(reader.pages) == 1 and calls


# --- object headers -------------------------------------------------------------------


def _header(read: Any, data: bytes, pos: int) -> tuple[Any, ...]:
    """``read(stream)`` at ``pos``: what it gave or raised, where it left the stream,
    and pypdf's warnings."""
    return _outcome(lambda f, _pdf: read(f), data, pos, None)


def assert_headers_agree(data: bytes, pos: int, reader: Any) -> bool:
    """The fast header reader and pypdf's (both of the non-strict ``reader``, one of
    :func:`pdfparse.reader`) at ``pos``; True when the fast one read the header
    itself."""
    ours = _header(reader.read_object_header, data, pos)
    theirs = _header(lambda f: PdfReader.read_object_header(reader, f), data, pos)
    assert ours == theirs, (pos, data[pos:pos + 40], ours, theirs)
    f = io.BytesIO(data)
    f.seek(pos)
    return pdfparse.read_object_header(f) is not None


HEADERS = [
    b"12 0 obj<< >>", b"12 0 obj\n<< >>", b"12  0 obj [1]", b"12\n0\nobj\n\n(x)",
    b"12\r\n0\r\nobj\r\n1", b"1 0 obj", b"1 0 obj \n", b"12\x0b0 obj 1", b"+12 0 obj 1",
    b"12 0 objx", b"12 0 ob", b"12 -0 obj 1", b"%c\n12 0 obj 1", b" 12 0 obj 1",
    b"\n\n12 0 obj 1", b"12 0 R", b"1.5 0 obj 1", b"0012 0000 obj 1", b"12 0 obj%c\n1",
    b"9" * 64 + b" 0 obj 1", b"9" * 65 + b" 0 obj 1", b"12 " + b"0" * 64 + b" obj 1",
    b"12 0 obj" + b" " * 300 + b"1", b"12\x000\x00obj\x00\x001", b"12\x0c0\tobj\x0c1",
    b"", b"12", b"12 0", b"abc 0 obj 1",
]


def test_object_headers_read_alike(documents):
    reader = pdfparse.reader(io.BytesIO(documents["hand-built"]))
    fast = sum(assert_headers_agree(h, 0, reader) for h in HEADERS)
    assert fast >= 10
    for data in documents.values():
        assert sum(assert_headers_agree(data, pos, reader) for pos in range(len(data))) > 0


def test_mutated_object_headers_read_alike(documents):
    rng = random.Random(20261202)
    reader = pdfparse.reader(io.BytesIO(documents["hand-built"]))
    alphabet = b" \r\n\t\x00\x0b\x0c0123456789+-.%objR<"
    fast = 0
    for _ in range(5000):
        data = bytearray(rng.choice(HEADERS[:6]))
        for _ in range(rng.randint(1, 4)):
            at = rng.randrange(len(data) + 1)
            op = rng.random()
            if op < 0.4 and at < len(data):
                data[at] = rng.choice(alphabet)
            elif op < 0.8:
                data.insert(at, rng.choice(alphabet))
            elif at < len(data):
                del data[at]
        fast += assert_headers_agree(bytes(data), 0, reader)
    assert fast > 500


def test_the_checker_reads_headers_with_it(documents):
    from casesignd.pdf.inspect import PdfLimits, inspect_document

    _report, reader = inspect_document(documents["reportlab"], PdfLimits())
    assert type(reader) is pdfparse._Reader
