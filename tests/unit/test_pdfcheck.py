"""inspect_pdf's decisions, on small hand-made PDFs and as pure functions."""

from __future__ import annotations

import binascii
import pickle
import zlib
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from casesignd.core.errors import CasesignError, LimitExceeded, MalformedPdf
from casesignd.core.policy import Policy
from casesignd.job_kinds.signing import pdf_limits
from casesignd.pdf import rules as pdfrules
from casesignd.pdf.frame import (
    AMBIGUITY,
    DAMAGE,
    Source,
    classify_xref,
    definition_findings,
    object_definitions,
    read_frame,
)
from casesignd.pdf.inspect import (
    PdfLimits,
    PdfReport,
    image_bytes,
    inspect_document,
    inspect_pdf,
    measure_decoded,
)
from tests.helpers_corpus import _one_page, assemble, stream

# --- the outer frame ---------------------------------------------------------------

GOOD = _one_page()


def _reasons(frame) -> list[tuple[str, str]]:
    return [(f.kind, f.reason) for f in frame.findings]


def test_read_frame_of_a_good_file() -> None:
    frame = read_frame(GOOD)
    assert frame.version == "1.7" and frame.findings == ()
    assert GOOD[frame.startxref:].startswith(b"xref")


def test_read_frame_without_a_header_is_not_a_pdf() -> None:
    for data in (b"%!PS-Adobe-3.0\nstartxref\n10\n%%EOF\n", b"x" * 1100 + b"%PDF-1.4"):
        with pytest.raises(MalformedPdf, match="no %PDF- header"):
            read_frame(data)


@pytest.mark.parametrize(("data", "kind", "message"), [
    (GOOD.replace(b"%%EOF", b""), DAMAGE, "no %%EOF"),
    (GOOD.replace(b"startxref", b"startxrex"), DAMAGE, "no startxref"),
    (GOOD[:GOOD.rindex(b"startxref")] + b"startxref\n99999\n%%EOF\n", DAMAGE, "outside the file"),
    (GOOD[:GOOD.rindex(b"startxref")] + b"startxref\n17\n%%EOF\n", DAMAGE, "does not point"),
    (b"<html><body>hi</body></html>\n" + GOOD, AMBIGUITY, "before the %PDF- header"),
    (GOOD + b"PK\x05\x06" + bytes(18), AMBIGUITY, "after the last %%EOF"),
    (GOOD + b"x" * 5000, AMBIGUITY, "after the last %%EOF"),
])
def test_read_frame_findings(data: bytes, kind: str, message: str) -> None:
    found = _reasons(read_frame(data))
    assert any(k == kind and message in r for k, r in found), found


def test_read_frame_allows_padding_after_eof_and_takes_the_last_startxref() -> None:
    assert read_frame(GOOD + b"\r\n\x00\x00 \n").findings == ()
    tail = b"startxref\n10\n%%EOF\n...update...\nstartxref\n90\n%%EOF\r\n"
    data = b"%PDF-1.6\n" + b" " * 81 + b"xref\n0 1\n" + b" " * 20 + tail
    frame = read_frame(data)
    assert (frame.version, frame.startxref) == ("1.6", 90)


@pytest.mark.parametrize(("at", "remaining", "kind"), [
    (b"xref\n0 6\n0000000000 65535 f\r\n", 1000, "table"),
    (b"\r\nxref\n0 1\n", 100, "table"),
    (b"12 0 obj\n<< /Type /XRef", 1000, "stream"),
    (b"\n12 0 obj<</Type/XRef", 1000, "stream"),
    (b"Xref\n0 6\n", 1000, None),
    (b"endobj\nxref", 1000, None),
    (b"xref\n0 9000000\n", 300, "claims_too_many"),
])
def test_classify_xref(at: bytes, remaining: int, kind: str | None) -> None:
    assert classify_xref(at, remaining) == kind


def test_definition_findings() -> None:
    # Object 3 is defined twice; the xref names the first definition.
    data = b"%PDF-1.7\n1 0 obj\n<<>>\nendobj\n3 0 obj\n(a)\nendobj\n3 0 obj\n(b)\nendobj\n"
    src = Source(data)
    defs = object_definitions(src)
    first, second = (off for off, _ in defs[3])
    assert definition_findings(src, defs, {0: {3: second}}, {}, {(3, 0)}) == []
    later = definition_findings(src, defs, {0: {3: first}}, {}, {(3, 0)})
    assert [f.kind for f in later] == [AMBIGUITY] and "defined again" in later[0].reason
    other = definition_findings(src, defs, {0: {3: defs[1][0][0]}}, {}, {(3, 0)})
    assert "points at object 1" in other[0].reason
    nowhere = definition_findings(src, defs, {0: {3: 2}}, {}, {(3, 0)})
    assert nowhere[0].kind == DAMAGE


