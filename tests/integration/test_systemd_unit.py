"""The systemd units: they verify, they score as hardened, and the stack runs inside them.

``systemd-analyze security`` prints an exposure level from 0.0 (locked down) to 10.0
(unprotected); ``--threshold=N`` compares against the same value times ten and exits
non-zero above it, so ``--threshold=15`` means "exposure at most 1.5". The test checks
both the exit status and the printed "Overall exposure level" line.

``MemoryDenyWriteExecute=yes`` is a seccomp filter; systemd cannot run here (it is not
PID 1), so the test installs the same rules through libseccomp in a child process and
runs the daemon's libraries under them.
"""

from __future__ import annotations

import ctypes.util
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
UNITS = REPO / "systemd"
ANALYZE = shutil.which("systemd-analyze")

needs_analyze = pytest.mark.skipif(ANALYZE is None, reason="systemd-analyze is not installed")


def analyze(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    assert ANALYZE is not None
    return subprocess.run(
        [ANALYZE, *args], cwd=cwd, capture_output=True, text=True, timeout=120, check=False
    )


def unit_settings(path: Path) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for line in path.read_text().splitlines():
        if "=" in line and not line.startswith(("#", "[")):
            key, _, value = line.partition("=")
            out.setdefault(key.strip(), []).append(value.strip())
    return out


@needs_analyze
def test_units_verify(tmp_path: Path) -> None:
    # verify insists that ExecStart= exists; the committed unit names the installed
    # path, so a copy points at an existing program. Nothing else is changed.
    service = (UNITS / "casesignd.service").read_text()
    assert "ExecStart=/usr/bin/casesignd serve --config /etc/casesignd/config.toml" in service
    venv_program = Path(sys.executable).parent / "casesignd"
    program = str(venv_program) if venv_program.exists() else "/bin/true"
    (tmp_path / "casesignd.service").write_text(
        service.replace("ExecStart=/usr/bin/casesignd", f"ExecStart={program}")
    )
    shutil.copy(UNITS / "casesignd.socket", tmp_path / "casesignd.socket")
    result = analyze(
        "verify", "--man=no", str(tmp_path / "casesignd.service"),
        str(tmp_path / "casesignd.socket"), cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    # verify exits 0 even for unknown keys or ignored values; it only warns.
    ours = [line for line in result.stderr.splitlines() if "casesignd." in line]
    assert ours == [], "\n".join(ours)


@needs_analyze
def test_service_exposure_is_at_most_1_5(tmp_path: Path) -> None:
    result = analyze(
        "security", "--offline=yes", "--threshold=15", "--no-pager",
        str(UNITS / "casesignd.service"), cwd=tmp_path,
    )  # fmt: skip
    match = re.search(r"Overall exposure level for casesignd\.service: (\d+\.\d)", result.stdout)
    assert match, result.stdout + result.stderr
    assert float(match.group(1)) <= 1.5, result.stdout
    assert result.returncode == 0, result.stdout + result.stderr


def test_service_settings_the_daemon_relies_on() -> None:
    s = unit_settings(UNITS / "casesignd.service")
    assert s["Type"] == ["notify"] and s["NotifyAccess"] == ["main"]
    assert s["ExecReload"] == ["/bin/kill -HUP $MAINPID"]
    assert s["WatchdogSec"] == ["30"]
    assert s["StateDirectoryMode"] == ["0700"] and s["UMask"] == ["0077"]
    assert s["MemoryDenyWriteExecute"] == ["yes"]
    assert any(v.startswith("/var/tmp/casesignd:size=") for v in s["TemporaryFileSystem"])
    creds = {v.split(":")[0] for v in s["LoadCredential"]}
    assert {"signing.p12", "signing.pass"} <= creds
    # TimeoutStopSec must outlast workers.shutdown_grace_s (config default).
    from casesignd.config import Workers

    assert float(s["TimeoutStopSec"][0]) > Workers().shutdown_grace_s
    sock = unit_settings(UNITS / "casesignd.socket")
    assert sock["ListenStream"] == ["127.0.0.1:8787"]
    assert sock["FileDescriptorName"] == ["http"]


# --- MemoryDenyWriteExecute=yes ------------------------------------------------------

CHILD = r"""
import ctypes, ctypes.util, errno, json, mmap, sys

# systemd 252 src/shared/seccomp-util.c, seccomp_memory_deny_write_execute():
# mmap with PROT_WRITE|PROT_EXEC, mprotect/pkey_mprotect adding PROT_EXEC and shmat
# with SHM_EXEC fail with EPERM.
lib = ctypes.CDLL(sys.argv[1], use_errno=True)
class Cmp(ctypes.Structure):
    _fields_ = [("arg", ctypes.c_uint), ("op", ctypes.c_int),
                ("a", ctypes.c_uint64), ("b", ctypes.c_uint64)]
lib.seccomp_init.restype = ctypes.c_void_p
lib.seccomp_rule_add_array.argtypes = [ctypes.c_void_p, ctypes.c_uint32, ctypes.c_int,
                                       ctypes.c_uint, ctypes.POINTER(Cmp)]
lib.seccomp_load.argtypes = [ctypes.c_void_p]
ALLOW, EPERM_ACTION, MASKED_EQ = 0x7FFF0000, 0x00050000 | errno.EPERM, 7
ctx = lib.seccomp_init(ALLOW)
W, X, SHM_EXEC = mmap.PROT_WRITE, mmap.PROT_EXEC, 0o100000
for name, mask in (("mmap", W | X), ("mprotect", X), ("pkey_mprotect", X), ("shmat", SHM_EXEC)):
    nr = lib.seccomp_syscall_resolve_name(name.encode())
    cmp = (Cmp * 1)(Cmp(2, MASKED_EQ, mask, mask))  # (prot & mask) == mask
    assert lib.seccomp_rule_add_array(ctx, EPERM_ACTION, nr, 1, cmp) == 0, name
assert lib.seccomp_load(ctx) == 0
try:
    mmap.mmap(-1, 4096, prot=mmap.PROT_READ | W | X)
    raise SystemExit("filter not active: W+X mapping succeeded")
except PermissionError:
    pass

# The daemon's work, under the filter.
import asyncio, concurrent.futures, importlib, io, pkgutil, sqlite3, tempfile
from pathlib import Path
import aiohttp, aiosqlite, asn1crypto.cms, msgspec, prometheus_client, pypdf
from aiohttp import web
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.serialization import pkcs7, pkcs12
from reportlab.pdfgen import canvas
from casesignd.ops import devpki

done = []
ca = devpki.make_ca()
ident = devpki.issue(ca, "signer")
tmp = Path(tempfile.mkdtemp())
devpki.write_pkcs12(tmp / "s.p12", ident, b"pw")
key, cert, _ = pkcs12.load_key_and_certificates((tmp / "s.p12").read_bytes(), b"pw")
sig = (pkcs7.PKCS7SignatureBuilder().set_data(b"doc").add_signer(cert, key, hashes.SHA256())
       .sign(serialization.Encoding.DER, [pkcs7.PKCS7Options.DetachedSignature]))
asn1crypto.cms.ContentInfo.load(sig).native
done.append("cms")
buf = io.BytesIO(); c = canvas.Canvas(buf); c.drawString(72, 720, "Invoice"); c.save()
reader = pypdf.PdfReader(io.BytesIO(buf.getvalue()))
writer = pypdf.PdfWriter(); writer.append(reader); writer.add_attachment("a.txt", b"x")
writer.write(io.BytesIO())
done.append("pdf")
from casesignd.pdf import render as pdfrender
if not pdfrender.missing_renderers():  # pdftoppm and mutool inherit the filter, as in the unit
    (tmp / "r.pdf").write_bytes(buf.getvalue())
    drawn = pdfrender.compare(tmp / "r.pdf", tmp / "r.pdf", pages=1, workdir=tmp)
    assert all(r.page is None and not r.failed for r in drawn.values()), drawn
    done.append("render")
msgspec.json.decode(msgspec.json.encode({"a": [1, 2]}))
softhsm = Path("/usr/lib/softhsm/libsofthsm2.so")
if softhsm.exists():  # signing.pkcs11: the PKCS#11 module is dlopen()ed in-process
    import os, pkcs11
    (tmp / "tokens").mkdir()
    (tmp / "softhsm2.conf").write_text(f"directories.tokendir = {tmp / 'tokens'}\n")
    os.environ["SOFTHSM2_CONF"] = str(tmp / "softhsm2.conf")
    list(pkcs11.lib(str(softhsm)).get_slots())
    done.append("pkcs11")

def square(x):
    return x * x

async def main():
    async with aiosqlite.connect(str(tmp / "db.sqlite")) as db:
        await db.execute("create table if not exists t (x)"); await db.commit()
    async def hello(request):
        return web.Response(text="ok")
    app = web.Application(); app.router.add_get("/", hello)
    runner = web.AppRunner(app); await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0); await site.start()
    port = runner.addresses[0][1]
    async with aiohttp.ClientSession() as s:
        async with s.get(f"http://127.0.0.1:{port}/") as r:
            assert await r.text() == "ok"
    await runner.cleanup()
    loop = asyncio.get_running_loop()
    with concurrent.futures.ProcessPoolExecutor(1) as pool:
        assert await loop.run_in_executor(pool, square, 7) == 49

asyncio.run(main())
done.append("asyncio")
import uvloop  # server.event_loop's default: libuv maps no executable memory either
with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
    runner.run(main())
done.append("uvloop")

# Every casesignd module must import; a failure other than write+execute memory is
# another module's business and only reported.
import casesignd
refused, other = [], []
for m in pkgutil.walk_packages(casesignd.__path__, "casesignd."):
    if m.name.endswith("__main__"):  # it runs the command line on import
        continue
    try:
        importlib.import_module(m.name)
    except MemoryError as e:
        refused.append(f"{m.name}: {e}")
    except Exception as e:
        (refused if "write+execute" in str(e) else other).append(f"{m.name}: {e!r}")
print(json.dumps({"done": done, "refused": refused, "other": other}))
"""


def test_the_stack_runs_under_memory_deny_write_execute(tmp_path: Path) -> None:
    libseccomp = ctypes.util.find_library("seccomp")
    if libseccomp is None:
        pytest.skip("libseccomp is not installed")
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    result = subprocess.run(
        [sys.executable, str(script), libseccomp],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert {"cms", "pdf", "asyncio", "uvloop"} <= set(report["done"]), report
    from casesignd.pdf import render as pdfrender

    if not pdfrender.missing_renderers():
        assert "render" in report["done"], report
    assert report["refused"] == [], report
