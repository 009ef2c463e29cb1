"""Test PKI, sample PDFs and independent validators (pyHanko, poppler pdfsig) for signing tests.

Import the ``pki`` fixture by name into a test module; everything is generated
under pytest's tmp paths.
"""

from __future__ import annotations

import datetime as dt
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from casesignd.ops import devpki
from casesignd.signing.keys import LocalSigner, load_pkcs12
from casesignd.signing.pades import Party, SignatureMeta

PASSWORD = b"test-password"


@dataclass
class Pki:
    ca: devpki.Identity
    rsa: devpki.Identity
    ec: devpki.Identity
    tsa: devpki.Identity
    dir: Path

    def pkcs12(self, kind: str) -> Path:
        """A 0600 PKCS#12 file for ``rsa`` or ``ec`` (written once)."""
        path = self.dir / f"{kind}.p12"
        if not path.exists():
            devpki.write_pkcs12(path, getattr(self, kind), PASSWORD)
        return path

    def signer(self, kind: str) -> LocalSigner:
        return load_pkcs12(self.pkcs12(kind), PASSWORD)  # type: ignore[return-value]

    @property
    def ca_pem(self) -> Path:
        path = self.dir / "ca.pem"
        if not path.exists():
            path.write_bytes(devpki.cert_pem(self.ca.cert))
        return path


def make_pki(directory: Path) -> Pki:
    ca = devpki.make_ca("casesignd test CA")
    return Pki(
        ca=ca,
        rsa=devpki.issue(ca, "casesignd test signer RSA", kind="rsa"),
        ec=devpki.issue(ca, "casesignd test signer EC", kind="ec"),
        tsa=devpki.make_tsa(ca, "casesignd test TSA"),
        dir=directory,
    )


@pytest.fixture(scope="session")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


def sample_meta(**kw: object) -> SignatureMeta:
    base: dict[str, object] = dict(
        signing_time=dt.datetime.now(dt.UTC).replace(microsecond=0),
        reason="contract signed",
        location="Testville",
        policy_version="contract-v1",
        case_id="MKT-2026-00042",
        parties=(Party("seller-881", "Acme Ltd", "seller"), Party("buyer-19", "J. Doe", "buyer")),
    )
    base.update(kw)
    return SignatureMeta(**base)  # type: ignore[arg-type]


# --- sample PDFs -------------------------------------------------------------------


def reportlab_pdf(path: Path, pages: int = 1, text: str = "casesignd test") -> Path:
    from reportlab.lib.pagesizes import A4
    from reportlab.pdfgen import canvas

    c = canvas.Canvas(str(path), pagesize=A4)
    for i in range(pages):
        c.drawString(72, 800, f"{text} page {i + 1}")
        c.showPage()
    c.save()
    return path


def qpdf(src: Path, dst: Path, *args: str) -> Path:
    subprocess.run(["qpdf", *args, str(src), str(dst)], check=True, timeout=60)
    return dst


def pdflatex_pdf(directory: Path) -> Path | None:
    if shutil.which("pdflatex") is None:
        return None
    tex = directory / "doc.tex"
    tex.write_text(
        "\\documentclass{article}\\begin{document}Hello \\LaTeX{} $e^{i\\pi}+1=0$"
        "\\newpage Second page\\end{document}\n"
    )
    subprocess.run(
        ["pdflatex", "-interaction=batchmode", "-halt-on-error", "doc.tex"],
        cwd=directory, check=True, timeout=120, capture_output=True,
    )
    return directory / "doc.pdf"


def sample_pdfs(directory: Path) -> dict[str, Path]:
    """A handful of producers and xref layouts, without the shared corpus."""
    directory.mkdir(parents=True, exist_ok=True)
    base = reportlab_pdf(directory / "reportlab.pdf", pages=3)
    out = {
        "reportlab": base,
        "xref_stream": qpdf(base, directory / "objstm.pdf", "--object-streams=generate"),
        "classic": qpdf(base, directory / "classic.pdf", "--object-streams=disable"),
        "no_final_eol": directory / "noeol.pdf",
        "hybrid": hybrid_pdf(directory / "hybrid.pdf"),
    }
    out["no_final_eol"].write_bytes(base.read_bytes().rstrip(b"\r\n"))
    tex_dir = directory / "tex"
    tex_dir.mkdir(exist_ok=True)
    try:
        tex = pdflatex_pdf(tex_dir)
    except subprocess.SubprocessError:
        tex = None
    if tex is not None:
        out["pdflatex"] = tex
    return out


# --- independent validators --------------------------------------------------------