def test_a_file_is_scanned_in_windows_with_the_same_result(tmp_path: Path, monkeypatch) -> None:
    # Headers straddle every window boundary; the file's scans equal the bytes' scans.
    from casesignd.pdf import frame as pdfframe

    body = b"".join(b"%d 0 obj\n<< /N %d >>\nendobj\n" % (i, i) for i in range(1, 400))
    data = b"%PDF-1.7\n" + body + b"startxref\n9\n%%EOF\n"
    path = tmp_path / "w.pdf"
    path.write_bytes(data)
    monkeypatch.setattr(pdfframe, "SCAN_WINDOW_BYTES", 37)
    with open(path, "rb") as f:
        on_disk = Source(fd=f.fileno(), size=len(data))
        assert object_definitions(on_disk) == object_definitions(Source(data))
        assert len(object_definitions(on_disk)) == 399
        assert on_disk.rfind(b"%%EOF") == data.rfind(b"%%EOF")
        assert read_frame(on_disk) == read_frame(data)


# --- the active-content rules --------------------------------------------------------

ALLOWED = pdfrules.DEFAULT_ALLOWED_ACTIONS
AUTO, CLICK = pdfrules.AUTOMATIC, pdfrules.CLICK


@pytest.mark.parametrize(("d", "trigger", "word"), [
    ({"/S": "/JavaScript", "/JS": "app.alert(1)"}, CLICK, "javascript"),
    ({"/S": "/Launch", "/F": "cmd.exe"}, CLICK, "forbidden_action"),
    ({"/S": "/ImportData", "/F": "data.fdf"}, CLICK, "forbidden_action"),
    ({"/S": "/RichMediaExecute"}, CLICK, "forbidden_action"),
    ({"/S": "/ResetForm"}, CLICK, "forbidden_action"),
    ({"/S": "/GoToR", "/F": "\\\\evil\\share\\x.pdf"}, CLICK, "forbidden_action"),
    ({"/S": "/Hide", "/T": "x"}, CLICK, "forbidden_action"),
    ({"/S": "/SetOCGState"}, CLICK, "forbidden_action"),
    ({"/S": "/Rendition"}, CLICK, "forbidden_action"),
    ({"/S": "/Frobnicate"}, CLICK, "forbidden_action"),
    ({"/S": "/Named", "/N": "/Print"}, AUTO, "forbidden_action"),
    ({"/S": "/Named", "/N": "/Print"}, CLICK, None),
    ({"/S": "/Named", "/N": "/GoBack"}, CLICK, None),
    ({"/S": "/Named", "/N": "/SaveAs"}, CLICK, "forbidden_action"),
    ({"/S": "/Named", "/N": "/Quit"}, CLICK, "forbidden_action"),
    ({"/S": "/Named", "/N": "/NextPage"}, AUTO, None),
    ({"/S": "/GoTo", "/D": []}, AUTO, None),
    # a click may leave the document for the allowed schemes
    ({"/S": "/URI", "/URI": "https://example.org/a?b=c"}, CLICK, None),
    ({"/S": "/URI", "/URI": "http://example.org"}, CLICK, None),
    ({"/S": "/URI", "/URI": "mailto:someone@example.org"}, CLICK, None),
    ({"/S": "/URI", "/URI": b"https://example.org\x00javascript:x"}, CLICK, None),
    ({"/S": "/URI", "/URI": " https://example.org\n"}, CLICK, None),
    ({"/S": "/SubmitForm", "/F": "https://example.org/form"}, CLICK, None),
    ({"/S": "/SubmitForm", "/F": {"/FS": "/URL", "/F": "https://example.org/f"}}, CLICK, None),
    ({"/S": "/GoToE", "/T": {"/R": "/C", "/N": "a.pdf"}}, CLICK, None),
    # ... and nowhere else
    ({"/S": "/URI", "/URI": "file:///etc/passwd"}, CLICK, "link_scheme"),
    ({"/S": "/URI", "/URI": "FILE://host/share"}, CLICK, "link_scheme"),
    ({"/S": "/URI", "/URI": "\\\\evil\\share"}, CLICK, "link_scheme"),
    ({"/S": "/URI", "/URI": "smb://evil/share"}, CLICK, "link_scheme"),
    ({"/S": "/URI", "/URI": "javascript:alert(1)"}, CLICK, "link_scheme"),
    ({"/S": "/URI", "/URI": " JavaScript:alert(1)"}, CLICK, "link_scheme"),
    ({"/S": "/URI", "/URI": "data:text/html,<script>"}, CLICK, "link_scheme"),
    ({"/S": "/URI", "/URI": "www.example.org"}, CLICK, "link_scheme"),
    ({"/S": "/URI", "/URI": "http:\\\\evil\\x"}, CLICK, "link_scheme"),
    ({"/S": "/URI", "/URI": "http:///nohost"}, CLICK, "link_scheme"),
    ({"/S": "/URI", "/URI": "https://exa mple.org"}, CLICK, "link_scheme"),
    ({"/S": "/URI"}, CLICK, "link_scheme"),
    ({"/S": "/URI", "/URI": 12}, CLICK, "link_scheme"),
    ({"/S": "/SubmitForm", "/F": "\\\\evil\\share\\in"}, CLICK, "link_scheme"),
    ({"/S": "/GoToE", "/F": "other.pdf", "/T": {"/R": "/C"}}, CLICK, "link_scheme"),
    # what runs by itself stays in the document
    ({"/S": "/URI", "/URI": "https://example.org"}, AUTO, "automatic_action"),
    ({"/S": "/SubmitForm", "/F": "https://example.org"}, AUTO, "automatic_action"),
    ({"/S": "/GoToE", "/T": {"/R": "/C", "/N": "a.pdf"}}, AUTO, "automatic_action"),
])
def test_action_rule(d: dict, trigger: str, word: str | None) -> None:
    rule = pdfrules.action_rule(d, ALLOWED, trigger)
    assert (rule[0] if rule else None) == word, rule
    if rule:
        assert "example.org" not in rule[1] and "evil" not in rule[1], "a target in words"


