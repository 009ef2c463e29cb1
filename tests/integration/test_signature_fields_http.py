"""A request that names the document's own signature field, on a real daemon: the
batch job signs "Seller", the kiosk then signs "Buyer" in the result, and a field
that is missing or signed is refused with its code, reason and where."""

from __future__ import annotations

import io
from pathlib import Path

from cryptography import x509
from pyhanko.sign.diff_analysis import ModificationLevel

from tests.daemon import multipart
from tests.helpers_ops import upload
from tests.helpers_pki import nss_db, pdfsig, pyhanko_statuses
from tests.integration.test_pades_fields import pyhanko_fields
from tests.integration.test_sign_case_http import manifest

SIGNERS = [{"id": "kiosk-7", "name": "Front Desk", "role": "clerk"}]


def _kiosk(d, document: bytes, case_id: str, **extra):
    body, ctype = multipart({"case_id": case_id, "signers": SIGNERS, **extra}, document)
    return d.request("POST", "/v1/sign", raw=body, headers={"Content-Type": ctype}, timeout_s=60)


def _job(d, case_id: str, document: bytes, field: str) -> dict:
    m = manifest(case_id, upload(d, case_id, document), [])
    if field:
        m["signature"] = {"field": field}
    r = d.submit(m)
    assert r.status == 202, r.body
    return d.wait_job(r.json()["job_id"])


def test_the_job_signs_seller_and_the_kiosk_then_buyer(daemon, tmp_path: Path) -> None:
    d = daemon
    src = pyhanko_fields(tmp_path / "fields.pdf").read_bytes()
    job = _job(d, "FIELDS-1", src, "Seller")
    assert job["state"] == "ready", job
    (signed,) = [e for e in d.events(job["job_id"]) if e["type"] == "signed"]
    assert signed["detail"]["placement"] == {"field": "Seller", "visible": False}
    seller = d.request("GET", job["result"]["download_url"], auth=False).body
    r = _kiosk(d, seller, "FIELDS-1", signature={"field": "Buyer"})
    assert r.status == 200, r.body[:300]
    out = tmp_path / "both.pdf"
    out.write_bytes(r.body)
    ca = x509.load_pem_x509_certificate((d.dir / "ca.pem").read_bytes())
    first, second = pyhanko_statuses(out, [ca])
    assert first.bottom_line and second.bottom_line
    assert first.docmdp_ok and first.modification_level <= ModificationLevel.FORM_FILLING
    assert pdfsig(out, nss_db(tmp_path, ca)).count("Signature is Valid") == 2
    verify = d.cli("verify", str(out), "--trust", str(d.dir / "ca.pem"))
    assert verify.returncode == 0, verify.stdout + verify.stderr
    # Another field is another signature: the same case and document into "Buyer"
    # is not the recorded "Seller" one.
    again = _job(d, "FIELDS-1", src, "Buyer")
    assert again["state"] == "ready" and again["result"]["sha256"] != job["result"]["sha256"]


def test_a_missing_or_signed_field_is_refused_through_the_job_and_the_kiosk(
    daemon, tmp_path: Path
) -> None:
    d = daemon
    src = pyhanko_fields(tmp_path / "fields.pdf").read_bytes()
    job = _job(d, "FIELDS-2", src, "Witness")
    assert job["state"] == "failed", job
    err = job["error"]
    assert err["code"] == "signature_field_not_found" and err["category"] == "permanent_input"
    assert err["reason"] == "signature_field_not_found" and err["where"] == {"field": "Witness"}
    seller = _kiosk(d, src, "FIELDS-3", signature={"field": "Seller"})
    assert seller.status == 200, seller.body[:300]
    twice = _kiosk(d, seller.body, "FIELDS-3", signature={"field": "Seller"})
    assert twice.status == 422, twice.body[:300]
    err = twice.json()["error"]
    assert err["code"] == "signature_field_already_signed" and err["where"] == {"field": "Seller"}


def test_admission_checks_the_signature_objects_shape(daemon, tmp_path: Path) -> None:
    src = pyhanko_fields(tmp_path / "fields.pdf").read_bytes()
    for signature, field in (({"field": 3}, "signature.field"), ({}, "signature.field"),
                             ({"field": "Buyer", "colour": "red"}, "signature"),
                             ("Buyer", "signature")):
        r = _kiosk(daemon, src, "FIELDS-4", signature=signature)
        assert r.status == 422, r.body[:300]
        assert r.json()["error"]["field"] == field, (signature, r.body[:300])
        assert b"colour" not in r.body  # an unknown key is counted, never quoted
    assert daemon.request("GET", "/v1/jobs").json()["jobs"] == []


