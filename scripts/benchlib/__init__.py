"""What the benchmarks under scripts/ share: the machine's load, the documents they
sign, a lean kiosk client, the end-to-end runs through a real daemon, the soak's
workload and measures, and procrastinate's side of the queue benchmark.

A script imports this package and no other script: one benchmark that hands over to
another (``bench sign --level``, ``bench soak`` without ``--compare``) runs it as a
program of its own (:func:`run_script`), so the scripts' imports have no cycle
(tests/unit/test_scripts.py holds it).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import NoReturn

SCRIPTS = Path(__file__).resolve().parent.parent


def run_script(name: str, argv: list[str]) -> NoReturn:
    """Run ``scripts/<name>`` with ``argv`` in place of this process."""
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(sys.executable, [sys.executable, str(SCRIPTS / name), *argv])