def test_the_policy_chooses_the_link_schemes() -> None:
    https = {"/S": "/URI", "/URI": "https://example.org"}
    assert pdfrules.action_rule(https, ALLOWED, CLICK, frozenset())[0] == "link_scheme"
    assert pdfrules.action_rule(https, ALLOWED, CLICK, frozenset({"https"})) is None
    ftp = {"/S": "/URI", "/URI": "ftp://example.org/x"}
    assert pdfrules.action_rule(ftp, ALLOWED, CLICK)[0] == "link_scheme"
    assert pdfrules.action_rule(ftp, ALLOWED, CLICK, frozenset({"ftp"})) is None


def test_a_policy_may_allow_links_but_never_scripts() -> None:
    allowed = ALLOWED | {"/URI", "/JavaScript", "/Launch"}
    assert pdfrules.action_rule({"/S": "/URI", "/URI": "https://example.org"}, allowed) is None
    assert pdfrules.action_rule({"/S": "/URI", "/URI": "file:///x"}, allowed)[0] == "link_scheme"
    assert pdfrules.action_rule({"/S": "/JavaScript"}, allowed)[0] == "javascript"
    assert pdfrules.action_rule({"/S": "/Launch"}, allowed)[0] == "forbidden_action"


@pytest.mark.parametrize(("d", "slot", "action"), [
    ({"/S": "/URI"}, False, True),
    ({"/S": "/Frobnicate"}, True, True),
    ({"/S": "/Frobnicate"}, False, False),
    ({"/Type": "/Action", "/S": "/Frobnicate"}, False, True),
    ({"/Type": "/StructElem", "/S": "/P"}, False, False),
    ({"/Type": "/Group", "/S": "/Transparency"}, False, False),
    ({"/D": []}, True, False),
])
def test_is_action(d: dict, slot: bool, action: bool) -> None:
    assert pdfrules.is_action(d, slot) is action


@pytest.mark.parametrize(("d", "hit"), [
    ({"/JS": "app.alert(1)"}, "JavaScript"),
    ({"/JavaScript": True}, "name tree"),
    ({"/OnInstantiate": True}, "3D"),
    ({"/Subtype": "/RichMedia"}, "RichMedia"),
    ({"/Subtype": "/3D"}, "3D"),
    ({"/Subtype": "/Link"}, None),
    ({"/XFA": True}, "XFA"),
    ({"/Type": "/Filespec", "/F": "tool.EXE", "/EF": True}, "tool.EXE"),
    ({"/Type": "/Filespec", "/UF": "run.ps1", "/F": "x", "/EF": True}, "run.ps1"),
    ({"/Type": "/Filespec", "/F": "photo.jpg", "/EF": True}, None),
    ({"/Type": "/Filespec", "/F": "setup.exe"}, None),  # a reference, not embedded
])
def test_dict_rule(d: dict, hit: str | None) -> None:
    rule = pdfrules.dict_rule(d)
    if hit is None:
        assert rule is None
    else:
        assert rule is not None and hit in rule[1]


