"""Large packets: signing memory does not grow with the document size."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization

from casesignd.verify.validate import VerifyOptions, verify_file
from tests.helpers_pki import Pki, big_pdf, nss_db, pdfsig, pki

__all__ = ["pki"]  # fixtures

MB = 1000 * 1000

_CHILD = """
import json, resource, sys
from pathlib import Path
from casesignd.signing import pades, pipeline
from casesignd.signing.keys import load_pkcs12
from tests.helpers_pki import PASSWORD, sample_meta
src, dst, p12, att = map(Path, sys.argv[1:5])
signer = load_pkcs12(p12, PASSWORD)
attachments = [pades.Attachment(att, "evidence.bin", "application/octet-stream")]
pipeline.sign_file(src, dst, signer, meta=sample_meta(), attachments=attachments)
# VmHWM belongs to this process image; ru_maxrss can carry the parent's peak over
# fork+exec (Linux keeps it in the signal struct), which pytest's size would skew.
hwm = [int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM:")]
print(json.dumps({"maxrss_kib": min(hwm + [resource.getrusage(resource.RUSAGE_SELF).ru_maxrss])}))
"""


def _sign_in_child(src: Path, dst: Path, pki: Pki, att: Path) -> int:
    proc = subprocess.run(
        [sys.executable, "-c", _CHILD, str(src), str(dst), str(pki.pkcs12("rsa")), str(att)],
        capture_output=True, text=True, timeout=300, cwd=Path(__file__).resolve().parents[2],
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])["maxrss_kib"]


@pytest.mark.slow
def test_peak_memory_does_not_grow_with_size(pki: Pki, tmp_path: Path) -> None:
    rss = {}
    for size_mb in (20, 200):
        src = big_pdf(tmp_path / f"src-{size_mb}.pdf", size_mb * MB)
        att = tmp_path / f"att-{size_mb}.bin"
        with open(att, "wb") as f:  # an attachment a tenth of the document, streamed too
            f.truncate(size_mb * MB // 10)
        dst = tmp_path / f"signed-{size_mb}.pdf"
        rss[size_mb] = _sign_in_child(src, dst, pki, att)
        anchor = pki.ca.cert.public_bytes(serialization.Encoding.DER)
        report = verify_file(dst, VerifyOptions((anchor,), "never")).signatures[0]
        assert report.passed and report.modification == "none", report.describe()
        out = pdfsig(dst, nss_db(tmp_path, pki.ca.cert))
        assert "Signature is Valid" in out, out
        src.unlink()
        att.unlink()
        dst.unlink()
    print(f"peak RSS of the signing process: {rss} KiB")
    # Ten times the bytes, (almost) the same peak: nothing is read whole.
    assert rss[200] - rss[20] < 16 * 1024, rss
    assert rss[200] < 100 * 1024, rss
