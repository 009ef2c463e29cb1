"""One table of error codes (casesignd/core/codes.py), and everything held to it: the codes
the source writes, the exception tree, docs/api.md's tables, the OpenAPI document and
the metrics' label set. A code missing anywhere, or described two ways, fails here; so
does an error class, or a call making one, that says its own status, retryability or
category instead of reading the table's."""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import pytest

from casesignd.core import errors
from casesignd.core.codes import (
    CODES,
    FRAMEWORK_CODES,
    INTERNAL,
    PERMANENT,
    REASONS,
    RETRIES,
    code_for_status,
)
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


def _modules() -> list[str]:
    """Every module of the package, by walking its files: a moved module cannot drop
    out of the checks below."""
    names = []
    for path in sorted((ROOT / "casesignd").rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        if parts[-1] == "__main__":
            continue
        names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


def _exception_classes() -> list[type[errors.CasesignError]]:
    for name in _modules():
        importlib.import_module(name)
    out, todo = [], [errors.CasesignError]
    while todo:
        cls = todo.pop()
        out.append(cls)
        todo.extend(cls.__subclasses__())
    return out


# What the table alone says about a code: no class sets it, no call passes it.
_METADATA = ("status", "retryable", "category")
# The command-line client's error reports the status the server answered.
_REPORTS_AN_ANSWER = {"casesignd.cli.client.ClientError"}


def _reports_an_answer(cls: type) -> bool:
    return any(f"{b.__module__}.{b.__qualname__}" in _REPORTS_AN_ANSWER for b in cls.__mro__)


def _own_metadata(classes: list[type]) -> list[str]:
    """The classes that carry a status, retryability or category of their own, not the
    base's reading of the table."""
    return [f"{cls.__module__}.{cls.__qualname__}.{attr}" for cls in classes
            for attr in _METADATA
            if vars(cls).get(attr, vars(errors.CasesignError)[attr])
            is not vars(errors.CasesignError)[attr] and not _reports_an_answer(cls)]


def _metadata_passed(source: str, error_names: set[str]) -> list[int]:
    """The lines of ``source`` where an error is made with a status, retryability or
    category of its own (``Conflict(..., status=500)``)."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
            if name in error_names and any(k.arg in _METADATA for k in node.keywords):
                lines.append(node.lineno)
    return lines


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


@pytest.mark.parametrize("cls", _exception_classes(), ids=lambda c: c.__qualname__)
def test_every_error_class_takes_its_metadata_from_the_table(
        cls: type[errors.CasesignError]) -> None:
    assert not _own_metadata([cls])
    if _reports_an_answer(cls):
        return
    assert cls.code in CODES, cls
    row, error = CODES[cls.code], cls.__new__(cls)
    error.code = cls.code
    assert (error.status, error.retryable, error.category) == \
        (row.status, row.retryable, row.category)


def test_no_error_is_made_with_a_status_of_its_own() -> None:
    names = {cls.__name__ for cls in _exception_classes()}
    found = {}
    for path in sorted((ROOT / "casesignd").rglob("*.py")):
        lines = _metadata_passed(path.read_text(), names)
        if lines:
            found[str(path.relative_to(ROOT))] = lines
    assert not found, f"errors made with their own status/retryable/category: {found}"


def test_a_deliberately_wrong_entry_is_caught() -> None:
    # LeaseLost once said 500 in its class and 409 in the table.
    class LeaseLost(errors.CasesignError):
        code = "lease_lost"
        status = 500

    class Transient(errors.TransientJobError):
        retryable = False

    assert _own_metadata([LeaseLost, Transient]) == [
        f"{__name__}.{LeaseLost.__qualname__}.status",
        f"{__name__}.{Transient.__qualname__}.retryable"]
    handler = 'raise Conflict("the lease moved on", code="lease_lost", status=500)\n'
    assert _metadata_passed(handler, {"Conflict"}) == [1]
    assert _metadata_passed('raise Conflict("x", code="lease_lost")\n', {"Conflict"}) == []


def test_a_code_answers_with_the_table_s_status() -> None:
    from casesignd.engine.pool import LeaseLost

    assert LeaseLost("lost").status == CODES["lease_lost"].status == 409
    assert errors.ValidationError("x", code="too_large").status == 413
    assert errors.CasesignError("x", code="no_such_code").status == 500


def test_the_framework_s_answers_have_the_table_s_codes() -> None:
    for status, name in FRAMEWORK_CODES.items():
        assert CODES[name].status == status
    assert code_for_status(404) == "not_found" and code_for_status(405) == "method_not_allowed"
    assert code_for_status(416) == "bad_request" and code_for_status(502) == "internal_error"


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