@pytest.mark.parametrize(("name", "risky"), [
    ("x.exe", True), ("x.exe.", True), ("x.exe ", True), ("x.exe. . ", True),
    ("REPORT.DOCM", True), ("disk.ISO", True), ("app.HTA", True), ("run.js", True),
    ("page.html", False), ("page.HTM", False), ("notes.txt", False), ("logo.svg", False),
    ("scan.png", False), ("data.csv", False), ("x.lnk", True), ("x.url", True),
    ("x.appref-ms", True), ("x.SettingContent-ms", True), ("x.vhdx", True), ("x.msu", True),
    ("a/b\\c.scr", True), ("notes.txt:evil.exe", False), ("notes.exe:x", True),
    ("photo.jpg", False), ("contract.pdf", False), ("README", False), ("exe", False),
])
def test_risky_file_name(name: str, risky: bool) -> None:
    assert pdfrules.risky_file_name(name) is risky


def test_risky_content() -> None:
    import io
    import zipfile

    assert "executable" in pdfrules.risky_content(b"MZ\x90\x00")
    assert "executable" in pdfrules.risky_content(b"\x7fELF\x02")
    iso = bytes(0x8001) + b"CD001" + bytes(10)
    assert "disk image" in pdfrules.risky_content(iso)
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("word/document.xml", "x")
        z.writestr("word/vbaProject.bin", "x")
    assert "macros" in pdfrules.risky_content(buf.getvalue()[:64], buf.getvalue())
    ole = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + bytes(100) + "_VBA_PROJECT".encode("utf-16-le")
    assert "macros" in pdfrules.risky_content(ole[:64], ole)
    assert pdfrules.risky_content(b"\x89PNG\r\n\x1a\n") is None
    # a page is a document; an HTML application runs with the user's rights
    assert pdfrules.risky_content(b"<!doctype html><html><script>x()</script>") is None
    assert pdfrules.risky_content(b"<svg xmlns='http://www.w3.org/2000/svg'/>") is None
    hta = b"<html><head><title>t</title><HTA:APPLICATION ID='x'></head></html>"
    assert "HTML application" in pdfrules.risky_content(hta)


@pytest.mark.parametrize(("d", "size"), [
    ({"/Width": 100, "/Height": 10, "/BitsPerComponent": 8, "/ColorSpace": "/DeviceRGB"},
     3000),
    ({"/Width": 100, "/Height": 10, "/BitsPerComponent": 1, "/ImageMask": True}, 125),
    ({"/Width": 8, "/Height": 1, "/ColorSpace": ["/ICCBased", None]}, 32),
    ({"/Width": 8, "/Height": 1, "/ColorSpace": "/DeviceGray"}, 8),
    ({"/Height": 1}, None),
    ({"/Width": "x", "/Height": 1}, None),
])
def test_image_bytes(d: dict, size: int | None) -> None:
    assert image_bytes(d) == size


# --- bounded decoding ------------------------------------------------------------------


def _deflate_zeros(n: int) -> bytes:
    c = zlib.compressobj(9)
    return b"".join(c.compress(bytes(1 << 20)) for _ in range(n >> 20)) + c.flush()


def test_measure_decoded_counts_and_keeps_the_head() -> None:
    data = b"%PDF-embedded" + b"x" * 100_000
    size, head = measure_decoded(zlib.compress(data), ["/FlateDecode"], 1 << 20)
    assert size == len(data) and head == data[:4096]


@pytest.mark.parametrize("filters", [["/FlateDecode"], ["/Fl"]])
def test_measure_decoded_stops_a_bomb(filters: list[str]) -> None:
    with pytest.raises(LimitExceeded) as info:
        measure_decoded(_deflate_zeros(64 << 20), filters, 1 << 20)
    # It stopped soon after the budget, not after inflating everything.
    assert info.value.detail["decoded_at_least"] < (1 << 20) + (1 << 17)


def test_measure_decoded_chains() -> None:
    inner = _deflate_zeros(8 << 20)
    twice = zlib.compress(inner)
    assert measure_decoded(twice, ["/FlateDecode", "/FlateDecode"], 16 << 20)[0] == 8 << 20
    with pytest.raises(LimitExceeded):
        measure_decoded(twice, ["/FlateDecode", "/FlateDecode"], 4 << 20)
    hexed = binascii.hexlify(zlib.compress(b"hello" * 1000)) + b">"
    assert measure_decoded(hexed, ["/AHx", "/Fl"], 1 << 20)[0] == 5000


