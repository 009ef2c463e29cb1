"""A worker process's verdicts: a document it passed as it is is not checked again
under the same limits, and nothing else is remembered."""

from __future__ import annotations

import datetime as dt
import hashlib

import pytest

from casesignd.core.errors import CasesignError
from casesignd.pdf.inspect import PdfLimits
from casesignd.signing import pipeline, worker
from casesignd.signing.pades import SignatureMeta
from tests.helpers_corpus import _one_page

META = SignatureMeta(signing_time=dt.datetime(2026, 1, 1, tzinfo=dt.UTC), name="x")


@pytest.fixture
def counted(monkeypatch):
    """A fresh memo, and the number of deep checks made."""
    monkeypatch.setattr(pipeline, "VERDICTS", pipeline.Verdicts(size=2))
    calls = []
    real = pipeline.inspect_document

    def inspect(src, limits):
        calls.append(hashlib.sha256(src).hexdigest())
        return real(src, limits)

    monkeypatch.setattr(pipeline, "inspect_document", inspect)
    return calls


def prepare(doc: bytes, limits: PdfLimits | None = None):
    return pipeline.prepare_document(doc, limits=limits or PdfLimits(), meta=META,
                                     contents_bytes=8192)


def test_a_document_passed_once_is_prepared_again_without_a_second_check(counted):
    doc = _one_page()
    first = prepare(doc)
    second = prepare(doc)
    assert len(counted) == 1
    assert second[0] == first[0] and second[1] is doc
    # A fresh preparation each time: the same update for the same signing time (but
    # for the document's new /ID).
    assert second[2].head == first[2].head and second[2].digest != first[2].digest
    prepare(doc, PdfLimits(max_pages=10))  # other limits: checked under them
    assert len(counted) == 2


def test_refusals_and_rewrites_are_decided_each_time(counted):
    scripted = _one_page(catalog_extra=b"/OpenAction 6 0 R ",
                         more=[b"<< /S /JavaScript /JS (app.alert(1)) >>"])
    for _ in range(2):
        with pytest.raises(CasesignError) as e:
            prepare(scripted)
        assert e.value.code == "active_content"
    assert len(counted) == 2
    always = PdfLimits(normalize="always")
    doc = _one_page()
    assert prepare(doc, always)[0].normalized
    assert prepare(doc, always)[0].normalized
    # Each time the original and its rewrite, both in full.
    assert counted.count(hashlib.sha256(doc).hexdigest()) == 2 and len(counted) == 6


def test_the_memo_keeps_the_most_recent_documents(counted):
    docs = [_one_page(page_extra=b"/Rotate %d " % r) for r in (0, 90, 180)]
    for doc in docs:
        prepare(doc)
    prepare(docs[0])  # the oldest was dropped when the third arrived
    assert len(counted) == 4
    prepare(docs[2])
    assert len(counted) == 4


def test_a_stored_object_is_signed_each_time_and_checked_once(counted, tmp_path):
    from casesignd.ops import devpki
    from casesignd.signing import cms
    from casesignd.signing.keys import LocalSigner

    ca = devpki.make_ca(kind="ec")
    ident = devpki.issue(ca, "verdicts", kind="ec")
    signer = LocalSigner(ident.key, ident.cert, ident.chain)
    doc = _one_page()
    path = tmp_path / "obj"
    path.write_bytes(doc)
    sha = hashlib.sha256(doc).hexdigest()
    worker.init_signing_process(cms.template_for(signer.cert, tuple(signer.chain)),
                                signer.for_process())
    try:
        works = [worker.sign_stored(str(path), sha, len(doc), PdfLimits(), META, 8192, True)
                 for _ in range(2)]
    finally:
        worker._PROCESS.clear()
    assert counted == [sha]
    assert all(w.update and w.signature and w.checked.received_sha256 == sha for w in works)
    assert works[0].signature != works[1].signature  # ECDSA: a fresh signature each time


def test_a_passed_documents_structure_is_read_once_while_it_is_recent(counted, monkeypatch):
    memo = pipeline.Verdicts(size=8, structures=2, structure_bytes=64 << 10)
    monkeypatch.setattr(pipeline, "VERDICTS", memo)
    reads = []
    real = pipeline.pades.read_bytes

    def read_bytes(data, reader=None):
        reads.append(hashlib.sha256(data).hexdigest())
        return real(data, reader)

    monkeypatch.setattr(pipeline.pades, "read_bytes", read_bytes)
    docs = [_one_page(page_extra=b"/Rotate %d " % r) for r in (0, 90, 180)]
    big = _one_page(more=[b"(" + b"x" * (64 << 10) + b")"])
    for doc in [*docs, big]:
        prepare(doc)  # checked: the check's own reading serves the preparation
    assert reads == [hashlib.sha256(d).hexdigest() for d in [*docs, big]]
    reads.clear()
    for _ in range(3):
        prepare(docs[0])
        prepare(docs[1])
        prepare(big)  # over structure_bytes: read each time
    digest = [hashlib.sha256(d).hexdigest() for d in (docs[0], docs[1], big)]
    assert reads == [*digest, digest[2], digest[2]]
    prepare(docs[2])  # a third small one: the oldest structure is dropped
    prepare(docs[0])
    assert reads[-2:] == [hashlib.sha256(docs[2]).hexdigest(), digest[0]]
