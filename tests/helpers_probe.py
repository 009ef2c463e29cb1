"""Documents from a security probe of the checks: each once passed them and was signed
as received, although readers showed different things or it carried active content
that the checks did not see. Built at test time; :data:`PROBES` maps a name to
(builder, the codes it may now be refused with; "normalized" when a clean rewrite
that every reader agrees on may be signed instead)."""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable

FONT = b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>"
MZ = (b"MZ\x90\x00\x03\x00\x00\x00\x04\x00\x00\x00\xff\xff\x00\x00" + b"\x00" * 44
      + b"\x80\x00\x00\x00" + b"\x00" * 64 + b"PE\x00\x00L\x01" + b"\x00" * 200)


def content(text: bytes) -> bytes:
    return b"BT /F1 24 Tf 72 700 Td (" + text + b") Tj ET"


def stream(d: bytes, data: bytes) -> bytes:
    return b"<< " + d + b" /Length %d >>\nstream\n" % len(data) + data + b"\nendstream"


def build(objs: list[tuple[int, bytes]], root: int = 1) -> bytes:
    """Objects written in order, with a classic xref (PDF 32000-1 §7.5.4)."""
    out = bytearray(b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n")
    offs = {}
    for num, body in objs:
        offs[num] = len(out)
        out += b"%d 0 obj\n" % num + body + b"\nendobj\n"
    n = max(offs) + 1
    x = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % n
    for i in range(1, n):
        out += b"%010d 00000 n \n" % offs[i] if i in offs else b"0000000000 65535 f \n"
    out += b"trailer\n<< /Size %d /Root %d 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (n, root, x)
    return bytes(out)


def basic(text: bytes = b"HELLO", extra_catalog: bytes = b"", extra_page: bytes = b"",
          more: tuple[tuple[int, bytes], ...] = ()) -> list[tuple[int, bytes]]:
    return [(1, b"<< /Type /Catalog /Pages 2 0 R " + extra_catalog + b">>"),
            (2, b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>"),
            (3, b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] "
                b"/Resources << /Font << /F1 5 0 R >> >> /Contents 4 0 R " + extra_page + b">>"),
            (4, stream(b"", content(text))),
            (5, FONT), *more]


def objstm(header: list[tuple[int, int]], bodies: list[bytes]) -> bytes:
    """An object stream (§7.5.7) whose header lists (number, index of body) pairs."""
    data, offs = b"", []
    for b in bodies:
        offs.append(len(data))
        data += b + b"\n"
    hdr = b" ".join(b"%d %d" % (n, offs[i]) for n, i in header) + b"\n"
    return stream(b"/Type /ObjStm /N %d /First %d" % (len(header), len(hdr)), hdr + data)


def build_xs(plain: list[tuple[int, bytes]], instream: dict[int, tuple[int, int]]) -> bytes:
    """Plain objects and a cross-reference stream (§7.5.8) placing ``instream`` objects."""
    out, offs = bytearray(b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n"), {}
    for num, body in plain:
        offs[num] = len(out)
        out += b"%d 0 obj\n" % num + body + b"\nendobj\n"
    xnum = max(list(offs) + list(instream)) + 1
    offs[xnum] = len(out)
    rows = b""
    for i in range(xnum + 1):
        if i in instream:
            rows += struct.pack(">BIH", 2, *instream[i])
        elif i in offs:
            rows += struct.pack(">BIH", 1, offs[i], 0)
        else:
            rows += struct.pack(">BIH", 0, 0, 65535)
    out += b"%d 0 obj\n" % xnum + stream(
        b"/Type /XRef /Size %d /W [1 4 2] /Root 1 0 R" % (xnum + 1), rows) + b"\nendobj\n"
    out += b"startxref\n%d\n%%%%EOF\n" % offs[xnum]
    return bytes(out)


def with_embedded(data: bytes, filt: bytes = b"/Filter /FlateDecode",
                  name: bytes = b"(report.dat)", extra: bytes = b"") -> bytes:
    objs = basic(extra_catalog=b"/Names << /EmbeddedFiles << /Names [(att) 6 0 R] >> >>")
    objs += [(6, b"<< /Type /Filespec /F " + name + b" /UF " + name + b" /EF << /F 7 0 R >> >>"),
             (7, stream(b"/Type /EmbeddedFile " + filt + extra, data))]
    return build(objs)


def bad_adler(data: bytes) -> bytes:
    return zlib.compress(data)[:-4] + b"\x00\x00\x00\x00"


def png_rows(data: bytes, cols: int) -> bytes:
    return b"".join(b"\x00" + data[i:i + cols].ljust(cols, b"\x00")
                    for i in range(0, len(data), cols))


def _inner(catalog: bytes = b"/OpenAction << /S /JavaScript /JS (app.alert(1)) >>") -> bytes:
    return build(basic(b"INNER", extra_catalog=catalog))


def _dangling_kid() -> bytes:
    objs = basic(b"INNER", extra_catalog=b"/OpenAction << /S /JavaScript /JS (app.alert(2)) >>")
    objs[1] = (2, b"<< /Type /Pages /Kids [3 0 R 99 0 R] /Count 2 >>")
    return build(objs)


def _page(c: int, extra: bytes = b"") -> bytes:
    return (b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] "
            b"/Resources << /Font << /F1 5 0 R >> >> /Contents %d 0 R " % c + extra + b">>")


_PLAIN = [(1, b"<< /Type /Catalog /Pages 2 0 R >>"), (2, b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>"),
          (4, stream(b"", content(b"GOOD"))), (5, FONT), (7, stream(b"", content(b"EVIL")))]


def _objstm_twice(index: int, js: bool = False) -> bytes:
    evil = _page(7, b"/AA << /O << /S /JavaScript /JS (app.alert('pwn')) >> >>" if js else b"")
    return build_xs(_PLAIN + [(6, objstm([(3, 0), (3, 1)], [_page(4), evil]))], {3: (6, index)})


def _update(base: bytes, body: bytes) -> bytes:
    at = base.rfind(b"startxref")
    prev = int(base[at + 10:].split()[0])
    return base + body.replace(b"PREV", b"%d" % prev).replace(b"XS", b"%d" % len(base))


def _no_root_update() -> bytes:
    base = build(basic(b"GOOD"))
    upd = bytearray(base)
    offs = []
    for body in (b"9 0 obj\n<< /Type /Catalog /Pages 10 0 R "
                 b"/OpenAction << /S /JavaScript /JS (app.alert(1)) >> >>\nendobj\n",
                 b"10 0 obj\n<< /Type /Pages /Kids [11 0 R] /Count 1 >>\nendobj\n",
                 b"11 0 obj\n" + _page(12).replace(b"Parent 2", b"Parent 10") + b"\nendobj\n",
                 b"12 0 obj\n" + stream(b"", content(b"EVIL")) + b"\nendobj\n"):
        offs.append(len(upd))
        upd += body
    at = base.rfind(b"startxref")
    prev = int(base[at + 10:].split()[0])
    xs = len(upd)
    upd += b"xref\n0 1\n0000000000 65535 f \n9 4\n" + b"".join(b"%010d 00000 n \n" % o for o in offs)
    upd += b"trailer\n<< /Size 13 /Prev %d >>\nstartxref\n%d\n%%%%EOF\n" % (prev, xs)
    return bytes(upd)


def _freed_by_update() -> bytes:
    base = build(basic(b"GOOD"))
    return _update(base, b"xref\n0 1\n0000000000 65535 f \n4 1\n0000000000 00001 f \n"
                         b"trailer\n<< /Size 6 /Root 1 0 R /Prev PREV >>\nstartxref\nXS\n%%EOF\n")


def _hybrid_free() -> bytes:
    out, offs = bytearray(b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n"), {}

    def put(n: int, body: bytes) -> None:
        offs[n] = len(out)
        out.extend(b"%d 0 obj\n" % n + body + b"\nendobj\n")

    put(1, b"<< /Type /Catalog /Pages 2 0 R >>")
    put(2, b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>")
    put(3, _page(4))
    put(5, FONT)
    out.extend(b"4 0 obj\n" + stream(b"", content(b"GOOD")) + b"\nendobj\n")
    put(6, objstm([(4, 0)], [b"[8 0 R]"]))
    put(8, stream(b"", content(b"EVIL")))
    rows = b"".join(struct.pack(">BIH", 2, 6, 0) if i == 4 else
                    struct.pack(">BIH", 1, offs[i], 0) if i in offs else struct.pack(">BIH", 0, 0, 0)
                    for i in range(10))
    offs[9] = len(out)
    out.extend(b"9 0 obj\n" + stream(b"/Type /XRef /Size 10 /W [1 4 2]", rows) + b"\nendobj\n")
    xs = len(out)
    out.extend(b"xref\n0 10\n0000000000 65535 f \n")
    for i in range(1, 10):
        out.extend(b"0000000000 00001 f \n" if i == 4 else
                   b"%010d 00000 n \n" % offs[i] if i in offs else b"0000000000 65535 f \n")
    out.extend(b"trailer\n<< /Size 10 /Root 1 0 R /XRefStm %d >>\nstartxref\n%d\n%%%%EOF\n"
               % (offs[9], xs))
    return bytes(out)


def _content_posing_as_image() -> bytes:
    # 64 MiB of page content, marked /Subtype /Image /Width 1 /Height 1.
    co = zlib.compressobj(9)
    z = b"".join(co.compress(b" " * (1 << 20)) for _ in range(64)) + co.compress(
        content(b"BOMB")) + co.flush()
    objs = basic()
    objs[3] = (4, stream(b"/Filter /FlateDecode /Subtype /Image /Width 1 /Height 1", z))
    return build(objs)


def _shared_ef(data: bytes, name: bytes = b"(report.dat)") -> bytes:
    # The untyped file stream is reached first under another key (the walk takes the
    # catalog's last key first), then under /EF.
    objs = basic(extra_catalog=b"/Names << /EmbeddedFiles << /Names [(att) 6 0 R] >> >> /Zz 7 0 R")
    objs += [(6, b"<< /Type /Filespec /F " + name + b" /UF " + name + b" /EF << /F 7 0 R >> >>"),
             (7, stream(b"/Filter /FlateDecode", zlib.compress(data)))]
    return build(objs)


def _named(names: bytes) -> bytes:
    objs = basic(extra_catalog=b"/Names << /EmbeddedFiles << /Names [(att) 6 0 R] >> >>")
    objs += [(6, b"<< /Type /Filespec " + names + b" /EF << /F 7 0 R >> >>"),
             (7, stream(b"/Type /EmbeddedFile", b"plain words"))]
    return build(objs)


def _resources_null() -> bytes:
    # pypdf keeps the page's null; qpdf and poppler inherit the /Pages node's resources.
    c = b"BT /F1 24 Tf 72 700 Td (VISIBLE) Tj ET /X1 Do"
    return build([
        (1, b"<< /Type /Catalog /Pages 2 0 R >>"),
        (2, b"<< /Type /Pages /Kids [3 0 R] /Count 1 "
            b"/Resources << /Font << /F1 5 0 R >> /XObject << /X1 8 0 R >> >> >>"),
        (3, b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources null "
            b"/Contents 4 0 R >>"),
        (4, stream(b"", c)), (5, FONT),
        (8, stream(b"/Type /XObject /Subtype /Form /BBox [0 0 612 792] "
                   b"/Resources << /Font << /F1 5 0 R >> >>",
                   b"BT /F1 24 Tf 72 600 Td (PAY 1000000 EUR) Tj ET"))])


def _ap_form(text: bytes) -> bytes:
    return stream(b"/Type /XObject /Subtype /Form /BBox [0 0 300 40] "
                  b"/Resources << /Font << /F1 5 0 R >> >>", b"BT /F1 14 Tf 2 12 Td (" + text + b") Tj ET")


def _need_appearances() -> bytes:
    w = (b"<< /Type /Annot /Subtype /Widget /FT /Tx /T (amount) /V (PAY 999999 EUR) "
         b"/DA (/F1 14 Tf 0 g) /Rect [72 500 372 540] /P 3 0 R /AP << /N 9 0 R >> /F 4 >>")
    return build(basic(extra_page=b"/Annots [6 0 R]", extra_catalog=(
        b"/AcroForm << /Fields [6 0 R] /DR << /Font << /F1 5 0 R >> >> /DA (/F1 14 Tf 0 g) "
        b"/NeedAppearances true >>"), more=((6, w), (9, _ap_form(b"PAY 10 EUR")))))


def _states_without_as() -> bytes:
    a = b"<< /Type /Annot /Subtype /Square /Rect [72 500 372 540] /F 4 /AP << /N << /On 9 0 R /Off 10 0 R >> >> >>"
    return build(basic(extra_page=b"/Annots [6 0 R]", more=(
        (6, a), (9, _ap_form(b"STATE ON")), (10, _ap_form(b"STATE OFF")))))


def _contents_with_a_dictionary() -> bytes:
    objs = basic(more=((6, b"<< /Length 0 >>"),
                       (7, stream(b"", b"BT /F1 24 Tf 72 600 Td (SECOND) Tj ET"))))
    objs[2] = (3, objs[2][1].replace(b"/Contents 4 0 R", b"/Contents [4 0 R 6 0 R 7 0 R]"))
    return build(objs)


def _sound_typed_otherwise() -> bytes:
    return build(basic(extra_page=b"/Annots [6 0 R]", more=(
        (6, b"<< /Type /Foo /Subtype /Sound /Rect [0 0 50 50] >>"),)))


ACTIVE = ("active_content",)
# Probes a rewrite makes unambiguous: signed only as that rewrite, which draws the form
# from the field's value (PAY 999999 EUR), never the stale appearance (PAY 10 EUR).
DRAWN_BY_REWRITE: dict[str, tuple[bytes, bytes]] = {
    "form_needs_appearances": (b"PAY 999999 EUR", b"PAY 10 EUR"),
}
PROBES: dict[str, tuple[Callable[[], bytes], tuple[str, ...]]] = {
    "exe_bad_adler": (lambda: with_embedded(bad_adler(MZ)), ACTIVE),
    "exe_png_predictor": (lambda: with_embedded(
        zlib.compress(png_rows(MZ, 4)), extra=b" /DecodeParms << /Predictor 12 /Columns 4 >>"),
        ACTIVE),
    "exe_crypt_identity": (lambda: with_embedded(zlib.compress(MZ), filt=(
        b"/Filter [/Crypt /FlateDecode] /DecodeParms "
        b"[<< /Type /CryptFilterDecodeParms /Name /Identity >> null]")), ACTIVE),
    "exe_marked_image": (lambda: with_embedded(
        zlib.compress(MZ), extra=b" /Subtype /Image /Width 1 /Height 1"), ACTIVE),
    "pdf_js_bad_adler": (lambda: with_embedded(bad_adler(_inner()), name=b"(inner.pdf)"), ACTIVE),
    "pdf_js_png_predictor": (lambda: with_embedded(
        zlib.compress(png_rows(_inner(), 1)), name=b"(inner.pdf)",
        extra=b" /DecodeParms << /Predictor 12 /Columns 1 >>"), ACTIVE),
    "pdf_js_marked_image": (lambda: with_embedded(
        zlib.compress(_inner()), name=b"(inner.pdf)", extra=b" /Subtype /Image /Width 1 /Height 1"),
        ACTIVE),
    "pdf_js_dangling_kid": (lambda: with_embedded(zlib.compress(_dangling_kid()),
                                                  name=b"(inner.pdf)"), ACTIVE),
    "pdf_no_pages_launch": (lambda: with_embedded(zlib.compress(build(
        [(1, b"<< /Type /Catalog /OpenAction << /S /Launch /F (calc.exe) >> >>")])),
        name=b"(inner.pdf)"), ACTIVE),
    "objstm_number_twice_index1": (lambda: _objstm_twice(1), ("ambiguous_pdf",)),
    "objstm_number_twice_index0": (lambda: _objstm_twice(0), ("ambiguous_pdf",)),
    "objstm_number_twice_js": (lambda: _objstm_twice(1, js=True), ("ambiguous_pdf", "active_content")),
    "newest_trailer_without_root": (_no_root_update, ("malformed_pdf", "ambiguous_pdf")),
    "object_freed_by_update": (_freed_by_update, ("ambiguous_pdf",)),
    "hybrid_table_frees_objstm_object": (_hybrid_free, ("ambiguous_pdf",)),
    "content_posing_as_image": (_content_posing_as_image, ("limit_exceeded",)),
    # a second probe
    "exe_reached_first_under_another_key": (lambda: _shared_ef(MZ), ACTIVE),
    "pdf_js_reached_first_under_another_key": (lambda: _shared_ef(_inner(), b"(inner.pdf)"),
                                               ACTIVE),
    "file_name_cut_at_nul": (lambda: _named(b"/F (run.hta\\000.txt) /UF (run.hta\\000.txt)"),
                             ACTIVE),
    "file_name_only_in_unix": (lambda: _named(b"/Unix (run.hta)"), ACTIVE),
    "html_application_named_harmlessly": (lambda: with_embedded(
        zlib.compress(b'<html><head><hta:application id="r"/></head>'
                      b'<script>new ActiveXObject("WScript.Shell")</script></html>')),
        ACTIVE),
    # null is no entry (PDF 32000-1 §7.3.9): qpdf, poppler and MuPDF draw the inherited
    # resources, pypdf alone does not; the rewrite shows what the viewers show.
    "page_resources_null": (_resources_null, ("ambiguous_pdf", "normalized")),
    "form_needs_appearances": (_need_appearances, ("ambiguous_pdf",)),
    "appearance_states_without_as": (_states_without_as, ("ambiguous_pdf",)),
    "contents_array_with_a_dictionary": (_contents_with_a_dictionary, ("ambiguous_pdf",)),
    "sound_annotation_typed_otherwise": (_sound_typed_otherwise, ACTIVE),
}