def test_measure_decoded_bounds_run_length() -> None:
    # RunLength (§7.4.5): byte 129 repeats the next byte 128 times; 2 bytes -> 128.
    data = b"\x81\x00" * 10_000 + b"\x80"
    assert measure_decoded(data, ["/RunLengthDecode"], 2 << 20)[0] == 1_280_000
    with pytest.raises(LimitExceeded):
        measure_decoded(data, ["/RunLengthDecode"], 1 << 20)


def test_measure_decoded_ends_at_image_codecs() -> None:
    # The codec's input is counted (a Flate layer before it may still be a bomb); its
    # output is judged by image_bytes from the image dictionary.
    jpeg = b"\xff\xd8\xff" + bytes(100)
    assert measure_decoded(jpeg, ["/DCTDecode"], 1000)[0] == 103
    assert measure_decoded(zlib.compress(jpeg), ["/FlateDecode", "/DCTDecode"], 1000)[0] == 103
    with pytest.raises(LimitExceeded):
        measure_decoded(_deflate_zeros(4 << 20), ["/FlateDecode", "/DCTDecode"], 1 << 20)


# --- inspect_pdf on crafted files -----------------------------------------------------


def _check(tmp_path: Path, data: bytes, limits: PdfLimits | None = None) -> PdfReport:
    path = tmp_path / "doc.pdf"
    path.write_bytes(data)
    return inspect_pdf(path, limits or PdfLimits())


def _code(tmp_path: Path, data: bytes, limits: PdfLimits | None = None) -> str:
    with pytest.raises(CasesignError) as info:
        _check(tmp_path, data, limits)
    return info.value.code


def test_a_plain_page_passes(tmp_path: Path) -> None:
    report = _check(tmp_path, GOOD)
    assert (report.pages, report.pdf_version, report.has_signatures) == (1, "1.7", False)
    assert report.size == len(GOOD) and report.objects == 5
    assert pickle.loads(pickle.dumps(report)) == report


def _refusal(tmp_path: Path, data: bytes, limits: PdfLimits | None = None) -> CasesignError:
    with pytest.raises(CasesignError) as info:
        _check(tmp_path, data, limits)
    return info.value


def test_a_click_may_leave_the_document_what_runs_by_itself_may_not(tmp_path: Path) -> None:
    submit = b"<< /S /SubmitForm /F << /FS /URL /F (https://example.org/) >> >>"
    link = b"<< /Type /Annot /Subtype /Link /Rect [0 0 10 10] /A 6 0 R >>"
    as_link = _one_page(page_extra=b"/Annots [7 0 R] ", more=[submit, link])
    assert _check(tmp_path, as_link).external_links == 1
    # The policy chooses the schemes: none keeps every click in the document.
    e = _refusal(tmp_path, as_link, PdfLimits(link_schemes=frozenset()))
    assert (e.code, e.reason, e.where) == ("active_content", "link_scheme", {"object": 6})
    # The same action run when the document opens, or by a page's /AA, is refused.
    opening = _one_page(catalog_extra=b"/OpenAction 6 0 R ", more=[submit])
    e = _refusal(tmp_path, opening)
    assert (e.code, e.reason, e.where) == ("active_content", "automatic_action", {"object": 6})
    on_page = _one_page(page_extra=b"/AA << /O 6 0 R >> ", more=[submit])
    assert _refusal(tmp_path, on_page).reason == "automatic_action"
    # A link's /AA (mouse-over) runs without a click too.
    hover = _one_page(page_extra=b"/Annots [7 0 R] ", more=[
        submit, b"<< /Type /Annot /Subtype /Link /Rect [0 0 10 10] /AA << /E 6 0 R >> >>"])
    assert _refusal(tmp_path, hover).reason == "automatic_action"
    # A chained (/Next) action is checked like the first one, with its trigger.
    chained = _one_page(catalog_extra=b"/OpenAction 6 0 R ", more=[
        b"<< /S /GoTo /D [3 0 R /Fit] /Next 7 0 R >>",
        b"<< /S /URI /URI (https://example.org) >>"])
    assert _refusal(tmp_path, chained).reason == "automatic_action"
    clicked = _one_page(page_extra=b"/Annots [8 0 R] ", more=[
        b"<< /S /GoTo /D [3 0 R /Fit] /Next 7 0 R >>",
        b"<< /S /URI /URI (file:///etc/passwd) >>",
        b"<< /Type /Annot /Subtype /Link /Rect [0 0 10 10] /A 6 0 R >>"])
    e = _refusal(tmp_path, clicked)
    assert (e.reason, e.where) == ("link_scheme", {"object": 7})
    assert "passwd" not in e.message
    # A destination array is no action: the page it names is not judged as one.
    goto = _one_page(catalog_extra=b"/OpenAction [3 0 R /Fit] ")
    assert _check(tmp_path, goto).pages == 1


