"""A short run of the compressed day (``scripts/bench soak``): every backup it takes
restores and checks, nothing is left in the temp area, the daemon comes back from its
SIGHUP and its kill -9, and the store and the chain check out at the end. Counts,
never times."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_a_short_day_restores_every_backup_and_leaks_nothing(tmp_path):
    out = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "bench_soak.py"), "--minutes", "0.5",
         "--rate", "3", "--keep-s", "3", "--sweep-s", "1", "--backup-every-s", "8",
         "--sample-s", "3", "--chart", "", "--dir", str(tmp_path)],
        capture_output=True, text=True, timeout=300, cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["bench"] == "soak_day"
    assert result["backups_taken"] >= 1 and result["backups_failed"] == 0, result
    assert result["backups_restored"] == result["restores_checked"] == result["backups_taken"]
    assert result["backup_problems"] == []
    assert (result["sighup"], result["kill9_restarts"], result["exit_code"]) == (1, 1, 0)
    assert result["leaks"] == 0 and result["last"]["temp_files"] == 0
    assert result["chain_ok"] and result["store_check_ok"], result
    assert result["admitted"] > 0 and result["samples"] >= 5
    assert "sign_case ready" in result["outcomes"]
