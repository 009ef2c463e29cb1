"""render_invoice through the daemon: signed invoices validate like case packets (a
policy's stamp and certification included), and bad orders are refused at ingress
with their field, queueing nothing."""

from __future__ import annotations

import subprocess

import pytest
from cryptography import x509

from tests.helpers_ltv import ltv_pki
from tests.helpers_pki import nss_db, pdfsig, pyhanko_statuses

__all__ = ["ltv_pki"]  # fixture

ORDER = {"order_id": "EDU-1042", "student_name": "Avery Chen", "currency": "USD",
         "items": [{"description": "Lab course", "quantity": 2, "unit_price": "49.00"},
                   {"description": "Field trip", "quantity": 1, "unit_price": "0.00"}]}


def test_a_signed_invoice_validates_with_pyhanko_and_pdfsig(daemon, tmp_path):
    r = daemon.submit({"kind": "render_invoice", "template_version": "invoice-v3", "sign": True,
                       "order": ORDER})
    assert r.status == 202, r.body
    job = daemon.wait_job(r.json()["job_id"])
    assert job["state"] == "ready", job
    pdf = daemon.request("GET", job["result"]["download_url"], auth=False)
    assert pdf.status == 200
    out = tmp_path / "invoice.pdf"
    out.write_bytes(pdf.body)
    ca = x509.load_pem_x509_certificate((daemon.dir / "ca.pem").read_bytes())
    statuses = pyhanko_statuses(out, [ca])
    assert len(statuses) == 1
    from pyhanko.sign.validation.status import SignatureCoverageLevel
    st = statuses[0]
    assert st.intact and st.valid and st.trusted and st.coverage == SignatureCoverageLevel.ENTIRE_FILE
    assert "Signature is Valid" in pdfsig(out, nss_db(tmp_path, ca))
    text = subprocess.run(["pdftotext", str(out), "-"], capture_output=True, text=True,
                          timeout=60).stdout
    assert "EDU-1042" in text and "Avery Chen" in text and "98.00" in text


def test_an_unsigned_invoice_has_no_signature_and_replays_as_the_same_job(daemon, tmp_path):
    body = {"kind": "render_invoice", "order": ORDER}
    first = daemon.submit(body, key="inv-1")
    again = daemon.submit(body, key="inv-1")
    assert (first.status, again.status) == (202, 200)
    job = daemon.wait_job(first.json()["job_id"])
    assert job["state"] == "ready" and job["version"] == "invoice-v3"
    out = tmp_path / "i.pdf"
    out.write_bytes(daemon.request("GET", job["result"]["download_url"], auth=False).body)
    assert pyhanko_statuses(out, []) == []


@pytest.mark.parametrize("mutate,field,code", [
    (lambda o: o["items"][0].update(quantity=-1), "order.items[0].quantity", None),
    (lambda o: o["items"][0].update(unit_price="12,50"), "order.items[0].unit_price", "invalid_amount"),
    (lambda o: o.update(currency="XYZ"), "order.currency", "unsupported_currency"),
    (lambda o: o.update(items=[]), "order.items", None),
    (lambda o: o.update(items=[{"description": "x", "quantity": 1, "unit_price": "1.00"}] * 100_000),
     "order.items", None),
    (lambda o: o.update(student_name="Avery\x07Chen"), "order.student_name", None),
])
def test_bad_orders_are_refused_at_ingress_with_their_field(daemon, mutate, field, code):
    import copy
    order = copy.deepcopy(ORDER)
    mutate(order)
    r = daemon.submit({"kind": "render_invoice", "order": order})
    assert r.status in (413, 422), r.body[:300]
    if r.status == 422:
        err = r.json()["error"]
        assert err["field"] == field, err
        if code:
            assert err["code"] == code
    assert daemon.request("GET", "/v1/jobs").json()["jobs"] == []




