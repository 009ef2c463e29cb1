"""A document the signing process finishes itself is written whole into its
artifact's file in flight (casesignd.signing.sealed_output.Publication): plain, or
sealed under the artifact's data key; nothing of it in the temp area; its digest the
one of the bytes written; and nothing left in flight when it is refused."""

from __future__ import annotations

import datetime as dt
import hashlib
import os
from pathlib import Path

import pytest

from casesignd.core.errors import DigestMismatch
from casesignd.core.outcomes import InFlight
from casesignd.core.sealed import SealedPath, SealKey, copy_into
from casesignd.ops import devpki
from casesignd.pdf.inspect import PdfLimits
from casesignd.signing import cms, pades, worker
from casesignd.signing.keys import LocalSigner
from tests.helpers_pki import big_pdf, pyhanko_statuses

META = pades.SignatureMeta(signing_time=dt.datetime(2026, 1, 1, tzinfo=dt.UTC), name="x")


def _signing_process(with_key: bool) -> devpki.Identity:
    """This process as a signing worker, with its key (EC: quick) or without (a
    token's, which signs in the daemon); the CA."""
    ca = devpki.make_ca(kind="ec")
    ident = devpki.issue(ca, "publication", kind="ec")
    signer = LocalSigner(ident.key, ident.cert, ident.chain)
    worker.init_signing_process(cms.template_for(signer.cert, tuple(signer.chain)),
                                signer.for_process() if with_key else None)
    return ca


@pytest.fixture
def signing_process():
    try:
        yield _signing_process(with_key=True)
    finally:
        worker._PROCESS.clear()


def _area(tmp_path: Path) -> tuple[SealedPath, SealedPath, pades.Attachment, bytes]:
    """A contract and a 5 MB evidence file sealed in a temp area (as the fetch leaves
    them), and the destination the signed body would take there."""
    key = SealKey.generate()
    area = tmp_path / "area"
    area.mkdir()
    contract = SealedPath(area / "item-0", key)
    with open(big_pdf(tmp_path / "c.pdf", 2_000), "rb") as f, contract.create() as w:
        copy_into(f, w)
    evidence = os.urandom(5 * 1024 * 1024)
    sealed_evidence = SealedPath(area / "item-1", key)
    with sealed_evidence.create() as w:
        w.write(evidence)
    return contract, SealedPath(area / "signed.pdf", key), \
        pades.Attachment(sealed_evidence, "e.bin", "application/octet-stream"), evidence


def _plain(path: Path, key: SealKey | None) -> bytes:
    if key is None:
        return path.read_bytes()
    with SealedPath(path, key).open() as f:
        return f.read()


@pytest.mark.parametrize("sealed", [False, True], ids=["plain store", "sealed store"])
def test_signed_in_the_process_the_document_is_written_whole_in_flight(
        signing_process, tmp_path, sealed) -> None:
    contract, dst, evidence, evidence_bytes = _area(tmp_path)
    key = SealKey.generate() if sealed else None
    target = InFlight("art_" + "0" * 32, tmp_path / ".local.0123.tmp", key)
    work = worker.sign_prepared_file(contract, dst, PdfLimits(), [evidence], META, 8192, True,
                                     None, target)
    assert work.published is not None and work.update == b""
    data = _plain(target.path, key)
    assert (work.published.artifact_id, work.published.sha256, work.published.size) == (
        target.artifact_id, hashlib.sha256(data).hexdigest(), len(data))
    assert not dst.path.exists()  # nothing of the signed document in the temp area
    assert sorted(p.name for p in dst.path.parent.iterdir()) == ["item-0", "item-1"]
    assert evidence_bytes in data and hashlib.sha256(evidence_bytes).hexdigest().encode() in data
    if sealed:
        assert evidence_bytes[:64] not in target.path.read_bytes()
    signed = tmp_path / "signed.pdf"
    signed.write_bytes(data)
    statuses = pyhanko_statuses(signed, [signing_process.cert])
    assert statuses and all(s.intact and s.valid for s in statuses)


def test_a_refused_document_leaves_nothing_in_flight(signing_process, tmp_path) -> None:
    contract, dst, evidence, _ = _area(tmp_path)
    target = InFlight("art_" + "0" * 32, tmp_path / ".local.0123.tmp", SealKey.generate())
    with pytest.raises(DigestMismatch):
        worker.sign_prepared_file(contract, dst, PdfLimits(), [evidence], META, 8192, True,
                                  hashlib.sha256(b"another document").hexdigest(), target)
    assert not target.path.exists() and not dst.path.exists()


def test_without_the_key_in_the_process_the_body_stays_in_the_area(tmp_path) -> None:
    _signing_process(with_key=False)
    try:
        contract, dst, evidence, _ = _area(tmp_path)
        target = InFlight("art_" + "0" * 32, tmp_path / ".local.0123.tmp")
        work = worker.sign_prepared_file(contract, dst, PdfLimits(), [evidence], META, 8192,
                                         True, None, target)
    finally:
        worker._PROCESS.clear()
    assert work.published is None and work.signature is None
    assert not target.path.exists() and dst.path.exists()
