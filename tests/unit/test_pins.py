"""The pins are the versions the suite runs against, and pypdf stays where endesive
(the benchmark baseline) still works: endesive 3.0.1 breaks on pypdf 7."""

from __future__ import annotations

import datetime as dt
import re
import subprocess
import sys
import textwrap
import tomllib
from importlib import metadata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def pins(group: str | None = None) -> dict[str, str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    deps = project["dependencies"] if group is None else project["optional-dependencies"][group]
    out = {}
    for spec in deps:
        name, _, version = spec.partition("==")
        assert version, f"{spec} is not pinned exactly"
        out[name.partition("[")[0]] = version  # "certomancer[web-api]": the extra is no name
    return out


@pytest.mark.parametrize("group", [None, "test"])
def test_installed_versions_are_the_pinned_ones(group):
    for name, version in pins(group).items():
        assert metadata.version(name) == version, name


def test_pypdf_is_below_7():
    major = int(re.match(r"\d+", pins()["pypdf"]).group())
    assert major < 7, "endesive 3.0.1 (the benchmark baseline) breaks on pypdf 7"


def test_endesive_signs_with_the_pinned_pypdf(tmp_path):
    pytest.importorskip("endesive")
    from casesignd.ops import devpki
    from tests.helpers_pki import pyhanko_statuses, reportlab_pdf

    ca = devpki.make_ca("pin CA")
    devpki.write_pkcs12(tmp_path / "k.p12", devpki.issue(ca, "pin signer"), b"pw")
    src = reportlab_pdf(tmp_path / "in.pdf")
    out = tmp_path / "out.pdf"
    # In a child process: importing endesive.pdf needs the benchmark's certvalidator
    # stub (oscrypto 1.3.0 cannot detect OpenSSL >= 3.0.10), which must not leak here.
    script = textwrap.dedent(f"""
        import sys, types
        stub = types.ModuleType("certvalidator"); stub.errors = types.SimpleNamespace()
        sys.modules["certvalidator"] = stub
        from cryptography.hazmat.primitives.serialization import pkcs12
        from endesive.pdf import cms
        key, cert, others = pkcs12.load_key_and_certificates(open({str(tmp_path / 'k.p12')!r}, 'rb').read(), b"pw")
        data = open({str(src)!r}, "rb").read()
        dct = {{"sigflags": 3, "contact": "pin", "location": "pin", "reason": "pin",
               "signingdate": {dt.datetime.now(dt.UTC).strftime("D:%Y%m%d%H%M%S+00'00'")!r}}}
        signed = cms.sign(data, dct, key, cert, others or [], "sha256")
        open({str(out)!r}, "wb").write(data + signed)
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    (status,) = pyhanko_statuses(out, [ca.cert])
    assert status.intact and status.valid