def test_a_form_buttons_target_is_checked_and_named_by_its_field(tmp_path: Path) -> None:
    button = (b"<< /Type /Annot /Subtype /Widget /FT /Btn /Ff 65536 /T (Send) "
              b"/Rect [0 0 10 10] /A << /S /SubmitForm /F (\\\\\\\\evil\\\\in) >> >>")
    data = _one_page(catalog_extra=b"/AcroForm << /Fields [6 0 R] >> ",
                     page_extra=b"/Annots [6 0 R] ", more=[button])
    e = _refusal(tmp_path, data)
    assert (e.code, e.reason, e.where) == ("active_content", "link_scheme",
                                           {"object": 6, "field": "Send"})


def test_a_certified_document_is_refused_for_that_first(tmp_path: Path) -> None:
    # Certified against any change (DocMDP P=1) and holding a link that would be
    # refused: what is said is the certification, before any content check.
    data = _one_page(catalog_extra=b"/Perms << /DocMDP 6 0 R >> /OpenAction 7 0 R ", more=[
        b"<< /Type /Sig /Reference [<< /TransformMethod /DocMDP "
        b"/TransformParams << /P 1 /V /1.2 >> >>] >>",
        b"<< /S /URI /URI (https://example.org) >>"])
    e = _refusal(tmp_path, data)
    assert (e.code, e.reason) == ("certified_no_changes", "certified_no_changes")
    # Checked for its own sake (nothing is to be added), it is judged on its content.
    e = _refusal(tmp_path, data, PdfLimits(refuse_certified=False))
    assert e.reason == "automatic_action"


def test_javascript_name_tree(tmp_path: Path) -> None:
    data = _one_page(catalog_extra=b"/Names << /JavaScript 6 0 R >> ", more=[
        b"<< /Names [(init) 7 0 R] >>",
        b"<< /S /JavaScript /JS 8 0 R >>",
        stream(b"app.launchURL('https://example.org');")])
    assert _code(tmp_path, data) == "active_content"
    # The same file is accepted when the policy allows active content.
    assert _check(tmp_path, data, PdfLimits(forbid_active_content=False)).pages == 1


def test_embedded_files(tmp_path: Path) -> None:
    def with_attachment(name: bytes, content: bytes) -> bytes:
        return _one_page(
            catalog_extra=b"/Names << /EmbeddedFiles << /Names [(a) 6 0 R] >> >> ",
            more=[b"<< /Type /Filespec /F (" + name + b") /EF << /F 7 0 R >> >>",
                  stream(zlib.compress(content), b"/Type /EmbeddedFile /Filter /FlateDecode ")])

    assert _check(tmp_path, with_attachment(b"photo.png", b"\x89PNG\r\n\x1a\n" + bytes(64)))
    assert _code(tmp_path, with_attachment(b"notes.txt", b"\x7fELF\x02\x01")) == \
        "active_content"
    assert _code(tmp_path, with_attachment(b"run.sh", b"#!/bin/sh\necho\n")) == \
        "active_content"
    e = _refusal(tmp_path, with_attachment(b"update.exe", b"plain text"))
    assert (e.code, e.reason) == ("active_content", "executable_attachment")
    assert e.where == {"object": 6, "attachment": "update.exe"}
    # Pages, text and pictures are documents, whatever a browser does with them.
    page = b"<!doctype html><html><body><script>alert(1)</script></body></html>"
    assert _check(tmp_path, with_attachment(b"receipt.html", page)).pages == 1
    assert _check(tmp_path, with_attachment(b"notes.txt", b"plain text")).pages == 1


def test_image_pixel_bomb(tmp_path: Path) -> None:
    image = stream(b"\xff\xd8\xff" + bytes(32), b"/Type /XObject /Subtype /Image /Width 100000 "
                   b"/Height 100000 /BitsPerComponent 8 /ColorSpace /DeviceRGB /Filter /DCTDecode ")
    data = _one_page(page_extra=b"/Thumb 6 0 R ", more=[image])
    assert _code(tmp_path, data) == "limit_exceeded"


def test_object_and_page_limits(tmp_path: Path) -> None:
    assert _code(tmp_path, GOOD, PdfLimits(max_objects=4)) == "limit_exceeded"
    assert _check(tmp_path, GOOD, PdfLimits(max_objects=5)).objects == 5
    assert _code(tmp_path, GOOD, PdfLimits(max_bytes=len(GOOD) - 1)) == "limit_exceeded"


