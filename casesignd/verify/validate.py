"""Validate the signatures of a PDF with pyHanko: AdES indications, PAdES baseline
levels, and what later revisions changed.

For each signature (ETSI EN 319 102-1 validation, PAdES as in ETSI EN 319 142-1):

- the document: pyHanko reads it strictly; its difference analysis
  (``DEFAULT_DIFF_POLICY``) says what the revisions after the signature changed
  (``modification``: none, lta_updates, form_filling, annotations, other). A change
  to what a reader sees (content, pages, an overlay, a form change the signature's
  DocMDP/FieldMDP did not allow) is ``other``, and so are bytes after the last
  revision that no signature covers: the signature then fails (TOTAL-FAILED,
  FORMAT_FAILURE, as the format-checking building block of EN 319 102-1 §5.2.2);
- the signature: without a signature timestamp the basic validation (§5.3), with
  one the validation with time (§5.5), and where that wants a proof of existence
  (an expired or revoked certificate) the one for long-term signatures (§5.6.3:
  the DSS's validation data and the document timestamps as evidence). Trust
  anchors are only those given; with none, nothing passes
  (INDETERMINATE/NO_CERTIFICATE_CHAIN_FOUND). Certificates are never fetched:
  the chain must be in the document or the anchors;
- revocation: the document's own data (DSS, CMS) first; online only as ``fetch``
  allows: ``never`` (local only), ``missing`` (once more with fetching when the
  local data leave the chain undecided and its certificates name where revocation
  data lives), ``always``. ``fetch_timeout_s`` bounds one fetch and one
  signature's validation with its fetches;
- signatures that were in an earlier revision's form and are gone from the last
  one (a field removed, a value cleared) and signatures of a kind pyHanko does not
  validate (an unknown /SubFilter) are reported as failed, never left out.

Document timestamps (/DocTimeStamp) are reported in the same list (``kind``
``document_timestamp``, ``level`` null), validated at the current time; a document
passes only when every entry is TOTAL-PASSED, and a document without signatures
does not pass.

``level`` is the highest baseline level the signature's form meets: B-B (a PAdES
signature: ETSI.CAdES.detached with a signing-certificate attribute, intact), B-T (a
signature timestamp that validates), B-LT (B-T, and the DSS holds the certificates of
the signer's and the timestamp's chains and revocation data for each certificate that
names a revocation source), B-LTA (B-LT as of a later document timestamp that
validates). Null when it is not a PAdES signature or not intact.

This module is the entry point, importable without pyHanko; the options, the report
and the pure decisions are :mod:`casesignd.verify.report`, reading the document and
its signature fields :mod:`casesignd.verify.document`, pyHanko on one signature
:mod:`casesignd.verify.ades`. Validation is CPU work in pure Python: the daemon runs
it in a worker process (:meth:`casesignd.daemon.lifecycle.Services.run_cpu`), the command line in
its own process.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from casesignd.verify.report import (
    DOC_TIMESTAMP,
    FAILED,
    FETCH_MODES,
    INDETERMINATE,
    MODIFICATIONS,
    PASSED,
    SIGNATURE,
    SignatureReport,
    VerifyOptions,
    VerifyReport,
    byte_range_fault,
    level_of,
    modification_of,
    verdict,
)

__all__ = [
    "DOC_TIMESTAMP", "FAILED", "FETCH_MODES", "INDETERMINATE", "MODIFICATIONS", "PASSED",
    "SIGNATURE", "SignatureReport", "VerifyOptions", "VerifyReport", "byte_range_fault", "level_of",
    "modification_of", "read_trust_roots", "verdict", "verify_bytes", "verify_file",
]


# --- entry points ---------------------------------------------------------------------


def read_trust_roots(paths: Iterable[Path]) -> tuple[bytes, ...]:
    """The DER certificates in PEM files (each may hold several). OSError when a file
    cannot be read; ValueError naming the file when it holds no certificate."""
    from cryptography import x509
    from cryptography.hazmat.primitives.serialization import Encoding

    out: list[bytes] = []
    for path in paths:
        data = Path(path).read_bytes()
        try:
            certs = x509.load_pem_x509_certificates(data)
        except ValueError as e:
            raise ValueError(f"{path}: no PEM certificate: {e}") from None
        out += [c.public_bytes(Encoding.DER) for c in certs]
    return tuple(out)


def verify_file(path: Path, options: VerifyOptions) -> VerifyReport:
    """Validate every signature of the PDF at ``path``. Raises MalformedPdf (or
    EncryptedPdf) when it cannot be read as a PDF, OSError when it cannot be read."""
    from casesignd.verify.document import verify_stream

    with open(path, "rb") as f:
        return verify_stream(f, options)


def verify_bytes(data: bytes, options: VerifyOptions) -> VerifyReport:
    """:func:`verify_file` for a document in memory (what a worker process is handed)."""
    import io

    from casesignd.verify.document import verify_stream

    return verify_stream(io.BytesIO(data), options)
