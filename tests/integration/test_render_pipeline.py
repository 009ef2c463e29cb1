"""The third and fourth readers: poppler and MuPDF draw a rewrite and the received
document (casesignd.pdf.render), and the pipeline signs or refuses on what they show.

Real renderers on real PDFs; where a rewrite that changes a page is needed (qpdf does
not make one of a sound file), the rewrite is replaced by the changed document."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from casesignd.core.errors import AmbiguousPdf, CasesignError, RendererUnavailable
from casesignd.pdf import normalize
from casesignd.pdf import render as pdfrender
from casesignd.pdf.draw import Drawn
from casesignd.pdf.inspect import PdfLimits
from casesignd.signing import pipeline
from tests.helpers_corpus import assemble, stream
from tests.helpers_hostile import (
    _count_mismatch,
    _dup_key_contents,
    _hand,
    _twice_defined_xref_damaged,
    assert_drawn_alike,
    damage_prev_loop,
    mupdf_text,
    pdftotext_pages,
    pypdf_view,
)
from tests.helpers_pki import Pki, pki, sample_meta  # noqa: F401  (pki: session fixture)

pytestmark = pytest.mark.skipif(bool(pdfrender.missing_renderers()),
                                reason="pdftoppm or mutool is not installed")

_FONT = b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>"


def _page(number: int, content: bytes, extra: bytes = b"") -> list[bytes]:
    """Page object ``number`` and its content stream (``number + 1``)."""
    return [b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents %d 0 R "
            b"/Resources << /Font << /F1 3 0 R >> %s>> >>" % (number + 1, extra),
            stream(content)]


def _text(line: str, y: int = 720) -> bytes:
    return b"BT /F1 10 Tf 72 %d Td (%s) Tj ET" % (y, line.encode())


def contract(salary: str = "Salary 1000 EUR", terms_layer: bytes | None = None) -> bytes:
    """Two pages: a title, then the terms; with ``terms_layer`` ("/ON" or "/OFF") the
    terms sit in an optional content group that the catalog shows or hides."""
    objs = [b"", b"<< /Type /Pages /Kids [4 0 R 6 0 R] /Count 2 >>", _FONT]
    objs += _page(4, _text("EMPLOYMENT CONTRACT"))
    terms = _text(salary, 700)
    if terms_layer is None:
        objs += _page(6, _text("TERMS") + b" " + terms)
        catalog = b"<< /Type /Catalog /Pages 2 0 R >>"
    else:
        objs += _page(6, _text("TERMS") + b" /OC /L1 BDC " + terms + b" EMC",
                      b"/Properties << /L1 8 0 R >> ")
        objs.append(b"<< /Type /OCG /Name (terms) >>")  # 8
        catalog = (b"<< /Type /Catalog /Pages 2 0 R /OCProperties << /OCGs [8 0 R] "
                   b"/D << /Order [8 0 R] " + terms_layer + b" [8 0 R] >> >> >>")
    objs[0] = catalog
    return assemble(objs)


def rewritten_as(monkeypatch: pytest.MonkeyPatch, document: bytes) -> None:
    """qpdf's rewrite, replaced by ``document``: a rewrite that changed the document."""
    def rewrite(src, dst=None, **_):
        if dst is None:
            return document, (), Drawn()
        dst.write_bytes(document)
        return dst, (), Drawn()
    monkeypatch.setattr(normalize, "rewrite", rewrite)


