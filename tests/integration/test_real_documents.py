"""Documents people send — links and forms from real producers — are signed, and
what is signed is what viewers showed: the readers agree on the signed file, each
renderer draws its pages as it drew the received ones, and validators accept it."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers_hostile import assert_signed_and_readable
from tests.helpers_pki import Pki, nss_db, pki, sample_meta
from tests.helpers_realdocs import (
    MARKERS,
    REAL_NAMES,
    pages_differ,
    real_corpus,  # noqa: F401  (session fixture)
    render_pages,
)

__all__ = ["pki"]  # fixture

ENGINES = ("poppler", "mupdf")


@pytest.fixture(scope="module")
def nssdir(pki: Pki, tmp_path_factory: pytest.TempPathFactory) -> Path | None:
    return nss_db(tmp_path_factory.mktemp("nss"), pki.ca.cert)


def _entry(corpus: tuple[dict[str, Path], dict[str, str]], name: str) -> Path:
    built, missing = corpus
    if name not in built:
        pytest.skip(missing.get(name, "not built"))
    return built[name]


@pytest.mark.parametrize("name", REAL_NAMES)
def test_a_real_document_is_signed_as_viewers_show_it(
        name: str, real_corpus, pki: Pki, nssdir: Path | None,  # noqa: F811
        tmp_path: Path) -> None:
    from casesignd.pdf.inspect import PdfLimits
    from casesignd.signing import pipeline

    src = _entry(real_corpus, name)
    dst = tmp_path / "signed.pdf"
    outcome = pipeline.sign_file(src, dst, pki.signer("ec"), meta=sample_meta(),
                                 limits=PdfLimits())
    assert dst.exists() and outcome.path == dst
    assert_signed_and_readable(dst, pki.ca.cert, nssdir, markers=MARKERS[name],
                               exact_text=False)
    for engine in ENGINES:
        page = pages_differ(render_pages(src, engine), render_pages(dst, engine))
        assert page is None, f"{name}: {engine} draws page {page} differently once signed " \
            f"(normalized={outcome.checked.normalized}, reasons={outcome.checked.reasons})"


def test_links_are_counted_and_never_kept(real_corpus, pki: Pki,  # noqa: F811
                                          tmp_path: Path) -> None:
    from casesignd.pdf.inspect import PdfLimits
    from casesignd.signing import pipeline

    src = _entry(real_corpus, "pdflatex_links")
    outcome = pipeline.sign_file(src, tmp_path / "s.pdf", pki.signer("ec"), meta=sample_meta(),
                                 limits=PdfLimits())
    detail = outcome.checked.audit_detail()
    # mailto, https, and the http link twice (it breaks across a line: two
    # annotations); the section references stay in the document.
    assert detail["external_links"] == 4
    assert "example.org" not in repr(detail)
