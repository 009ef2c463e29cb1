"""inspect_pdf against real producers' PDFs and hostile files (tests/helpers_corpus.py)."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
import time
from pathlib import Path

import pytest

from casesignd.core.codes import REASONS
from casesignd.core.errors import CasesignError
from casesignd.pdf.inspect import PdfLimits, PdfReport, inspect_pdf
from tests.helpers_corpus import (
    BAD_NAMES,
    GOOD_NAMES,
    _bad_recipes,
    _good_recipes,
    bad_corpus,  # noqa: F401  (session fixture)
    build_large_pdf,
    good_corpus,  # noqa: F401  (session fixture)
    good_corpus_missing,
)

# Peak resident memory allowed for inspecting a decompression bomb, in a fresh process.
BOMB_PEAK_RSS_BYTES = 200 * 1024 * 1024
CHILD_TIMEOUT_S = 120


def test_name_lists_match_the_builders(tmp_path: Path) -> None:
    assert tuple(r[0] for r in _good_recipes(tmp_path)) == GOOD_NAMES
    assert tuple(r[0] for r in _bad_recipes(tmp_path)) == BAD_NAMES


@pytest.mark.parametrize("name", GOOD_NAMES)
def test_good_pdf_passes(name: str, good_corpus: dict[str, Path]) -> None:  # noqa: F811
    if name not in good_corpus:
        dest = next(iter(good_corpus.values())).parent
        pytest.skip(good_corpus_missing(dest).get(name, "not built"))
    report = inspect_pdf(good_corpus[name], PdfLimits())
    assert report.pages >= 1
    assert report.encrypted is False
    assert report.size == good_corpus[name].stat().st_size
    assert pickle.loads(pickle.dumps(report)) == report


def test_links_are_signed_unless_the_policy_keeps_clicks_in_the_document(
    good_corpus: dict[str, Path],  # noqa: F811
) -> None:
    if "pdflatex_hyperref" not in good_corpus:
        pytest.skip("pdflatex is not installed")
    assert inspect_pdf(good_corpus["pdflatex_hyperref"], PdfLimits()).external_links >= 1
    with pytest.raises(CasesignError) as info:
        inspect_pdf(good_corpus["pdflatex_hyperref"], PdfLimits(link_schemes=frozenset()))
    assert (info.value.code, info.value.reason) == ("active_content", "link_scheme")
    assert "object" in info.value.where


def test_good_pdf_facts(good_corpus: dict[str, Path]) -> None:  # noqa: F811
    limits = PdfLimits()
    assert inspect_pdf(good_corpus["pages_100"], limits).pages == 100
    assert inspect_pdf(good_corpus["already_signed"], limits).has_signatures
    assert not inspect_pdf(good_corpus["reportlab_plain"], limits).has_signatures
    if "qpdf_xref_stream" in good_corpus:
        assert inspect_pdf(good_corpus["qpdf_xref_stream"], limits).has_xref_stream
        assert not inspect_pdf(good_corpus["qpdf_xref_table"], limits).has_xref_stream


@pytest.mark.parametrize("name", BAD_NAMES)
def test_bad_pdf_raises_its_code(name: str, bad_corpus: dict[str, tuple[Path, str]]) -> None:  # noqa: F811
    if name not in bad_corpus:
        pytest.skip("its tool is not installed")
    path, code = bad_corpus[name]
    with pytest.raises(CasesignError) as info:
        inspect_pdf(path, PdfLimits())
    assert info.value.code == code, info.value.message
    assert info.value.message and "Traceback" not in info.value.message
    # Errors cross the process-pool boundary intact.
    again = pickle.loads(pickle.dumps(info.value))
    assert (again.code, again.message, again.reason, again.where) == (
        info.value.code, info.value.message, info.value.reason, info.value.where)
    assert again.reason in REASONS and REASONS[again.reason].code in (code, "certified_no_changes")


_CHILD = """
import json, sys
from pathlib import Path
from casesignd.core.errors import CasesignError
from casesignd.pdf.inspect import PdfLimits, inspect_pdf
try:
    inspect_pdf(Path(sys.argv[1]), PdfLimits())
    code = None
except CasesignError as e:
    code = e.code