def test_a_page_tree_of_several_levels(tmp_path: Path) -> None:
    data = assemble([
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R 4 0 R] /Count 3 >>",
        b"<< /Type /Pages /Parent 2 0 R /Kids [5 0 R 6 0 R] /Count 2 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 10 10] >>",
        b"<< /Type /Page /Parent 3 0 R /MediaBox [0 0 10 10] >>",
        b"<< /Type /Page /Parent 3 0 R /MediaBox [0 0 10 10] >>",
    ])
    assert _check(tmp_path, data).pages == 3
    assert _code(tmp_path, data, PdfLimits(max_pages=2)) == "limit_exceeded"
    assert _code(tmp_path, data, PdfLimits(max_depth=0)) == "malformed_pdf"


def test_a_shared_page_is_refused(tmp_path: Path) -> None:
    data = assemble([
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R 3 0 R] /Count 2 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 10 10] >>",
    ])
    assert _code(tmp_path, data) == "malformed_pdf"


@pytest.mark.parametrize("catalog", [
    b"(not a dictionary)",
    b"<< /Type /Catalog >>",
    b"<< /Type /Catalog /Pages 9 0 R >>",
])
def test_broken_catalogs(tmp_path: Path, catalog: bytes) -> None:
    assert _code(tmp_path, assemble([catalog, b"<< >>"])) == "malformed_pdf"


def test_signatures_and_docmdp_are_reported(tmp_path: Path) -> None:
    sig = (b"<< /Type /Sig /Filter /Adobe.PPKLite /SubFilter /adbe.pkcs7.detached "
           b"/ByteRange [0 10 20 30] /Contents <00> /Reference [<< /Type /SigRef "
           b"/TransformMethod /DocMDP /TransformParams << /Type /TransformParams /P 1 /V /1.2 >> "
           b">>] >>")
    data = _one_page(catalog_extra=b"/Perms << /DocMDP 6 0 R >> ", more=[sig])
    report = _check(tmp_path, data, PdfLimits(refuse_certified=False))
    assert report.has_signatures and report.docmdp_permission == 1


def test_damaged_object_offsets_are_repaired_and_noted(tmp_path: Path) -> None:
    # Every xref offset is off by one: pypdf finds the objects and says so, and the
    # document is damaged (refused as it is, rewritten by the pipeline).
    data = bytearray(GOOD)
    at = GOOD.index(b"0000000000 65535 f")
    for i in range(1, 6):
        entry = at + 20 * i
        offset = int(data[entry:entry + 10]) + 1
        data[entry:entry + 10] = b"%010d" % offset
    report, reader = inspect_document(bytes(data), PdfLimits())
    reader.stream.close()
    assert report.pages == 1 and report.damaged
    assert any("wrong pointing object" in w for w in report.warnings)
    assert _code(tmp_path, bytes(data)) == "malformed_pdf"


def test_warnings_are_collected_under_the_daemons_logging(tmp_path: Path) -> None:
    # The daemon's logging configuration must leave records what pdfcheck sorts
    # pypdf's warnings by (their thread).
    import io

    from casesignd.core import logs

    logs.configure("info", io.StringIO())
    test_damaged_object_offsets_are_repaired_and_noted(tmp_path)


def test_limits_from_policy() -> None:
    policy = Policy(version="v1", max_pages=7, max_document_bytes=1000,
                    forbid_active_content=False, max_decoded_stream_bytes=2000,
                    max_pdf_objects=30, max_pdf_depth=5)
    assert pdf_limits(policy) == PdfLimits(7, 1000, False, 2000, 30, 5)
    strict = Policy(version="v2", normalize="never", allowed_actions=["GoTo", "URI"],
                    max_decoded_document_bytes=5000, max_check_cpu_s=1.5)
    limits = pdf_limits(strict)
    assert (limits.normalize, limits.allowed_actions, limits.max_decoded_bytes,
            limits.max_check_cpu_s) == ("never", frozenset({"/GoTo", "/URI"}), 5000, 1.5)
    limits = pdf_limits(Policy(version="v1"))
    assert pickle.loads(pickle.dumps(limits)) == limits


# --- whatever the bytes, only our errors ---------------------------------------------

_RICH = _one_page(
    catalog_extra=b"/Names << /EmbeddedFiles << /Names [(a) 6 0 R] >> >> /OpenAction [3 0 R /Fit] ",
    page_extra=b"/Annots [8 0 R] ",
    more=[b"<< /Type /Filespec /F (a.txt) /EF << /F 7 0 R >> >>",
          stream(zlib.compress(b"attachment " * 50), b"/Type /EmbeddedFile /Filter /FlateDecode "),
          b"<< /Type /Annot /Subtype /Link /Rect [0 0 9 9] /A << /S /GoTo /D [3 0 R /Fit] >> >>"])


