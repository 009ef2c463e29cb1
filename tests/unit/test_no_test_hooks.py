"""The product carries no test hooks: the test suite plugs its parts in (tests/serve.py,
through casesignd.daemon.lifecycle.Extras), and no module of casesignd switches one on
from the environment or imports the tests."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

_HOOK = re.compile(r"CASESIGND_TEST_|STRICT_LABELS|^\s*(?:from|import) tests\b", re.M)


def test_no_module_of_casesignd_switches_on_a_test_part() -> None:
    found = {str(path.relative_to(ROOT)): match.group(0).strip()
             for path in sorted((ROOT / "casesignd").rglob("*.py"))
             if (match := _HOOK.search(path.read_text()))}
    assert not found, found


def test_the_check_bites() -> None:
    assert _HOOK.search('os.environ.get("CASESIGND_TEST_KIND")')
    assert _HOOK.search("    from tests.exercise_kind import ExerciseKind\n")
    assert not _HOOK.search("from testsuite import x\n")