def pyhanko_statuses(path: Path, trust: list[x509.Certificate]) -> list[object]:
    """pyHanko's validation status of every signature in ``path``, in file order."""
    from asn1crypto import x509 as ax509
    from pyhanko.pdf_utils.reader import PdfFileReader
    from pyhanko.sign.validation import validate_pdf_signature
    from pyhanko_certvalidator import ValidationContext

    roots = [
        ax509.Certificate.load(c.public_bytes(serialization.Encoding.DER)) for c in trust
    ]
    with open(path, "rb") as f:
        reader = PdfFileReader(f, strict=False)
        out = []
        for sig in reader.embedded_signatures:
            vc = ValidationContext(trust_roots=roots, allow_fetching=False)
            out.append(validate_pdf_signature(sig, vc))
        return out


def nss_db(directory: Path, ca: x509.Certificate) -> Path | None:
    """An NSS database trusting ``ca``, for ``pdfsig -nssdir``; None without certutil."""
    if shutil.which("certutil") is None:
        return None
    db = directory / "nssdb"
    if not db.exists():
        db.mkdir()
        subprocess.run(["certutil", "-N", "-d", f"sql:{db}", "--empty-password"], check=True, timeout=30)
        pem = directory / "nss-ca.pem"
        pem.write_bytes(devpki.cert_pem(ca))
        subprocess.run(
            ["certutil", "-A", "-d", f"sql:{db}", "-n", "test-ca", "-t", "CT,C,C", "-i", str(pem)],
            check=True, timeout=30,
        )
    return db


def pdfsig(path: Path, nssdir: Path | None = None) -> str:
    """poppler's pdfsig report of ``path`` (stdout)."""
    args = ["pdfsig"]
    if nssdir is not None:
        args += ["-nssdir", f"sql:{nssdir}"]
    proc = subprocess.run(
        [*args, str(path)], capture_output=True, text=True, timeout=60,
        env={**os.environ, "LC_ALL": "C"},
    )
    return proc.stdout + proc.stderr


def embedded_files(path: Path) -> dict[str, bytes]:
    """Attachments read back with pypdf: name -> bytes."""
    from pypdf import PdfReader

    with open(path, "rb") as f:
        reader = PdfReader(f)
        return {name: data[0] for name, data in reader.attachments.items()}


# --- SoftHSM2 -----------------------------------------------------------------------

SOFTHSM_MODULE = "/usr/lib/softhsm/libsofthsm2.so"
SOFTHSM_PIN = "1234"


@dataclass
class SoftHsm:
    module: str
    token_label: str
    pin: str
    conf: Path
    labels: dict[str, str]  # "rsa"/"ec" -> key label (certificate has the same label)


def make_softhsm(directory: Path, pki: Pki, token_label: str = "casesignd-test") -> SoftHsm:
    """A SoftHSM2 token in ``directory`` holding the RSA and EC test keys and certificates.

    Sets SOFTHSM2_CONF for this process: SoftHSM reads it once, when the module is
    first initialised, so one token directory serves a whole test session.
    """
    tokens = directory / "tokens"
    tokens.mkdir(parents=True, exist_ok=True)
    conf = directory / "softhsm2.conf"
    conf.write_text(f"directories.tokendir = {tokens}\nobjectstore.backend = file\nlog.level = ERROR\n")
    env = {**os.environ, "SOFTHSM2_CONF": str(conf)}
    run = lambda *cmd: subprocess.run(cmd, check=True, timeout=60, env=env, capture_output=True)  # noqa: E731
    run("softhsm2-util", "--init-token", "--free", "--label", token_label,
        "--so-pin", "000000", "--pin", SOFTHSM_PIN)
    labels = {}
    for i, kind in enumerate(("rsa", "ec"), start=1):
        ident: devpki.Identity = getattr(pki, kind)
        label, key_id = f"sign-{kind}", f"{i:02x}"
        key_file = directory / f"{kind}-key.pem"
        key_file.write_bytes(devpki.key_pem(ident.key))
        key_file.chmod(0o600)
        run("softhsm2-util", "--import", str(key_file), "--token", token_label,
            "--label", label, "--id", key_id, "--pin", SOFTHSM_PIN)
        key_file.unlink()
        cert_file = directory / f"{kind}-cert.der"
        cert_file.write_bytes(ident.cert.public_bytes(serialization.Encoding.DER))
        run("pkcs11-tool", "--module", SOFTHSM_MODULE, "--token-label", token_label,
            "--login", "--pin", SOFTHSM_PIN, "--write-object", str(cert_file),
            "--type", "cert", "--label", label, "--id", key_id)
        labels[kind] = label
    os.environ["SOFTHSM2_CONF"] = str(conf)
    return SoftHsm(SOFTHSM_MODULE, token_label, SOFTHSM_PIN, conf, labels)