# VmHWM is this process image's own peak; ru_maxrss can carry the parent's over
# fork+exec (Linux keeps it in the signal struct).
hwm = [int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM:")]
print(json.dumps({"code": code, "hwm_kib": hwm[0] if hwm else None}))
"""

# For comparison only: pypdf given a path, decoding every stream the usual way.
_NAIVE_CHILD = """
import json, sys
from pypdf import PdfReader
reader = PdfReader(sys.argv[1])
for page in reader.pages:
    for xobj in page["/Resources"]["/XObject"].values():
        xobj.get_object().get_data()
hwm = [int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM:")]
print(json.dumps({"code": None, "hwm_kib": hwm[0] if hwm else None}))
"""


def _inspect_in_child(path: Path, script: str = _CHILD) -> tuple[str | None, int]:
    """Inspect in a fresh interpreter; return (error code, the child's peak RSS in bytes).

    os.wait4 gives this child's own rusage, so earlier children (soffice, chromium from
    the corpus build) do not blur the figure.
    """
    proc = subprocess.Popen([sys.executable, "-c", script, str(path)],
                            stdout=subprocess.PIPE, cwd=Path(__file__).parents[2])
    deadline = time.monotonic() + CHILD_TIMEOUT_S
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        if time.monotonic() > deadline:
            proc.kill()
            os.wait4(proc.pid, 0)
            pytest.fail("inspect_pdf did not finish in time")
        time.sleep(0.05)
    proc.returncode = os.waitstatus_to_exitcode(status)
    out = proc.stdout.read() if proc.stdout else b""
    assert proc.returncode == 0, out
    # ru_maxrss is in kilobytes on Linux.
    result = json.loads(out)
    peak = min(usage.ru_maxrss, result.get("hwm_kib") or usage.ru_maxrss)
    return result["code"], peak * 1024


@pytest.mark.parametrize("name", ["decompression_bomb", "decompression_bomb_nested"])
def test_bomb_memory_stays_bounded(
    name: str, bad_corpus: dict[str, tuple[Path, str]], good_corpus: dict[str, Path],  # noqa: F811
    capsys: pytest.CaptureFixture[str],
) -> None:
    path, _ = bad_corpus[name]
    code, peak = _inspect_in_child(path)
    _, baseline = _inspect_in_child(good_corpus["reportlab_plain"])
    with capsys.disabled():
        print(f"\n{name}: {path.stat().st_size} bytes on disk, peak RSS {peak >> 20} MiB "
              f"(a small good PDF: {baseline >> 20} MiB)")
    assert code == "limit_exceeded"
    assert peak < BOMB_PEAK_RSS_BYTES


def test_limits_apply_to_good_files(good_corpus: dict[str, Path]) -> None:  # noqa: F811
    with pytest.raises(CasesignError) as info:
        inspect_pdf(good_corpus["pages_100"], PdfLimits(max_pages=99))
    assert info.value.code == "limit_exceeded"
    with pytest.raises(CasesignError) as info:
        inspect_pdf(good_corpus["pages_100"], PdfLimits(max_bytes=1000))
    assert info.value.code == "limit_exceeded"
    assert isinstance(inspect_pdf(good_corpus["pages_100"], PdfLimits(max_pages=100)), PdfReport)


@pytest.mark.slow
def test_a_200_mb_contract_stays_in_bounded_memory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    path = build_large_pdf(tmp_path / "contract.pdf", 200 * 1024 * 1024)
    code, peak = _inspect_in_child(path)
    _, naive = _inspect_in_child(path, _NAIVE_CHILD)
    with capsys.disabled():
        print(f"\n200 MB contract ({path.stat().st_size >> 20} MiB): inspect_pdf peak RSS "
              f"{peak >> 20} MiB; pypdf on a path decoding each image: {naive >> 20} MiB")
    assert code is None
    assert peak < BOMB_PEAK_RSS_BYTES


def test_runs_in_a_process_pool(
    good_corpus: dict[str, Path], bad_corpus: dict[str, tuple[Path, str]],  # noqa: F811
) -> None:
    # The worker calls inspect_pdf through a process pool: arguments, report and
    # errors all cross the process boundary.
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=1, mp_context=ctx) as pool:
        report = pool.submit(inspect_pdf, good_corpus["pages_100"], PdfLimits()).result(60)
        assert isinstance(report, PdfReport) and report.pages == 100
        path, code = bad_corpus["javascript_openaction"]
        with pytest.raises(CasesignError) as info:
            pool.submit(inspect_pdf, path, PdfLimits()).result(60)
        assert info.value.code == code == "active_content"
        assert info.value.detail["rule"]