def refusal(src: Path | bytes, limits: PdfLimits, workdir: Path) -> CasesignError:
    with pytest.raises(CasesignError) as e:
        pipeline.check(src, limits, workdir / "rewrite.pdf" if isinstance(src, Path) else None)
    return e.value


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty directory; the system's temp directory points into another one, to see
    that nothing is left there either."""
    temp = tmp_path / "systemp"
    temp.mkdir()
    monkeypatch.setattr("tempfile.tempdir", str(temp))
    work = tmp_path / "work"
    work.mkdir()
    yield work
    assert list(temp.iterdir()) == [], "a renderer's directory was left behind"


# --- documents only pypdf reads otherwise are signed ----------------------------------


@pytest.mark.parametrize(("build", "shown", "hidden"), [
    (_dup_key_contents, "SECOND CONTENTS SHOWN", "FIRST CONTENTS SHOWN"),
    (_twice_defined_xref_damaged, "SECOND DEFINITION SHOWN", "FIRST DEFINITION SHOWN"),
])
@pytest.mark.parametrize("as_bytes", [False, True])
def test_a_document_only_pypdf_reads_otherwise_is_signed_as_the_viewers_show_it(
        build, shown: str, hidden: str, as_bytes: bool, workdir: Path) -> None:
    received = workdir / "received.pdf"
    received.write_bytes(build())
    assert hidden in " ".join(pypdf_view(received)[1])  # pypdf's reading of what was received
    src: Path | bytes = received.read_bytes() if as_bytes else received
    checked, source, reader = pipeline.check(src, PdfLimits(), workdir / "rewrite.pdf")
    pipeline._close(reader)
    assert checked.normalized and pipeline.PYPDF_ALONE in checked.reasons
    rewrite = workdir / "rewrite.pdf"
    if isinstance(source, bytes):
        rewrite.write_bytes(source)
    else:
        assert source == rewrite
    # Every reader shows of the rewrite what the viewers showed of the received file.
    assert shown in " ".join(pypdf_view(rewrite)[1])
    assert shown in " ".join(pdftotext_pages(rewrite)) and shown in mupdf_text(rewrite)
    assert hidden not in " ".join(pypdf_view(rewrite)[1])
    assert_drawn_alike(received, rewrite)
    assert sorted(p.name for p in workdir.iterdir()) == ["received.pdf", "rewrite.pdf"]


def test_signed_whole_with_the_reason_recorded(workdir: Path, pki: Pki) -> None:  # noqa: F811
    received = workdir / "received.pdf"
    received.write_bytes(_dup_key_contents())
    dst = workdir / "signed.pdf"
    outcome = pipeline.sign_file(received, dst, pki.signer("ec"), meta=sample_meta())
    assert outcome.checked.normalized
    assert pipeline.PYPDF_ALONE in outcome.checked.audit_detail()["normalize_reasons"]
    assert_drawn_alike(received, dst)
    assert sorted(p.name for p in workdir.iterdir()) == ["received.pdf", "signed.pdf"]


# --- a rewrite that changes what a page shows is refused ------------------------------


def test_a_rewrite_that_hides_what_a_page_showed_is_refused(
        workdir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The layer's state is in the catalog, outside any page's objects: pypdf's page
    # digests are the same, and only the drawings see page 2 lose its terms.
    received = workdir / "received.pdf"
    received.write_bytes(contract(terms_layer=b"/ON"))
    rewritten_as(monkeypatch, contract(terms_layer=b"/OFF"))
    err = refusal(received, PdfLimits(normalize="always"), workdir)
    assert isinstance(err, AmbiguousPdf)
    assert (err.code, err.reason, err.where) == ("ambiguous_pdf", "pages_render_differently",
                                                 {"page": 2})
    # pypdf agreed, so poppler's difference refused it: MuPDF was not asked ...
    assert err.detail["renderers"] == {"poppler": {"page": 2}}
    assert sorted(p.name for p in workdir.iterdir()) == ["received.pdf"]
    # ... and would have said the same.
    drawn = pdfrender.compare(received, contract(terms_layer=b"/OFF"), pages=2,
                              workdir=workdir)
    assert {e: r.page for e, r in drawn.items()} == {"poppler": 2, "mupdf": 2}


@pytest.mark.parametrize(("changed", "page"), [
    ("Salary 1900 EUR", 2),   # a digit
    ("Salary 1000 USD", 2),   # a word
    ("Salary 1.000 EUR", 2),  # a point added
])
@pytest.mark.parametrize("as_bytes", [False, True])
def test_a_rewrite_no_reader_agrees_with_is_refused(
        changed: str, page: int, as_bytes: bool, workdir: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    received = workdir / "received.pdf"
    received.write_bytes(contract())
    rewritten_as(monkeypatch, contract(changed))
    src: Path | bytes = received.read_bytes() if as_bytes else received
    err = refusal(src, PdfLimits(normalize="always"), workdir)
    assert (err.code, err.reason, err.where) == ("ambiguous_pdf", "readers_disagree",
                                                 {"page": page})
    assert sorted(p.name for p in workdir.iterdir()) == ["received.pdf"]


def test_a_page_the_viewers_never_showed_is_refused(workdir: Path) -> None:
    # /Count 1 over two kids: poppler and MuPDF draw one page, qpdf's rewrite has two.
    received = workdir / "received.pdf"
    received.write_bytes(_count_mismatch())
    err = refusal(received, PdfLimits(), workdir)
    assert (err.code, err.reason, err.where) == ("ambiguous_pdf", "pages_render_differently",
                                                 {"page": 2})


def test_damage_one_viewer_cannot_open_is_signed_where_the_others_agree(workdir: Path) -> None:
    # MuPDF cannot open a /Prev loop at all; qpdf's repair, poppler and pypdf agree.
    received = workdir / "received.pdf"
    received.write_bytes(damage_prev_loop(_hand()))
    checked, source, reader = pipeline.check(received, PdfLimits(), workdir / "rewrite.pdf")
    reader.stream.close()
    assert checked.normalized
    assert any(r.startswith("mupdf could not draw the received document") for r in checked.reasons)
    assert_drawn_alike(received, source, engines=(pdfrender.POPPLER,))


def test_a_renderer_failing_on_the_received_document_does_not_agree(
        workdir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = pdfrender.render

    def render(engine, pdf, outdir, **kw):
        if engine == pdfrender.MUPDF and pdf.name == "received.pdf":
            return [], "timeout"
        return real(engine, pdf, outdir, **kw)

    monkeypatch.setattr(pdfrender, "render", render)
    received = workdir / "received.pdf"
    received.write_bytes(_dup_key_contents())
    # pypdf reads it otherwise, MuPDF says nothing: poppler alone agrees with qpdf.
    err = refusal(received, PdfLimits(), workdir)
    assert (err.code, err.reason, err.where) == ("ambiguous_pdf", "readers_disagree",
                                                 {"page": 1})
    assert err.detail["renderers"]["mupdf"]["failed"] == "received: timeout"


# --- the renderers themselves ---------------------------------------------------------


def test_a_renderer_past_its_time_is_stopped(tmp_path: Path) -> None:
    pdf = tmp_path / "doc.pdf"
    pdf.write_bytes(contract())
    for engine in pdfrender.ENGINES:
        out = tmp_path / engine
        out.mkdir()
        assert pdfrender.render(engine, pdf, out, last_page=2, limit_s=0.0001) == ([], "timeout")


@pytest.mark.parametrize("with_prlimit", [True, False])
def test_a_page_past_the_renderers_limits_fails_to_draw(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, with_prlimit: bool) -> None:
    # A page of 340 x 440 gray pixels is a file of 150 kB: past a limit of 16 kB.
    monkeypatch.setattr(pdfrender, "RENDER_PAGE_MAX_BYTES", 16 << 10)
    if not with_prlimit:  # the fallback: the child sets the limits itself
        which = shutil.which
        monkeypatch.setattr(pdfrender.shutil, "which",
                            lambda name: None if name == "prlimit" else which(name))
    pdf = tmp_path / "doc.pdf"
    pdf.write_bytes(contract())
    for engine in pdfrender.ENGINES:
        out = tmp_path / f"{engine}-{with_prlimit}"
        out.mkdir()
        _pages, failed = pdfrender.render(engine, pdf, out, last_page=2)
        assert failed, engine


def _pages(*texts: str) -> bytes:
    objs = [b"<< /Type /Catalog /Pages 2 0 R >>", b"", _FONT]
    for i, text in enumerate(texts):
        objs += _page(4 + 2 * i, _text(text))
    kids = b" ".join(b"%d 0 R" % (4 + 2 * i) for i in range(len(texts)))
    objs[1] = b"<< /Type /Pages /Kids [%s] /Count %d >>" % (kids, len(texts))
    return assemble(objs)


@pytest.mark.parametrize(("received", "rewrite", "page"), [
    (["A", "B", "C", "D", "E"], ["A", "B", "C", "D", "E"], None),
    (["A", "B", "C", "D", "E"], ["A", "B", "C", "X", "E"], 4),   # in the second batch
    (["A", "B", "C", "D", "E"], ["A", "B", "C", "D", "X"], 5),   # in the last
    (["A", "B", "C", "D", "E", "F"], ["A", "B", "C", "D", "E"], 6),  # one page more
    (["A", "B", "C", "D", "E", "F", "G"], ["A", "B", "C", "D", "E"], 6),
    (["A", "B", "C"], ["A", "B", "C", "D", "E"], 4),  # fewer: its batch cannot be drawn
    (["A", "B", "C", "D"], ["A", "B", "C", "D", "E"], 5),
])
def test_pages_are_drawn_and_compared_in_batches(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, received: list[str],
        rewrite: list[str], page: int | None) -> None:
    monkeypatch.setattr(pdfrender, "RENDER_BATCH_PAGES", 2)
    results = pdfrender.compare(_pages(*received), _pages(*rewrite), pages=len(rewrite),
                                workdir=tmp_path)
    assert {e: r.page for e, r in results.items()} == {"poppler": page, "mupdf": page}
    assert list(tmp_path.iterdir()) == []


def test_each_engine_draws_every_page_and_no_more(tmp_path: Path) -> None:
    pdf = tmp_path / "-doc.pdf"  # a name that looks like an option
    pdf.write_bytes(contract())
    for engine in pdfrender.ENGINES:
        out = tmp_path / engine
        out.mkdir()
        pages, failed = pdfrender.render(engine, pdf, out, last_page=3)
        assert failed == "" and [p.parent for p in pages] == [out, out]
        assert pdfrender.first_differing_page(pages, pages) is None


def test_a_missing_renderer_is_the_services_fault_not_the_documents(
        workdir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    which = shutil.which
    monkeypatch.setattr(pdfrender.shutil, "which",
                        lambda name: None if name == "mutool" else which(name))
    assert pdfrender.missing_renderers() == ["mupdf"]
    received = workdir / "received.pdf"
    received.write_bytes(_dup_key_contents())
    err = refusal(received, PdfLimits(), workdir)
    assert isinstance(err, RendererUnavailable)
    assert err.code == "renderer_unavailable" and err.retryable
    assert "mutool (mupdf-tools)" in err.message
    assert sorted(p.name for p in workdir.iterdir()) == ["received.pdf"]
    # A document that needs no rewrite needs no renderer.
    clean = workdir / "clean.pdf"
    clean.write_bytes(contract())
    checked, _source, reader = pipeline.check(clean, PdfLimits(), workdir / "rewrite.pdf")
    pipeline._close(reader)
    assert not checked.normalized


def test_the_changed_words_are_seen_at_the_resolution_used(tmp_path: Path) -> None:
    """The pure comparison on real drawings: a digit, a word, a point in 10-point type
    are seen by both engines at RENDER_DPI; the same document twice is not."""
    base = tmp_path / "base.pdf"
    base.write_bytes(contract())
    for engine in pdfrender.ENGINES:
        drawn = {}
        for name, salary in (("base", "Salary 1000 EUR"), ("again", "Salary 1000 EUR"),
                             ("digit", "Salary 1900 EUR"), ("word", "Salary 1000 USD"),
                             ("point", "Salary 1.000 EUR")):
            pdf = tmp_path / f"{engine}-{name}.pdf"
            pdf.write_bytes(contract(salary))
            out = tmp_path / f"{engine}-{name}"
            out.mkdir()
            drawn[name], failed = pdfrender.render(engine, pdf, out, last_page=2)
            assert not failed
        assert pdfrender.first_differing_page(drawn["base"], drawn["again"]) is None
        for name in ("digit", "word", "point"):
            assert pdfrender.first_differing_page(drawn["base"], drawn[name]) == 2, (engine, name)


def test_the_layered_contract_is_what_the_test_claims(tmp_path: Path) -> None:
    """With the layer off, both engines draw page 2 without its terms (so the refusal
    above is of a real change), and pypdf's page digests cannot tell."""
    from pypdf import PdfReader

    on, off = tmp_path / "on.pdf", tmp_path / "off.pdf"
    on.write_bytes(contract(terms_layer=b"/ON"))
    off.write_bytes(contract(terms_layer=b"/OFF"))
    assert "Salary 1000 EUR" in mupdf_text(on) and "Salary" not in mupdf_text(off)
    with pytest.raises(AssertionError, match="page 2"):
        assert_drawn_alike(on, off)
    with open(on, "rb") as a, open(off, "rb") as b:
        assert normalize.page_digests(PdfReader(a)) == normalize.page_digests(PdfReader(b))
