"""Verify's budgets (casesignd.verify.budget): past one, a refusal with
``limit_exceeded`` and its reason, never a validation that runs on. Outcomes are
counted, never timed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from casesignd.core.errors import LimitExceeded
from casesignd.verify import document as verify_pdf
from casesignd.verify.validate import VerifyOptions, verify_file
from tests.helpers_pki import Pki, pki, reportlab_pdf
from tests.helpers_sigcorpus import dss_bomb, large_contents, many_signatures, sign

__all__ = ["pki"]  # fixture


@pytest.fixture(scope="module")
def signed(pki: Pki, tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("budget")
    return sign(reportlab_pdf(d / "base.pdf"), d / "signed.pdf", pki)


def _refused(path: Path, **budget: object) -> LimitExceeded:
    with pytest.raises(LimitExceeded) as info:
        verify_file(path, VerifyOptions((), "never", **budget))  # type: ignore[arg-type]
    assert info.value.code == "limit_exceeded"
    return info.value


def test_signatures_per_document(signed, tmp_path) -> None:
    many = many_signatures(signed, tmp_path / "many.pdf", 12)
    assert _refused(many, max_signatures=10).reason == "too_many_signatures"
    assert len(verify_file(many, VerifyOptions((), "never")).signatures) == 13


def test_cpu_per_document(signed, tmp_path) -> None:
    many = many_signatures(signed, tmp_path / "many.pdf", 12)
    assert _refused(many, max_cpu_s=0.01).reason == "validation_time"


def test_cpu_per_signature(signed, tmp_path) -> None:
    # A signature past its own budget is left unchecked, the next one is validated, and
    # the document is answered. The CPU timer ticks at the kernel's resolution, so a
    # signature may finish within the first tick: counted, not required of each.
    many = many_signatures(signed, tmp_path / "many.pdf", 8)
    report = verify_file(many, VerifyOptions((), "never", max_cpu_per_signature_s=0.001))
    assert len(report.signatures) == 9
    stopped = [s for s in report.signatures if s.sub_indication == "GENERIC"]
    assert stopped, [s.describe() for s in report.signatures]
    for sig in stopped:
        assert (sig.indication, sig.intact, sig.valid) == ("INDETERMINATE", None, None)
        assert "max_cpu_per_signature_s" in sig.problems[0]
    # The document's budget still ends it first when it is the smaller.
    assert _refused(many, max_cpu_s=0.01, max_cpu_per_signature_s=5.0).reason == "validation_time"


def test_one_signature_s_contents(signed, tmp_path) -> None:
    large = large_contents(signed, tmp_path / "large.pdf", 300_000)
    assert _refused(large, max_contents_bytes=100_000).reason == "contents_too_large"


def test_decoded_bytes(signed, tmp_path) -> None:
    # A DSS entry that inflates past the budget: left out of the evidence, said.
    bomb = dss_bomb(signed, tmp_path / "bomb.pdf", 8 * 1024 * 1024)
    try:
        report = verify_file(bomb, VerifyOptions((), "never", max_decoded_bytes=1024 * 1024))
    except LimitExceeded as e:
        assert e.reason == "decompression_bomb"
    else:
        assert any("cannot be decoded" in f for f in report.findings), report.findings


def test_memory(signed, monkeypatch) -> None:
    def exhausted(*args: object, **kw: object) -> None:
        raise MemoryError

    monkeypatch.setattr(verify_pdf.ades, "read_dss", exhausted)
    assert _refused(signed).reason == "memory_budget"


def test_a_verify_process_has_its_address_space_capped() -> None:
    code = ("import resource; from casesignd.verify.budget import init_verify_process; "
            "init_verify_process(512 * 1024 * 1024); "
            "print(resource.getrlimit(resource.RLIMIT_AS)[0])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=60)
    assert int(out.stdout) <= 512 * 1024 * 1024
