"""One table of error codes (casesignd/core/codes.py), and everything held to it: the codes
the source writes, the exception tree, docs/api.md's tables, the OpenAPI document and
the metrics' label set. A code missing anywhere, or described two ways, fails here."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from casesignd.core import errors
from casesignd.core.codes import CODES, INTERNAL, PERMANENT, REASONS, RETRIES
from casesignd.http import openapi
from casesignd.observability import metrics

ROOT = Path(__file__).resolve().parents[2]
# A code as the source writes it: code="x", a class's code = "x", or the first
# argument of invoice.py's _refuse("x", ...).
_LITERAL = re.compile(
    r"""(?:\bcode\s*(?::\s*str\s*)?=\s*|\b_refuse\(\s*)"([a-z][a-z0-9_]{1,63})\"""")
# A refusal's reason as the source writes it: reason="x" (an error's keyword argument).
_REASON_LITERAL = re.compile(r"""\breason="([a-z][a-z0-9_]{1,63})\"""")
# The command-line client's own errors (ClientError) describe its side of a call.
CLIENT_MODULES = {"client.py"}


def _exception_classes() -> list[type[errors.CasesignError]]:
    out, todo = [], [errors.CasesignError]
    while todo:
        cls = todo.pop()
        out.append(cls)
        todo.extend(cls.__subclasses__())
    return out


def test_the_table_is_well_formed() -> None:
    for code in CODES.values():
        assert re.fullmatch(r"[a-z][a-z0-9_]*", code.name)
        assert 400 <= code.status <= 599
        assert code.category in (PERMANENT, RETRIES, INTERNAL)
        assert code.meaning and code.meaning[0].islower(), code


def test_every_code_the_source_writes_is_in_the_table() -> None:
    missing = {}
    for path in sorted((ROOT / "casesignd").rglob("*.py")):
        if path.name in CLIENT_MODULES:
            continue
        for code in _LITERAL.findall(path.read_text()):
            # A finding's code is the refusal reason it gives (pdfframe.Finding.code).
            if code not in CODES and code not in REASONS:
                missing.setdefault(code, path.name)
    assert not missing, f"codes written in the source but not in casesignd/core/codes.py: {missing}"


def test_every_reason_the_source_writes_is_in_the_table() -> None:
    missing = {}
    for path in sorted((ROOT / "casesignd").rglob("*.py")):
        for reason in _REASON_LITERAL.findall(path.read_text()):
            if reason not in REASONS:
                missing.setdefault(reason, path.name)
    assert not missing, f"reasons written in the source but not in codes.REASONS: {missing}"


@pytest.mark.parametrize("cls", [c for c in _exception_classes()
                                 if c.__module__ == "casesignd.core.errors"],
                         ids=lambda c: c.__name__)
def test_the_exception_tree_agrees_with_the_table(cls: type[errors.CasesignError]) -> None:
    row = CODES[cls.code]
    assert (cls.status, cls.retryable) == (row.status, row.retryable), cls
    if cls.retryable or cls.category != errors.INTERNAL:
        assert cls.category == row.category, cls


def _section(heading: str) -> str:
    """docs/api.md from ``heading`` to the next heading of its level or above."""
    text = (ROOT / "docs/api.md").read_text()
    start = text.index(f"\n{heading}\n")
    depth = len(heading.split(" ")[0])
    ends = [m.start() for m in re.finditer(rf"^#{{1,{depth}}} ", text[start + 1:], re.M)][1:]
    return text[start:start + 1 + ends[0]] if ends else text[start:]


def test_the_documented_table_is_the_table() -> None:
    section = _section("## Errors")
    rows = re.findall(r"^\| `([a-z0-9_]+)` \| (\d{3}) \| (\w+) \| (yes|no) \| (.+) \|$",
                      section, re.M)
    documented = {name: (int(status), category, retried == "yes", meaning)
              for name, status, category, retried, meaning in rows}
    table = {c.name: (c.status, c.category, c.retryable, c.meaning) for c in CODES.values()}
    assert documented == table


def test_the_openapi_document_and_the_metrics_take_the_table() -> None:
    doc = openapi.document()
    error_code = doc["components"]["schemas"]["Error"]["properties"]["error"]["properties"]["code"]
    assert error_code["enum"] == sorted(CODES)
    assert doc["components"]["schemas"]["JobError"]["properties"]["code"]["enum"] == sorted(CODES)
    assert metrics.error_codes() == set(CODES)


def test_every_reason_goes_with_a_code_and_the_documents_list_them() -> None:
    for reason in REASONS.values():
        assert re.fullmatch(r"[a-z][a-z0-9_]*", reason.name)
        assert reason.code in CODES and reason.meaning[0].islower(), reason
    section = _section("### Why a document is refused")
    rows = re.findall(r"^\| `([a-z0-9_]+)` \| `([a-z0-9_]+)` \| (.+) \|$", section, re.M)
    assert {name: (code, meaning) for name, code, meaning in rows} == {
        r.name: (r.code, r.meaning) for r in REASONS.values()}
    doc = openapi.document()
    error = doc["components"]["schemas"]["Error"]["properties"]["error"]["properties"]
    assert error["reason"]["enum"] == sorted(REASONS)
    assert doc["components"]["schemas"]["JobError"]["properties"]["reason"]["enum"] == \
        sorted(REASONS)