def test_a_visible_policy_stamps_the_kiosk_and_the_jobs_signature(daemon_factory, tmp_path: Path) -> None:
    from tests.helpers_pki import reportlab_pdf
    from tests.integration.test_pades_stamp import _inside, _words

    d = daemon_factory({"policies": [{"version": "contract-v1", "appearance": "visible",
                                      "signature_page": -1,
                                      "signature_box": [300, 40, 540, 110]}]})
    doc = reportlab_pdf(tmp_path / "doc.pdf", pages=2).read_bytes()
    # The policy's default place: the last page's box.
    r = _kiosk(d, doc, "STAMP-1")
    assert r.status == 200, r.body[:300]
    out = tmp_path / "default.pdf"
    out.write_bytes(r.body)
    words = [w for w in _words(out, 2) if _inside(w, (300, 40, 540, 110))]
    assert {"Signed", "Front", "Desk", "(clerk)", "contract-v1"} <= {w[0] for w in words}, words
    assert "casesignd" in " ".join(w[0] for w in words)  # the certificate's subject
    ca = x509.load_pem_x509_certificate((d.dir / "ca.pem").read_bytes())
    (status,) = pyhanko_statuses(out, [ca])
    assert status.bottom_line
    # A request's own page and box, through a job.
    job = _job(d, "STAMP-2", doc, "ignored")  # a field: the job fails, there is none
    assert job["error"]["code"] == "signature_field_not_found"
    m = {**manifest("STAMP-3", upload(d, "STAMP-3", doc), []),
         "signature": {"page": 1, "box": [72, 600, 300, 680]}}
    ready = d.wait_job(d.submit(m).json()["job_id"])
    assert ready["state"] == "ready", ready
    got = tmp_path / "job.pdf"
    got.write_bytes(d.request("GET", ready["result"]["download_url"], auth=False).body)
    assert any(w[0] == "Signed" and _inside(w, (72, 600, 300, 680)) for w in _words(got, 1))
    # A box off the page fails the job with its code, before the key is used.
    off = {**manifest("STAMP-4", upload(d, "STAMP-4", doc), []),
           "signature": {"page": -1, "box": [500, 40, 900, 110]}}
    failed = d.wait_job(d.submit(off).json()["job_id"])
    assert failed["error"]["code"] == "signature_box_off_page", failed
    assert failed["error"]["where"] == {"page": 2}
    assert "signed" not in [e["type"] for e in d.events(failed["job_id"])]


def test_an_invisible_policy_allows_no_box(daemon, tmp_path: Path) -> None:
    src = pyhanko_fields(tmp_path / "fields.pdf").read_bytes()
    r = _kiosk(daemon, src, "STAMP-5", signature={"page": 1, "box": [72, 72, 200, 120]})
    assert r.status == 422 and r.json()["error"]["field"] == "signature.box", r.body[:300]


def test_a_certifying_policy_refuses_a_signed_document_through_the_job_and_the_kiosk(
    daemon_factory, tmp_path: Path
) -> None:
    from tests.helpers_pki import reportlab_pdf

    d = daemon_factory({"policies": [{"version": "contract-v1", "certify": "form_filling"}]})
    doc = reportlab_pdf(tmp_path / "doc.pdf").read_bytes()
    first = _kiosk(d, doc, "CERT-1")
    assert first.status == 200, first.body[:300]
    again = _kiosk(d, first.body, "CERT-2")
    assert again.status == 422 and again.json()["error"]["code"] == "certification_not_first"
    m = manifest("CERT-3", upload(d, "CERT-3", first.body), [])
    job = d.wait_job(d.submit(m).json()["job_id"])
    assert job["error"]["code"] == "certification_not_first", job
    assert "signed" not in [e["type"] for e in d.events(job["job_id"])]


def test_the_command_line_names_the_field_or_the_box(daemon_factory, tmp_path: Path) -> None:
    d = daemon_factory({"policies": [{"version": "contract-v1", "appearance": "visible"}]})
    src = pyhanko_fields(tmp_path / "fields.pdf")
    out = tmp_path / "seller.pdf"
    ok = d.cli("sign", str(src), "--case", "CLI-F1", "--field", "Seller", "-o", str(out))
    assert ok.returncode == 0, ok.stdout + ok.stderr
    from tests.integration.test_pades_fields import SELLER_BOX
    from tests.integration.test_pades_stamp import _inside, _words

    assert any(w[0] == "Signed" and _inside(w, SELLER_BOX) for w in _words(out, 1))
    missing = d.cli("sign", str(src), "--case", "CLI-F2", "--field", "Witness")
    assert missing.returncode == 1 and "signature_field_not_found" in missing.stdout + missing.stderr
    off = d.cli("sign", str(src), "--case", "CLI-F3", "--visible", "1:500,40,900,110")
    assert off.returncode == 1 and "signature_box_off_page" in off.stdout + off.stderr
    bad = d.cli("sign", str(src), "--case", "CLI-F4", "--visible", "1:500,40")
    assert bad.returncode == 2 and "PAGE:X1,Y1,X2,Y2" in bad.stderr
    packet = tmp_path / "packet.pdf"
    case = d.cli("case", "sign", str(src), "--case", "CLI-F5", "--field", "Buyer", "--wait",
                 "-o", str(packet))
    assert case.returncode == 0, case.stdout + case.stderr
    assert any(w[0] == "Signed" and _inside(w, (320, 100, 520, 160)) for w in _words(packet, 1))
    signed = d.cli("case", "sign", str(out), "--case", "CLI-F6", "--field", "Seller", "--wait")
    assert signed.returncode == 1
    assert "signature_field_already_signed" in signed.stdout + signed.stderr


