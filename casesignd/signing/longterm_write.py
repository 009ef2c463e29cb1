"""The incremental updates of the long-term levels, written by pyHanko's writer.

:func:`dss_update` appends one revision (PDF 32000-1 §7.5.6) holding the document
security store (PDF 2.0 §12.8.4.3; no /VRI) and, for B-LTA, a document timestamp
(ETSI EN 319 142-1 §5.4: /Type /DocTimeStamp, /SubFilter /ETSI.RFC3161) over the
whole document. What goes in is decided by :mod:`casesignd.signing.longterm`; the
timestamp request is :mod:`casesignd.signing.tsa`'s.
"""

from __future__ import annotations

import io
from pathlib import Path

from asn1crypto import cms
from pyhanko.pdf_utils.incremental_writer import IncrementalPdfFileWriter
from pyhanko.pdf_utils.misc import PdfError
from pyhanko.pdf_utils.reader import PdfFileReader
from pyhanko.sign.signers.pdf_signer import PdfTimeStamper
from pyhanko.sign.timestamps.api import TimeStamper
from pyhanko.sign.validation.dss import DocumentSecurityStore

from casesignd.core.calls import NO_CALLS, Calls
from casesignd.core.errors import MalformedPdf
from casesignd.signing import tsa
from casesignd.signing.revocation import ChainEvidence
from casesignd.signing.sealed_output import SealedSigned


class Stamper(TimeStamper):
    """pyHanko's timestamp client over :mod:`casesignd.signing.tsa`; keeps the last token.
    Its request is a span of ``calls`` under ``parent`` (a ``traceparent``): pyHanko
    calls it on its own event loop, in a thread, where no span is current."""

    def __init__(self, url: str, timeout_s: float, calls: Calls = NO_CALLS,
                 parent: str | None = None) -> None:
        super().__init__()
        self.url = url
        self.timeout_s = timeout_s
        self.calls = calls
        self.parent = parent
        self.last: bytes | None = None

    async def async_timestamp(self, message_digest: bytes, md_algorithm: str) -> cms.ContentInfo:
        if md_algorithm != "sha256":
            raise ValueError("document timestamps are SHA-256")
        # Blocking: this runs on the private event loop of a worker thread.
        self.last = tsa.timestamp_imprint_blocking(self.url, message_digest, self.timeout_s,
                                                   self.calls, self.parent)
        return cms.ContentInfo.load(self.last)


def dss_update(stream: io.BufferedIOBase | io.BytesIO, evidence: list[ChainEvidence],
                stamper: Stamper | None, reserve_hex: int, field: str) -> None:
    """One incremental update on ``stream`` (in place): the DSS with ``evidence``, and a
    document timestamp over the result when a ``stamper`` is given."""
    try:
        writer = IncrementalPdfFileWriter(stream)
        certs = {c.sha256: c for ev in evidence for c in ev.certs}
        DocumentSecurityStore.supply_dss_in_writer(
            writer, None, certs=list(certs.values()),
            ocsps=[o for ev in evidence for o in ev.ocsps],
            crls=[c for ev in evidence for c in ev.crls])
        if stamper is None:
            writer.write_in_place()
        else:
            PdfTimeStamper(stamper, field_name=field).timestamp_pdf(
                writer, "sha256", bytes_reserved=reserve_hex, in_place=True)
    except PdfError as e:
        raise MalformedPdf(f"the signed document cannot take its validation data: {e}") from e


def last_timestamp_token(path: str | Path | SealedSigned) -> bytes | None:
    """The TimeStampToken (DER ContentInfo) of the document's last document timestamp,
    or None when it has none (it is not B-LTA)."""
    try:
        with (path.view() if isinstance(path, SealedSigned) else open(path, "rb")) as f:
            stamps = [s for s in PdfFileReader(f, strict=False).embedded_signatures
                      if s.sig_object_type == "/DocTimeStamp"]
            if not stamps:
                return None
            signed = stamps[-1].signed_data
            return cms.ContentInfo({"content_type": "signed_data", "content": signed}).dump()
    except (PdfError, ValueError, KeyError) as e:
        raise MalformedPdf(f"the artifact cannot be read as a signed PDF: {e}") from e
