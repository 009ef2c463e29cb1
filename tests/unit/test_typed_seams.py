"""The package type-checks whole, and with it the service seams: the daemon's
services meet the protocols the pool, the jobs, the HTTP handlers, the kiosk and the
sweepers are written against, the pool's job context meets the jobs' one, and the stores meet the
store protocol (mypy; an attribute of a protocol is invariant, which no run of the
code shows). A probe that hands a job, and the handlers, something that is no
services must be refused in the same run, so the check is known to bite."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# All of the package: a seam is only as sound as what it is built from.
SEAMS = ["casesignd"]

PROBE = '''
from pathlib import Path

from casesignd.daemon.lifecycle import Services
from casesignd.engine.kinds import JobServices
from casesignd.http.services import HandlerServices
from casesignd.store import SqliteStore, Store
from casesignd.store.memory import MemoryStore


class NotServices:
    config = None


def run(services: JobServices) -> None: ...


def handlers_see(services: Services) -> HandlerServices:
    return services


def handlers_refuse(services: NotServices) -> HandlerServices:
    return services


stores: list[Store] = [SqliteStore(Path("store.db")), MemoryStore()]
run(NotServices())
'''


def test_the_seams_type_check(tmp_path: Path) -> None:
    probe = tmp_path / "seam_probe.py"
    probe.write_text(PROBE)
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--ignore-missing-imports", "--follow-imports=silent",
         "--cache-dir", str(tmp_path / "cache"), "--no-color-output", *SEAMS, str(probe)],
        cwd=ROOT, capture_output=True, text=True, timeout=600)
    errors = [line for line in result.stdout.splitlines() if ": error:" in line]
    elsewhere = [e for e in errors if not e.startswith(str(probe))]
    assert not elsewhere, "\n".join(elsewhere)
    # The probe's two refusals: a thing that is no services, handed to a job and
    # to the handlers.
    assert len(errors) == 2 and all("NotServices" in e for e in errors), result.stdout