def test_a_signed_invoice_carries_the_policys_stamp_in_its_box(daemon_factory, tmp_path):
    from tests.integration.test_pades_stamp import _inside, _words

    box = (36.0, 36.0, 236.0, 96.0)  # the policy's default box, on page 1
    d = daemon_factory({"policies": [{"version": "contract-v1", "appearance": "visible",
                                      "reason": "Billing"}]})
    r = d.submit({"kind": "render_invoice", "template_version": "invoice-v3", "sign": True,
                  "order": ORDER})
    job = d.wait_job(r.json()["job_id"])
    assert job["state"] == "ready", job
    out = tmp_path / "invoice.pdf"
    out.write_bytes(d.request("GET", job["result"]["download_url"], auth=False).body)
    ca = x509.load_pem_x509_certificate((d.dir / "ca.pem").read_bytes())
    (st,) = pyhanko_statuses(out, [ca])
    assert st.bottom_line
    assert "Signature is Valid" in pdfsig(out, nss_db(tmp_path, ca))
    inside = [w[0] for w in _words(out, 1) if _inside(w, box)]
    assert {"Signed", "EDU-1042", "contract-v1"} <= set(inside), inside
    unsigned = tmp_path / "unsigned.pdf"
    r = d.submit({"kind": "render_invoice", "template_version": "invoice-v3", "order": ORDER})
    plain = d.wait_job(r.json()["job_id"])
    unsigned.write_bytes(d.request("GET", plain["result"]["download_url"], auth=False).body)
    assert not [w for w in _words(unsigned, 1) if _inside(w, box)]  # the stamp covers nothing


def _signed_invoice(d, tmp_path, name: str = "invoice.pdf"):
    r = d.submit({"kind": "render_invoice", "template_version": "invoice-v3", "sign": True,
                  "order": ORDER})
    assert r.status == 202, r.body
    job = d.wait_job(r.json()["job_id"], timeout_s=60)
    assert job["state"] == "ready", job
    out = tmp_path / name
    out.write_bytes(d.request("GET", job["result"]["download_url"], auth=False).body)
    return out


def _docmdp(out) -> tuple[int | None, list[int]]:
    """pyHanko's DocMDP level of the document's first signature, and the permissions
    of the DocMDP transforms the catalog's /Perms names (PDF 32000-1 §12.8.2.2)."""
    from pyhanko.pdf_utils.reader import PdfFileReader
    from pypdf import PdfReader

    with open(out, "rb") as f:
        first = PdfFileReader(f, strict=False).embedded_signatures[0]
        level = None if first.docmdp_level is None else int(first.docmdp_level.value)
    root = PdfReader(out).trailer["/Root"]
    if "/Perms" not in root:
        return level, []
    sig = root["/Perms"]["/DocMDP"].get_object()
    return level, [r.get_object()["/TransformParams"]["/P"] for r in sig["/Reference"]
                   if r.get_object()["/TransformMethod"] == "/DocMDP"]


@pytest.mark.parametrize(("certify", "p"), [("no_changes", 1), ("form_filling", 2), ("", None)])
def test_a_signed_invoice_is_certified_as_its_policy_certifies(daemon_factory, tmp_path,
                                                              certify, p):
    d = daemon_factory({"policies": [{"version": "contract-v1", "certify": certify}]})
    out = _signed_invoice(d, tmp_path)
    ca = x509.load_pem_x509_certificate((d.dir / "ca.pem").read_bytes())
    (st,) = pyhanko_statuses(out, [ca])
    assert st.bottom_line and st.docmdp_ok, st
    assert _docmdp(out) == (p, [] if p is None else [p])
    assert "Signature is Valid" in pdfsig(out, nss_db(tmp_path, ca))


def test_a_certified_invoice_at_b_lta_keeps_its_certification_valid(daemon_factory, ltv_pki,
                                                                     tmp_path):
    from pyhanko.sign.diff_analysis import ModificationLevel

    from tests.integration.test_levels_http import assert_b_lta

    config = ltv_pki.casesignd_config("signer", level="B-LTA")
    config["policies"][0]["certify"] = "no_changes"
    out = _signed_invoice(daemon_factory(config), tmp_path, "lta.pdf")
    # The DSS and the document timestamp after the P=1 certification are the
    # service's long-term updates, which DocMDP's validators accept (docs/signing.md).
    assert_b_lta(ltv_pki, out.read_bytes(), tmp_path)
    assert _docmdp(out) == (1, [1])
    from pyhanko.pdf_utils.reader import PdfFileReader
    from pyhanko.sign.validation import validate_pdf_signature
    from pyhanko_certvalidator import ValidationContext

    with open(out, "rb") as f:
        signature = PdfFileReader(f, strict=False).embedded_signatures[0]
        first = validate_pdf_signature(signature, ValidationContext(
            trust_roots=[ltv_pki.root_asn1], allow_fetching=False))
    assert first.bottom_line and first.docmdp_ok, first
    assert first.modification_level == ModificationLevel.LTA_UPDATES