def test_a_bare_visible_stamps_where_the_policy_says_and_an_invisible_policy_refuses_it(
    daemon_factory, tmp_path: Path
) -> None:
    from tests.helpers_pki import reportlab_pdf
    from tests.integration.test_pades_stamp import _inside, _words

    box = [300.0, 40.0, 540.0, 110.0]
    d = daemon_factory({"policies": [
        {"version": "contract-v1", "appearance": "visible", "signature_page": -1,
         "signature_box": box},
        {"version": "plain-v1"}]})
    src = reportlab_pdf(tmp_path / "doc.pdf", pages=2)
    kiosk, packet = tmp_path / "kiosk.pdf", tmp_path / "packet.pdf"
    ok = d.cli("sign", str(src), "--case", "BARE-1", "--visible", "-o", str(kiosk))
    assert ok.returncode == 0, ok.stdout + ok.stderr
    case = d.cli("case", "sign", str(src), "--case", "BARE-2", "--visible", "--wait",
                 "-o", str(packet))
    assert case.returncode == 0, case.stdout + case.stderr
    for out in (kiosk, packet):
        assert any(w[0] == "Signed" and _inside(w, box) for w in _words(out, 2)), out
        assert not any(w[0] == "Signed" for w in _words(out, 1))
    refused = d.cli("sign", str(src), "--case", "BARE-3", "--policy", "plain-v1", "--visible")
    assert refused.returncode == 1 and "signature.visible" in refused.stdout + refused.stderr
    before = d.cli("sign", "--visible", str(src), "--case", "BARE-4")
    assert before.returncode == 2 and "after the file" in before.stderr


def test_a_policy_with_stamp_logo_shows_the_tenants_logo_beside_the_words(
    daemon_factory, tmp_path: Path
) -> None:
    import subprocess

    from PIL import Image

    from tests.daemon import to_toml
    from tests.helpers_pki import reportlab_pdf
    from tests.integration.test_pades_stamp import _fractions, _inside, _unchanged_but, _words

    box = (300.0, 40.0, 540.0, 110.0)
    d = daemon_factory({"policies": [{"version": "contract-v1", "appearance": "visible",
                                      "stamp_logo": True, "signature_box": list(box)}]},
                       start=False)
    Image.new("RGB", (90, 30), (200, 0, 0)).save(d.dir / "school.png", format="PNG")
    d.config["invoice"] = {**d.config.get("invoice", {}), "logo": "school.png"}
    d.config_path.write_text(to_toml(d.config))
    d.start()
    src = reportlab_pdf(tmp_path / "doc.pdf")
    kiosk = _kiosk(d, src.read_bytes(), "LOGO-1")
    assert kiosk.status == 200, kiosk.body[:300]
    job = _job(d, "LOGO-2", src.read_bytes(), "")
    ca = x509.load_pem_x509_certificate((d.dir / "ca.pem").read_bytes())
    for name, data in (("kiosk", kiosk.body),
                       ("job", d.request("GET", job["result"]["download_url"], auth=False).body)):
        out = tmp_path / f"{name}.pdf"
        out.write_bytes(data)
        (status,) = pyhanko_statuses(out, [ca])
        assert status.bottom_line
        listed = subprocess.run(["pdfimages", "-list", str(out)], capture_output=True, text=True,
                                timeout=60, check=True).stdout.splitlines()[2:]
        assert [line.split()[3:5] for line in listed] == [["90", "30"]], listed
        words = [w for w in _words(out, 1) if _inside(w, box)]
        assert words and all(w[1] > box[0] + 80 for w in words)  # beside the logo
        # The logo's middle, drawn by poppler and MuPDF at 72 dpi: the logo's red.
        for argv in (["pdftoppm", "-r", "72", "-png", "-singlefile", str(out)],
                     ["mutool", "draw", "-q", "-r", "72", "-F", "png", "-o", "-", str(out), "1"]):
            png = subprocess.run(argv, capture_output=True, timeout=60, check=True).stdout
            with Image.open(io.BytesIO(png)) as page:
                red, green, _blue = page.convert("RGB").getpixel((343, page.height - 75))
            assert red > 150 and green < 60, (argv[0], red, green)
        _unchanged_but(src, out, 1, _fractions(box, (0.0, 0.0, 595.2756, 841.8898), 0))
