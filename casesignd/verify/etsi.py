"""The validation report in the ETSI TS 119 102-2 format (v1.2.1, namespace
``http://uri.etsi.org/19102/v1.2.1#``): the document a regulator or an auditor files,
for ``casesignd verify --report etsi`` and ``POST /v1/verify`` with ``Accept:
application/xml``.

One ``SignatureValidationReport`` per signature and document timestamp, in signing
order (§4.3), each with:

- ``SignatureIdentifier`` (§4.3.2): the signature field's name as ``DAIdentifier``;
- ``ValidationTimeInfo`` (§4.3.4): when it was validated, and the best signature time
  (the validated timestamp's time, else the validation time);
- ``SignatureAttributes`` (§4.3.6, A.2): the signing time the signer claims;
- ``SignatureValidationStatus`` (§4.3.10): the main indication and sub-indication as
  the URIs of §5.1 and §5.2, and the report's problems as ``ReportData``;
- after it, in casesignd's own namespace (the schema's extension point ``xs:any``):
  intact, valid, trusted, revoked, level, modification, signer, and the document's
  findings.

The schema wants at least one ``SignatureValidationReport``: a document without
signatures has no ETSI report (:class:`NoSignatures`). Nothing here reads the PDF;
it is built from :class:`casesignd.verify.report.VerifyReport`.
"""

from __future__ import annotations

import datetime as dt
import xml.etree.ElementTree as ET

from casesignd.core.errors import PermanentJobError
from casesignd.verify.report import DOC_TIMESTAMP, SignatureReport, VerifyReport

VR = "http://uri.etsi.org/19102/v1.2.1#"
CS = "urn:casesignd:verify:1"
_MAIN = {"TOTAL-PASSED": "total-passed", "TOTAL-FAILED": "total-failed",
         "INDETERMINATE": "indeterminate"}
_PROBLEM = "urn:casesignd:verify:problem"
_FINDING = "urn:casesignd:verify:finding"
MEDIA_TYPE = "application/xml"


class NoSignatures(PermanentJobError):
    """The ETSI report has at least one signature's report; the document has none."""


def etsi_report(report: VerifyReport, validated_at: dt.datetime | None = None) -> bytes:
    """``report`` as an ETSI TS 119 102-2 ``ValidationReport``, UTF-8 XML."""
    if not report.signatures:
        raise NoSignatures("the document carries no signature, and an ETSI TS 119 102-2 "
                           "report describes at least one")
    when = _xml_time(validated_at or dt.datetime.now(dt.UTC))
    ET.register_namespace("vr", VR)
    ET.register_namespace("cs", CS)
    root = ET.Element(_vr("ValidationReport"))
    for i, sig in enumerate(report.signatures, 1):
        _signature(root, i, sig, when, report.findings)
    return ET.tostring(root, encoding="utf-8", xml_declaration=True)


def _signature(root: ET.Element, i: int, sig: SignatureReport, when: str,
               findings: tuple[str, ...]) -> None:
    svr = ET.SubElement(root, _vr("SignatureValidationReport"))
    ident = ET.SubElement(svr, _vr("SignatureIdentifier"), {"id": f"sig-{i}"})
    _text(ident, "HashOnly", "false")
    _text(ident, "DocHashOnly", "false")
    _text(ident, "DAIdentifier", sig.field)
    times = ET.SubElement(svr, _vr("ValidationTimeInfo"))
    _text(times, "ValidationTime", when)
    best = ET.SubElement(times, _vr("BestSignatureTime"))
    _text(best, "POETime", _xml_time(sig.timestamp_time) if sig.timestamp_time else when)
    _text(best, "TypeOfProof", "urn:etsi:019102:poetype:validation")
    if sig.signing_time is not None and sig.kind != DOC_TIMESTAMP:
        attrs = ET.SubElement(svr, _vr("SignatureAttributes"))
        signing = ET.SubElement(attrs, _vr("SigningTime"), {"Signed": "true"})
        _text(signing, "Time", _xml_time(sig.signing_time))
    status = ET.SubElement(svr, _vr("SignatureValidationStatus"))
    _text(status, "MainIndication", f"urn:etsi:019102:mainindication:{_MAIN[sig.indication]}")
    if sig.sub_indication:
        _text(status, "SubIndication", f"urn:etsi:019102:subindication:{sig.sub_indication}")
    words = [(_PROBLEM, p) for p in sig.problems] + [(_FINDING, f) for f in findings]
    if words:
        data = ET.SubElement(ET.SubElement(status, _vr("AssociatedValidationReportData")),
                             _vr("AdditionalValidationReportData"))
        for kind, text in words:
            item = ET.SubElement(data, _vr("ReportData"))
            _text(item, "Type", kind)
            _text(item, "Value", text)
    ours = ET.SubElement(svr, f"{{{CS}}}Verdict", {"kind": sig.kind})
    for key in ("intact", "valid", "trusted", "revoked", "level", "modification", "signer"):
        value = getattr(sig, key)
        el = ET.SubElement(ours, f"{{{CS}}}{key}")
        if value is None:
            el.set("null", "true")
        else:
            el.text = str(value).lower() if isinstance(value, bool) else str(value)


def _vr(name: str) -> str:
    return f"{{{VR}}}{name}"


def _text(parent: ET.Element, name: str, text: str) -> ET.Element:
    el = ET.SubElement(parent, _vr(name))
    el.text = _xml_safe(text)
    return el


def _xml_safe(text: str) -> str:
    """XML 1.0 has no place for most control characters (§2.2): a problem quoting a
    PDF name may carry one."""
    return "".join(c if c in "\t\n\r" or (" " <= c <= "\ud7ff") or ("\ue000" <= c <= "\ufffd")
                   or c >= "\U00010000" else "\ufffd" for c in text)


def _xml_time(when: dt.datetime) -> str:
    when = when if when.tzinfo else when.replace(tzinfo=dt.UTC)
    return when.astimezone(dt.UTC).isoformat().replace("+00:00", "Z")