@pytest.fixture(scope="session")
def softhsm(pki: Pki, tmp_path_factory: pytest.TempPathFactory) -> object:
    if not Path(SOFTHSM_MODULE).exists() or shutil.which("softhsm2-util") is None:
        pytest.skip("SoftHSM2 is not installed")
    if shutil.which("pkcs11-tool") is None:
        pytest.skip("pkcs11-tool (opensc) is not installed")
    saved = os.environ.get("SOFTHSM2_CONF")
    yield make_softhsm(tmp_path_factory.mktemp("softhsm"), pki)
    if saved is None:
        os.environ.pop("SOFTHSM2_CONF", None)
    else:
        os.environ["SOFTHSM2_CONF"] = saved


def big_pdf(path: Path, payload_bytes: int) -> Path:
    """A one-page PDF carrying an incompressible image of about ``payload_bytes``.

    Written in 1 MiB chunks so that making a 200 MB test file costs no memory.
    The image is a /DCTDecode-free raw RGB XObject drawn on the page, so readers
    must treat it as content, not as an orphan.
    """
    side = max(1, int((payload_bytes / 3) ** 0.5))
    length = side * side * 3
    content = b"q 500 0 0 500 50 200 cm /Im1 Do Q"
    offsets = []
    with open(path, "wb") as f:
        f.write(b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n")

        def obj(body: bytes) -> None:
            offsets.append(f.tell())
            f.write(b"%d 0 obj\n" % len(offsets) + body + b"\nendobj\n")

        obj(b"<< /Type /Catalog /Pages 2 0 R >>")
        obj(b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>")
        obj(b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 595 842] /Contents 4 0 R"
            b" /Resources << /XObject << /Im1 5 0 R >> >> >>")
        obj(b"<< /Length %d >>\nstream\n" % len(content) + content + b"\nendstream")
        offsets.append(f.tell())
        f.write(b"5 0 obj\n<< /Type /XObject /Subtype /Image /Width %d /Height %d"
                b" /ColorSpace /DeviceRGB /BitsPerComponent 8 /Length %d >>\nstream\n"
                % (side, side, length))
        left = length
        while left:
            n = min(left, 1 << 20)
            f.write(os.urandom(n))
            left -= n
        f.write(b"\nendstream\nendobj\n")
        xref_at = f.tell()
        f.write(b"xref\n0 %d\n0000000000 65535 f\r\n" % (len(offsets) + 1))
        for off in offsets:
            f.write(b"%010d 00000 n\r\n" % off)
        f.write(b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n"
                % (len(offsets) + 1, xref_at))
    return path


def hybrid_pdf(path: Path) -> Path:
    """A hybrid-reference file (PDF 32000-1 §7.5.8.4): a classic table whose trailer
    points with /XRefStm to an xref stream listing an object kept in an object stream."""
    content = b"BT /F1 24 Tf 20 100 Td (hybrid reference) Tj ET"
    font = b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>"
    header = b"5 0 "
    out = bytearray(b"%PDF-1.5\n%\xe2\xe3\xcf\xd3\n")
    offsets: dict[int, int] = {}

    def obj(num: int, body: bytes) -> None:
        offsets[num] = len(out)
        out.extend(b"%d 0 obj\n" % num + body + b"\nendobj\n")

    obj(1, b"<< /Type /Catalog /Pages 2 0 R >>")
    obj(2, b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>")
    obj(3, b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 300 200] /Contents 4 0 R"
           b" /Resources << /Font << /F1 5 0 R >> >> >>")
    obj(4, b"<< /Length %d >>\nstream\n" % len(content) + content + b"\nendstream")
    objstm = header + font
    obj(6, b"<< /Type /ObjStm /N 1 /First %d /Length %d >>\nstream\n" % (len(header), len(objstm))
        + objstm + b"\nendstream")
    row = b"\x02" + (6).to_bytes(4, "big") + (0).to_bytes(2, "big")  # object 5: in stream 6, index 0
    obj(7, b"<< /Type /XRef /Size 8 /W [1 4 2] /Index [5 1] /Length %d >>\nstream\n" % len(row)
        + row + b"\nendstream")
    xref_at = len(out)
    out.extend(b"xref\n0 5\n0000000000 65535 f\r\n")
    for n in range(1, 5):
        out.extend(b"%010d 00000 n\r\n" % offsets[n])
    out.extend(b"6 2\n%010d 00000 n\r\n%010d 00000 n\r\n" % (offsets[6], offsets[7]))
    out.extend(b"trailer\n<< /Size 8 /Root 1 0 R /XRefStm %d >>\nstartxref\n%d\n%%%%EOF\n"
               % (offsets[7], xref_at))
    path.write_bytes(bytes(out))
    return path