@settings(max_examples=300, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(edits=st.lists(st.tuples(st.integers(0, len(_RICH) - 1), st.integers(0, 255)),
                      min_size=1, max_size=8),
       cut=st.integers(0, 64))
def test_damaged_bytes_raise_only_our_errors(
    tmp_path: Path, edits: list[tuple[int, int]], cut: int,
) -> None:
    data = bytearray(_RICH)
    for at, value in edits:
        data[at] = value
    data = data[: len(data) - cut]
    try:
        _check(tmp_path, bytes(data))
    except CasesignError as e:
        assert e.code in {"malformed_pdf", "ambiguous_pdf", "encrypted_pdf", "active_content", "limit_exceeded"}


# --- the windowed decoders against pypdf's ------------------------------------------


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.binary(max_size=3000), spaces=st.booleans())
def test_hex_decoding_matches_pypdf(data: bytes, spaces: bool) -> None:
    from pypdf.filters import ASCIIHexDecode

    hexed = data.hex().encode()
    if spaces:
        hexed = b" \n".join(hexed[i:i + 7] for i in range(0, len(hexed), 7))
    encoded = hexed + b">"
    ours = measure_decoded(encoded, ["/AHx"], 1 << 20, keep=True)[1]
    assert ours == ASCIIHexDecode.decode(encoded)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(runs=st.lists(st.one_of(
    st.binary(min_size=1, max_size=128).map(lambda b: bytes([len(b) - 1]) + b),
    st.tuples(st.integers(129, 255), st.integers(0, 255)).map(lambda t: bytes(t))),
    max_size=60))
def test_run_length_decoding_matches_pypdf(runs: list[bytes]) -> None:
    from pypdf.filters import RunLengthDecode

    encoded = b"".join(runs) + b"\x80"
    ours = measure_decoded(encoded, ["/RL"], 1 << 20, keep=True)[1]
    assert ours == RunLengthDecode.decode(encoded)


def test_hex_and_run_length_bombs_stay_small() -> None:
    # pypdf's decoders take ~47 times their output in memory; ours a window.
    import resource

    def deflated(piece: bytes, times: int, end: bytes) -> bytes:
        c = zlib.compressobj(9)
        return b"".join(c.compress(piece) for _ in range(times)) + c.compress(end) + c.flush()

    hexed = deflated(b"00 " * (1 << 20), 32, b">")
    rl = deflated(b"\x01ab" * (1 << 20), 4, b"\x80")
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with pytest.raises(LimitExceeded):
        measure_decoded(hexed, ["/FlateDecode", "/AHx"], 16 << 20)
    assert measure_decoded(rl, ["/FlateDecode", "/RL"], 16 << 20)[0] == 8 << 20
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 64 * 1024


@pytest.mark.parametrize("gap", [1, 300, 5000])
def test_a_second_definition_whose_header_crosses_a_scan_window_is_found_in_a_file(
        tmp_path, gap: int) -> None:
    # Object 3 defined again after the definition the cross-reference names, its
    # header "3 <white space> 0 obj" running across the end of the first window of
    # the file scan: a rebuilding reader (qpdf, Ghostscript) takes the second one.
    from casesignd.pdf import frame as pdfframe
    from casesignd.pdf.inspect import PdfLimits, inspect_document

    objs = [b"1 0 obj\n<< /Type /Catalog /Pages 2 0 R >>\nendobj\n",
            b"2 0 obj\n<< /Type /Pages /Kids [3 0 R] /Count 1 >>\nendobj\n",
            b"3 0 obj\n<< /Type /Page /Parent 2 0 R /MediaBox [0 0 10 10] >>\nendobj\n"]
    out = bytearray(b"%PDF-1.7\n")
    offsets = []
    for o in objs:
        offsets.append(len(out))
        out += o
    out += b"%" + b"x" * (pdfframe.SCAN_WINDOW_BYTES - 12 - len(out)) + b"\n"
    out += (b"3" + b" " * gap + b"0 obj\n<< /Type /Page /Parent 2 0 R /MediaBox [0 0 500 500] >>"
            b"\nendobj\n")
    xref = len(out)
    out += b"xref\n0 4\n0000000000 65535 f \n" + b"".join(b"%010d 00000 n \n" % o for o in offsets)
    out += b"trailer\n<< /Size 4 /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % xref
    path = tmp_path / "doc.pdf"
    path.write_bytes(bytes(out))
    for src in (bytes(out), path):
        report, reader = inspect_document(src, PdfLimits())
        reader.stream.close()
        assert [f.reason for f in report.findings] == [
            "object 3 is defined again after the definition the cross-reference names"], src
