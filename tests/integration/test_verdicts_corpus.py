"""An update made from a structure read for an earlier update is the update a fresh
reading makes, byte for byte, for every document of the good corpus: an update only
reads the structure it is given."""

from __future__ import annotations

import datetime as dt
import hashlib

from casesignd.pdf.inspect import PdfLimits
from casesignd.signing import pades, pipeline
from casesignd.signing.pades import Party, SignatureMeta
from tests.helpers_corpus import good_corpus  # noqa: F401 - fixture

WHEN = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
METAS = [SignatureMeta(signing_time=WHEN, name="first", case_id="C-1",
                       parties=(Party("s1", "A. Signer", "signer"),)),
         SignatureMeta(signing_time=WHEN, name="second", reason="approval", location="Berlin",
                       case_id="C-1", parties=(Party("s2", "B. Signer", "witness"),))]


def test_updates_from_a_kept_structure_are_those_of_a_fresh_one(good_corpus, monkeypatch):  # noqa: F811
    monkeypatch.setattr(pades.os, "urandom", lambda n: b"\x07" * n)  # the new /ID
    limits = PdfLimits()
    kept = 0
    for name, path in sorted(good_corpus.items()):
        doc = path.read_bytes()
        if len(doc) > 8 << 20:
            continue
        monkeypatch.setattr(pipeline, "VERDICTS", pipeline.Verdicts(structure_bytes=8 << 20))
        sha = hashlib.sha256(doc).hexdigest()
        try:
            checked, base, _ = pipeline.prepare_document(doc, limits=limits, meta=METAS[0],
                                                         contents_bytes=8192, sha256=sha)
        except pipeline.CasesignError:
            continue  # refused (a locked form, say): nothing is kept
        if checked.normalized:
            continue  # a rewrite is not kept
        for _round in range(3):  # the first reads the structure, the next ones reuse it
            for meta in METAS:
                fresh = pades.prepare_bytes(doc, meta=meta, contents_bytes=8192)
                _, _, from_memo = pipeline.prepare_document(
                    doc, limits=limits, meta=meta, contents_bytes=8192, sha256=sha)
                assert (from_memo.head, from_memo.tail, from_memo.digest) == \
                    (fresh.head, fresh.tail, fresh.digest), name
        kept += 1
    assert kept >= 8
