"""A PDF test corpus built at test time: real producers' output and hostile files.

``build_good_corpus(dest)`` makes PDFs that every part of the service must accept
(and the signer must sign): output of pdflatex, LibreOffice, Chromium, reportlab,
ImageMagick and Ghostscript, qpdf's cross-reference variants, an incrementally
updated file, a 100-page file and a file that already carries a signature. An entry
whose tool is missing is left out, so tests skip rather than fail on a thin machine.

``build_bad_corpus(dest)`` makes files that :func:`casesignd.pdf.inspect.inspect_pdf`
must refuse, each with the error code it must raise.

Both are cached: the first call for a ``dest`` builds, later calls (in this process,
or in another one after a ``manifest.json`` was written) return the same paths.
Callers pass a session directory from ``tmp_path_factory``; the fixtures
``good_corpus`` and ``bad_corpus`` below do exactly that.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import zlib
from collections.abc import Callable
from pathlib import Path

import pytest

TOOL_TIMEOUT_S = 180

# --- hand-assembled PDFs ----------------------------------------------------------


def assemble(objects: list[bytes], *, root: int = 1, trailer_extra: bytes = b"",
             version: bytes = b"1.7") -> bytes:
    """A PDF from object bodies (object ``i+1`` is ``objects[i]``) with a correct xref.

    The layout follows PDF 32000-1 §7.5: header, body, a classic cross-reference
    table of 20-byte entries (§7.5.4), trailer, ``startxref`` and ``%%EOF``.
    """
    out = bytearray(b"%PDF-" + version + b"\n%\xe2\xe3\xcf\xd3\n")
    offsets = []
    for i, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % i + body + b"\nendobj\n"
    xref_at = len(out)
    out += b"xref\n0 %d\n" % (len(objects) + 1)
    out += b"0000000000 65535 f\r\n"
    for off in offsets:
        out += b"%010d 00000 n\r\n" % off
    out += b"trailer\n<< /Size %d /Root %d 0 R %s>>\n" % (len(objects) + 1, root, trailer_extra)
    out += b"startxref\n%d\n%%%%EOF\n" % xref_at
    return bytes(out)


def stream(data: bytes, extra: bytes = b"") -> bytes:
    """A stream object body with a correct /Length (§7.3.8)."""
    return b"<< /Length %d %s>>\nstream\n" % (len(data), extra) + data + b"\nendstream"


_CONTENT = b"BT /F1 12 Tf 72 720 Td (casesignd test) Tj ET"


def _one_page(catalog_extra: bytes = b"", page_extra: bytes = b"",
              more: list[bytes] | None = None) -> bytes:
    """Catalog (1), Pages (2), Page (3), content (4), font (5), then ``more`` (6...)."""
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R " + catalog_extra + b">>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R "
        b"/Resources << /Font << /F1 5 0 R >> >> " + page_extra + b">>",
        stream(_CONTENT),
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    return assemble(objects + (more or []))


def _zeros_deflated(total_bytes: int, level: int = 9) -> bytes:
    # Streamed chunk by chunk so building the bomb never holds its inflated size.
    comp = zlib.compressobj(level)
    chunk = bytes(1 << 20)
    parts = []
    for _ in range(total_bytes // len(chunk)):
        parts.append(comp.compress(chunk))
    parts.append(comp.flush())
    return b"".join(parts)


def _png(width: int = 64, height: int = 48) -> bytes:
    """A small RGB gradient PNG (no image library needed)."""
    raw = b"".join(
        b"\x00" + b"".join(bytes((x * 4 % 256, y * 5 % 256, 128)) for x in range(width))
        for y in range(height)
    )

    def chunk(tag: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + tag + data + struct.pack(
            ">I", zlib.crc32(tag + data) & 0xFFFFFFFF)

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(raw))
            + chunk(b"IEND", b""))


def build_large_pdf(path: Path, total_bytes: int, image_bytes: int = 4 << 20) -> Path:
    """Write a PDF of about ``total_bytes``: one page per Flate image of ``image_bytes``
    random pixels (stored deflate blocks, so building is fast), written object by
    object so the builder's memory stays small. Real contracts reach 200 MB."""
    side = int((image_bytes // 3) ** 0.5)
    pixels = side * side * 3
    n = max(1, total_bytes // pixels)
    # Objects: 1 catalog, 2 pages, then per page i: page, content, image.
    offsets: list[int] = []
    content = b"q %d 0 0 %d 0 0 cm /Im0 Do Q" % (side, side)
    with open(path, "wb") as f:
        def obj(body: bytes, data: bytes | None = None) -> None:
            offsets.append(f.tell())
            f.write(b"%d 0 obj\n" % len(offsets) + body)
            if data is not None:
                f.write(b"\nstream\n")
                f.write(data)
                f.write(b"\nendstream")
            f.write(b"\nendobj\n")

        f.write(b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n")
        obj(b"<< /Type /Catalog /Pages 2 0 R >>")
        kids = b" ".join(b"%d 0 R" % (3 + 3 * i) for i in range(n))
        obj(b"<< /Type /Pages /Kids [%s] /Count %d >>" % (kids, n))
        for i in range(n):
            cont, img = 4 + 3 * i, 5 + 3 * i
            obj(b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 %d %d] /Contents %d 0 R "
                b"/Resources << /XObject << /Im0 %d 0 R >> >> >>" % (side, side, cont, img))
            obj(b"<< /Length %d >>" % len(content), content)
            data = zlib.compress(os.urandom(pixels), 0)
            obj(b"<< /Type /XObject /Subtype /Image /Width %d /Height %d /ColorSpace /DeviceRGB "
                b"/BitsPerComponent 8 /Filter /FlateDecode /Length %d >>"
                % (side, side, len(data)), data)
        xref_at = f.tell()
        f.write(b"xref\n0 %d\n0000000000 65535 f\r\n" % (len(offsets) + 1))
        f.write(b"".join(b"%010d 00000 n\r\n" % off for off in offsets))
        f.write(b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n"
                % (len(offsets) + 1, xref_at))
    return path


# --- good corpus --------------------------------------------------------------------


def _run(cmd: list[str], *, env: dict[str, str] | None = None, cwd: Path | None = None) -> None:
    subprocess.run(cmd, check=True, capture_output=True, timeout=TOOL_TIMEOUT_S,
                   env={**os.environ, **(env or {})}, cwd=cwd)


def _reportlab_plain(out: Path, pages: int = 2) -> None:
    from reportlab.lib.pagesizes import A4
    from reportlab.pdfgen import canvas

    c = canvas.Canvas(str(out), pagesize=A4)
    c.setTitle("casesignd test contract")
    for n in range(1, pages + 1):
        c.setFont("Helvetica", 12)
        c.drawString(72, 770, f"Contract MKT-2026-00042, page {n} of {pages}")
        for i in range(30):
            c.drawString(72, 740 - i * 20, f"Clause {n}.{i}: the parties agree to the terms.")
        c.showPage()
    c.save()


def _reportlab_form(out: Path) -> None:
    from reportlab.lib.pagesizes import A4
    from reportlab.pdfgen import canvas

    c = canvas.Canvas(str(out), pagesize=A4)
    c.drawString(72, 770, "Buyer name:")
    c.acroForm.textfield(name="buyer_name", x=160, y=760, width=200, height=20,
                         value="J. Doe", tooltip="Buyer name")
    c.showPage()
    c.save()


def _qpdf(src: Path, out: Path, *args: str) -> None:
    _run(["qpdf", *args, str(src), str(out)])


def _incremental(src: Path, out: Path) -> None:
    """Append one incremental update by hand (PDF 32000-1 §7.5.6): the original bytes
    stay a prefix, then a new Info object, an xref section for it and a trailer whose
    /Prev points at the previous cross-reference section."""
    from pypdf import PdfReader

    original = src.read_bytes()
    with open(src, "rb") as f:
        trailer = PdfReader(f).trailer
        size = int(trailer["/Size"])
        root = trailer.raw_get("/Root").idnum
    prev = int(original[original.rindex(b"startxref") + 9:].split()[0])
    body = bytearray(original if original.endswith(b"\n") else original + b"\n")
    info_at = len(body)
    body += b"%d 0 obj\n<< /Producer (casesignd corpus) /Subject (amended) >>\nendobj\n" % size
    xref_at = len(body)
    body += b"xref\n0 1\n0000000000 65535 f\r\n%d 1\n%010d 00000 n\r\n" % (size, info_at)
    body += b"trailer\n<< /Size %d /Root %d 0 R /Info %d 0 R /Prev %d >>\n" % (
        size + 1, root, size, prev)
    body += b"startxref\n%d\n%%%%EOF\n" % xref_at
    out.write_bytes(bytes(body))


def _incremental_pypdf(src: Path, out: Path) -> None:
    # pypdf's incremental writer: a producer real documents come from (its update is
    # an xref stream appended to a file with a classic xref table).
    from pypdf import PdfWriter

    writer = PdfWriter(str(src), incremental=True)
    writer.add_metadata({"/Subject": "amended by an incremental update"})
    with open(out, "wb") as g:
        writer.write(g)


def _pdflatex(work: Path, out: Path) -> None:
    (work / "figure.png").write_bytes(_png())
    (work / "doc.tex").write_text(r"""\documentclass{article}
\usepackage{graphicx}
\usepackage[colorlinks=true]{hyperref}
\title{Service agreement}\author{casesignd}
\begin{document}
\maketitle
\tableofcontents
\section{Terms}\label{terms}
See \url{https://example.org/terms} and section~\ref{annex}.
\begin{figure}[h]\centering\includegraphics[width=4cm]{figure.png}
\caption{A figure}\end{figure}
\section{Annex}\label{annex}
The parties sign below.
\end{document}
""")
    for _ in range(2):  # twice, so the table of contents and references resolve
        _run(["pdflatex", "-interaction=nonstopmode", "-halt-on-error", "doc.tex"], cwd=work)
    shutil.copyfile(work / "doc.pdf", out)


def libreoffice_html(work: Path, name: str, html: str) -> Path:
    """``html`` written to ``work/name.html`` and exported by LibreOffice Writer to
    ``work/name.pdf`` (returned), with a profile of its own under ``work``."""
    home = work / "home"
    home.mkdir(parents=True, exist_ok=True)
    (work / f"{name}.html").write_text(html)
    _run(["soffice", "--headless", "--norestore", f"-env:UserInstallation=file://{home}",
          "--convert-to", "pdf:writer_pdf_Export", "--outdir", str(work),
          str(work / f"{name}.html")], env={"HOME": str(home)})
    return work / f"{name}.pdf"


def _libreoffice(work: Path, out: Path) -> None:
    made = libreoffice_html(work, "letter", (
        "<html><body><h1>Offer letter</h1><p>Dear J. Doe, we are pleased ...</p>"
        "<table border=1><tr><td>Salary</td><td>1000</td></tr></table></body></html>"))
    shutil.copyfile(made, out)


def _chromium(work: Path, out: Path, exe: str) -> None:
    page = work / "page.html"
    page.write_text("<html><body><h1>Invoice</h1><p>Total: 49.00 USD</p></body></html>")
    _run([exe, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
          "--disable-background-networking", "--disable-component-update", "--disable-sync",
          f"--user-data-dir={work / 'profile'}", f"--print-to-pdf={out}",
          page.as_uri()], env={"HOME": str(work)})


_MAGICK_POLICY = """<policymap>
  <policy domain="coder" rights="read|write" pattern="PDF" />
</policymap>
"""


def _imagemagick(work: Path, out: Path, exe: str) -> None:
    # Debian's policy.xml forbids the PDF coder. Our own policy (MAGICK_CONFIGURE_PATH)
    # grants it where ImageMagick lets a user policy widen rights (ImageMagick 7);
    # ImageMagick 6 merges in the system policy, which still refuses, and the entry is
    # then reported missing rather than forced through another coder name.
    (work / "policy.xml").write_text(_MAGICK_POLICY)
    (work / "photo.png").write_bytes(_png(320, 240))
    env = {"MAGICK_CONFIGURE_PATH": str(work)}
    try:
        _run([exe, str(work / "photo.png"), f"PDF:{out}"], env=env)
    except subprocess.CalledProcessError:
        # ImageMagick 6 keeps the system policy's ban on the PDF coder (it guards
        # reading untrusted PDFs through Ghostscript). Writing a PDF from our own PNG
        # through the EPDF coder is the same writer, and the file is still
        # ImageMagick's output.
        _run([exe, str(work / "photo.png"), f"EPDF:{out}"], env=env)


def _ghostscript_pdfa(src: Path, out: Path) -> None:
    _run(["gs", "-dPDFA=2", "-dBATCH", "-dNOPAUSE", "-dSAFER", "-dQUIET",
          "-sColorConversionStrategy=RGB", "-dPDFACompatibilityPolicy=1",
          "-sDEVICE=pdfwrite", f"-sOutputFile={out}", str(src)])


def _signed(work: Path, src: Path, out: Path) -> None:
    from pyhanko.pdf_utils.incremental_writer import IncrementalPdfFileWriter
    from pyhanko.sign import signers

    from casesignd.ops import devpki

    ca = devpki.make_ca()
    ident = devpki.issue(ca, "corpus signer")
    p12 = work / "signer.p12"
    if p12.exists():
        p12.unlink()
    devpki.write_pkcs12(p12, ident, b"corpus")
    signer = signers.SimpleSigner.load_pkcs12(str(p12), passphrase=b"corpus")
    p12.unlink()  # the key lives only for this call
    (work / "ca.pem").write_bytes(devpki.cert_pem(ca.cert))
    with open(src, "rb") as f, open(out, "wb") as g:
        w = IncrementalPdfFileWriter(f, strict=False)
        signers.sign_pdf(w, signers.PdfSignatureMetadata(field_name="PriorSignature"),
                         signer=signer, output=g)


def _magick_exe() -> str | None:
    return shutil.which("magick") or shutil.which("convert")


def _chromium_exe() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if exe := shutil.which(name):
            return exe
    return None


def _good_recipes(dest: Path) -> list[tuple[str, str | None, Callable[[Path], None]]]:
    """(name, required tool or None, builder writing dest/name.pdf). Order matters:
    later entries derive from ``reportlab_plain``."""
    base = dest / "reportlab_plain.pdf"
    work = dest / "work"
    magick = _magick_exe()
    chromium = _chromium_exe()

    def sub(name: str) -> Path:
        d = work / name
        d.mkdir(parents=True, exist_ok=True)
        return d

    return [
        ("reportlab_plain", None, lambda o: _reportlab_plain(o)),
        ("reportlab_form", None, _reportlab_form),
        ("pages_100", None, lambda o: _reportlab_plain(o, pages=100)),
        ("incremental_update", None, lambda o: _incremental(base, o)),
        ("incremental_update_pypdf", None, lambda o: _incremental_pypdf(base, o)),
        ("qpdf_xref_table", "qpdf", lambda o: _qpdf(base, o, "--object-streams=disable")),
        ("qpdf_xref_stream", "qpdf", lambda o: _qpdf(base, o, "--object-streams=generate")),
        ("qpdf_linearized", "qpdf", lambda o: _qpdf(base, o, "--linearize")),
        ("already_signed", None, lambda o: _signed(sub("signed"), base, o)),
        ("pdflatex_hyperref", "pdflatex", lambda o: _pdflatex(sub("latex"), o)),
        ("libreoffice", "soffice", lambda o: _libreoffice(sub("soffice"), o)),
        ("chromium", chromium or "chromium", lambda o: _chromium(sub("chromium"), o, chromium or "")),
        ("imagemagick", magick or "convert", lambda o: _imagemagick(sub("magick"), o, magick or "")),
        ("ghostscript_pdfa2b", "gs", lambda o: _ghostscript_pdfa(base, o)),
    ]


# --- bad corpus ---------------------------------------------------------------------

_MZ_STUB = b"MZ\x90\x00\x03\x00\x00\x00\x04\x00\x00\x00\xff\xff" + bytes(50) + b"PE\x00\x00"


def _bad_recipes(dest: Path) -> list[tuple[str, str, str | None, Callable[[Path], None]]]:
    """(name, expected error code, required tool or None, builder)."""
    good = _one_page()

    def write(data: bytes) -> Callable[[Path], None]:
        return lambda o: o.write_bytes(data)

    def encrypted(o: Path) -> None:
        src = dest / "_plain.pdf"
        src.write_bytes(good)
        _run(["qpdf", "--encrypt", "user-pw", "owner-pw", "256", "--", str(src), str(o)])
        src.unlink()

    def nested(kind: bytes, depth: int) -> bytes:
        opener, closer = (b"[", b"]") if kind == b"array" else (b"<< /A ", b">>")
        deep = opener * depth + b"1" + closer * depth if kind == b"array" else \
            opener * depth + b"<< >>" + closer * depth
        return _one_page(catalog_extra=b"/Deep 6 0 R ", more=[deep])

    bit_flipped_xref = bytearray(good)
    bit_flipped_xref[good.rindex(b"xref\n0 ")] ^= 0x20  # "xref" -> "Xref": startxref misses
    bad_header = bytearray(good)
    bad_header[1] ^= 0x01  # "%PDF" -> "%QDF"

    kids_loop = assemble([
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Pages /Parent 2 0 R /Kids [2 0 R 4 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 3 0 R /MediaBox [0 0 612 792] >>",
    ])
    parent_loop = assemble([
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Parent 3 0 R /Kids [4 0 R] /Count 1 >>",
        b"<< /Type /Pages /Parent 2 0 R /Kids [2 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R >>",
    ])
    huge_xref = good.replace(b"xref\n0 6\n", b"xref\n0 9000000\n").replace(
        b"/Size 6 ", b"/Size 9000000 ")
    bomb_data = _zeros_deflated(1 << 30)  # 1 GiB of zeros: ~1 MB, ~2 KB deflated twice
    nested_bomb = zlib.compress(bomb_data, 9)
    js = b"<< /Type /Action /S /JavaScript /JS (app.alert\\('hi'\\);) >>"
    launch = b"<< /Type /Action /S /Launch /F (cmd.exe) >>"
    embedded_exe = _one_page(
        catalog_extra=b"/Names << /EmbeddedFiles << /Names [(invoice.pdf) 6 0 R] >> >> ",
        more=[b"<< /Type /Filespec /F (invoice.pdf) /UF (invoice.pdf) /EF << /F 7 0 R >> >>",
              stream(zlib.compress(_MZ_STUB + bytes(200)),
                     b"/Type /EmbeddedFile /Filter /FlateDecode ")])
    return [
        ("encrypted", "encrypted_pdf", "qpdf", encrypted),
        ("truncated", "malformed_pdf", None, write(good[: len(good) // 2])),
        ("bit_flipped_header", "malformed_pdf", None, write(bytes(bad_header))),
        ("bit_flipped_xref", "malformed_pdf", None, write(bytes(bit_flipped_xref))),
        ("garbage", "malformed_pdf", None, write(os.urandom(4096))),
        ("empty", "malformed_pdf", None, write(b"")),
        ("no_pages", "malformed_pdf", None, write(assemble([
            b"<< /Type /Catalog /Pages 2 0 R >>", b"<< /Type /Pages /Kids [] /Count 0 >>"]))),
        ("huge_xref", "malformed_pdf", None, write(huge_xref)),
        ("deeply_nested_arrays", "malformed_pdf", None, write(nested(b"array", 100_000))),
        ("deeply_nested_dicts", "malformed_pdf", None, write(nested(b"dict", 500))),
        ("kids_loop", "malformed_pdf", None, write(kids_loop)),
        ("parent_loop", "malformed_pdf", None, write(parent_loop)),
        ("decompression_bomb", "limit_exceeded", None, write(_one_page(
            page_extra=b"/Thumb 6 0 R ",
            more=[stream(bomb_data, b"/Filter /FlateDecode ")]))),
        ("decompression_bomb_nested", "limit_exceeded", None, write(_one_page(
            page_extra=b"/Thumb 6 0 R ",
            more=[stream(nested_bomb, b"/Filter [/FlateDecode /FlateDecode] ")]))),
        ("javascript_openaction", "active_content", None,
         write(_one_page(catalog_extra=b"/OpenAction 6 0 R ", more=[js]))),
        ("launch_action", "active_content", None,
         write(_one_page(page_extra=b"/AA << /O 6 0 R >> ", more=[launch]))),
        ("embedded_exe", "active_content", None, write(embedded_exe)),
    ]


# --- building and caching ------------------------------------------------------------

# Every name the builders may produce, for test parametrization at collection time.
GOOD_NAMES: tuple[str, ...] = (
    "reportlab_plain", "reportlab_form", "pages_100", "incremental_update",
    "incremental_update_pypdf", "qpdf_xref_table", "qpdf_xref_stream", "qpdf_linearized",
    "already_signed", "pdflatex_hyperref", "libreoffice", "chromium", "imagemagick",
    "ghostscript_pdfa2b",
)
BAD_NAMES: tuple[str, ...] = (
    "encrypted", "truncated", "bit_flipped_header", "bit_flipped_xref", "garbage", "empty",
    "no_pages", "huge_xref", "deeply_nested_arrays", "deeply_nested_dicts", "kids_loop",
    "parent_loop", "decompression_bomb", "decompression_bomb_nested",
    "javascript_openaction", "launch_action", "embedded_exe",
)

# Bad entries that inspect_pdf refuses as they are, but that the signing pipeline
# repairs (two readers reconstruct the same pages) and signs.
REPAIRED_BY_PIPELINE: frozenset[str] = frozenset({"bit_flipped_xref", "huge_xref"})

_CACHE: dict[tuple[str, Path], dict] = {}


def _load_manifest(dest: Path, kind: str) -> dict | None:
    key = (kind, dest.resolve())
    if key in _CACHE:
        return _CACHE[key]
    manifest = dest / f"{kind}.json"
    if manifest.exists():
        data = json.loads(manifest.read_text())
        _CACHE[key] = data
        return data
    return None


def _save_manifest(dest: Path, kind: str, data: dict) -> None:
    (dest / f"{kind}.json").write_text(json.dumps(data, indent=1))
    _CACHE[(kind, dest.resolve())] = data


def build_good_corpus(dest: Path) -> dict[str, Path]:
    """Build (once) the PDFs every part of the service must accept; name -> path.

    Entries whose tool is absent are left out; ``good_corpus_missing(dest)`` names them.
    """
    dest.mkdir(parents=True, exist_ok=True)
    data = _load_manifest(dest, "good")
    if data is None:
        built: dict[str, str] = {}
        missing: dict[str, str] = {}
        for name, tool, build in _good_recipes(dest):
            if tool is not None and shutil.which(tool) is None:
                missing[name] = f"{tool} not installed"
                continue
            out = dest / f"{name}.pdf"
            try:
                build(out)
                if not out.exists() or out.stat().st_size == 0:
                    raise OSError(f"{name}: the tool wrote no file")
            except subprocess.CalledProcessError as e:
                missing[name] = f"{tool} failed: {e.stderr.decode(errors='replace')[-400:]}"
                out.unlink(missing_ok=True)
                continue
            except (subprocess.SubprocessError, OSError) as e:
                missing[name] = f"{type(e).__name__}: {e}"[:500]
                out.unlink(missing_ok=True)
                continue
            built[name] = str(out)
        data = {"built": built, "missing": missing}
        _save_manifest(dest, "good", data)
    return {name: Path(p) for name, p in data["built"].items()}


def good_corpus_missing(dest: Path) -> dict[str, str]:
    """Entries ``build_good_corpus(dest)`` left out, with the reason."""
    build_good_corpus(dest)
    data = _load_manifest(dest, "good")
    return dict(data["missing"]) if data else {}


def build_bad_corpus(dest: Path) -> dict[str, tuple[Path, str]]:
    """Build (once) the files inspect_pdf must refuse; name -> (path, expected code)."""
    dest.mkdir(parents=True, exist_ok=True)
    data = _load_manifest(dest, "bad")
    if data is None:
        built: dict[str, list[str]] = {}
        for name, code, tool, build in _bad_recipes(dest):
            if tool is not None and shutil.which(tool) is None:
                continue
            out = dest / f"{name}.pdf"
            build(out)
            built[name] = [str(out), code]
        data = {"built": built}
        _save_manifest(dest, "bad", data)
    return {name: (Path(p), code) for name, (p, code) in data["built"].items()}


@pytest.fixture(scope="session")
def good_corpus(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Session fixture: the good corpus (import it into a test module to use it)."""
    return build_good_corpus(tmp_path_factory.mktemp("good_corpus"))


@pytest.fixture(scope="session")
def bad_corpus(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, str]]:
    """Session fixture: the bad corpus with expected error codes."""
    return build_bad_corpus(tmp_path_factory.mktemp("bad_corpus"))
