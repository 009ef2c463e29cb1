"""render_invoice through the daemon: signed invoices validate like case packets, and
bad orders are refused at ingress with their field, queueing nothing."""

from __future__ import annotations

import subprocess

import pytest
from cryptography import x509

from tests.helpers_pki import nss_db, pdfsig, pyhanko_statuses

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
