"""The README's commands, run as a new user would: scripts/serve on a fresh state
directory, the command-line client against it (every command of the README's first
session), a crash and a restart."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tests.daemon import free_port
from tests.helpers_pki import reportlab_pdf

ROOT = Path(__file__).resolve().parents[2]


def test_readme_opens_with_the_two_commands():
    text = (ROOT / "README.md").read_text()
    first_block = text.split("```")[1]
    assert "scripts/serve" in first_block and "scripts/test" in first_block
    for script in ("scripts/serve", "scripts/test", ".ci/run"):
        assert os.access(ROOT / script, os.X_OK), script
    assert "scripts/test" in (ROOT / ".ci/run").read_text()


def command_name(args: list[str] | tuple[str, ...]) -> str:
    """``case sign`` and ``jobs download`` are two words; every other command one."""
    return " ".join(args[:2] if args[0] in ("case", "jobs") else args[:1])


def first_session_commands() -> set[str]:
    """The ``casesignd`` commands of the README's first session, by name (``case sign``,
    ``verify``)."""
    text = (ROOT / "README.md").read_text()
    block = text[text.index("## A first session"):].split("```")[1]
    found = set()
    for line in block.splitlines():
        if line.startswith(".venv/bin/casesignd "):
            found.add(command_name(line.split()[1:]))
    return found


def test_the_first_session_is_the_one_this_file_runs():
    assert first_session_commands() == {"case sign", "verify", "jobs download", "jobs list",
                                        "sign", "check"}


class Served:
    def __init__(self, state: Path) -> None:
        self.state = state
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = {**os.environ, "CASESIGND_STATE": str(state), "CASESIGND_URL": self.url}
        self.env.pop("CASESIGND_TOKEN", None)
        self.env.pop("NOTIFY_SOCKET", None)
        self.proc: subprocess.Popen[bytes] | None = None
        self.ran: set[str] = set()

    def start(self) -> None:
        self.log = open(self.state.parent / "serve.log", "ab")  # noqa: SIM115
        self.proc = subprocess.Popen([str(ROOT / "scripts/serve"), "--listen", f"127.0.0.1:{self.port}"],
                                     env=self.env, stdout=self.log, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, (self.state.parent / "serve.log").read_text()[-2000:]
            try:
                with urllib.request.urlopen(self.url + "/readyz", timeout=2) as r:
                    if r.status == 200:
                        return
            except OSError:
                time.sleep(0.1)
        raise TimeoutError("scripts/serve did not become ready")

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        env = dict(self.env)
        token = next(line.split("=", 1)[1] for line in (self.state / "client.env").read_text().splitlines()
                     if line.startswith("CASESIGND_TOKEN="))
        env["CASESIGND_TOKEN"] = token
        self.ran.add(command_name(args))
        return subprocess.run([str(ROOT / ".venv/bin/casesignd"), *args], env=env, text=True,
                              capture_output=True, timeout=120)

    def signal(self, sig: int) -> int:
        assert self.proc is not None
        os.killpg(self.proc.pid, sig)
        return self.proc.wait(timeout=60)


@pytest.fixture
def served(tmp_path):
    s = Served(tmp_path / "state")
    yield s
    if s.proc is not None and s.proc.poll() is None:
        os.killpg(s.proc.pid, signal.SIGKILL)
        s.proc.wait(timeout=30)


def test_serve_then_the_client_commands_of_the_readme(served, tmp_path):
    served.start()
    assert (served.state / "config.toml").exists() and (served.state / "client.env").exists()
    contract = reportlab_pdf(tmp_path / "contract.pdf", pages=2)
    photo = tmp_path / "photo-1.jpg"
    photo.write_bytes(b"\xff\xd8\xff\xe0\x00\x10JFIF\x00" + b"\x00" * 64 + b"\xff\xd9")
    sign = served.cli("case", "sign", str(contract), "--case", "MKT-2026-00042",
                      "--evidence", str(photo), "--signer", "seller-881:Acme Ltd:seller", "--wait")
    assert sign.returncode == 0, sign.stdout + sign.stderr
    job_id, signed = sign.stdout.split()[1], tmp_path / "contract.signed.pdf"
    assert sign.stdout == f"job {job_id} sha256 {sign.stdout.split()[3]} wrote {signed}\n"
    ver = served.cli("verify", str(signed), "--trust", str(served.state / "ca.pem"))
    assert ver.returncode == 0, ver.stdout + ver.stderr
    copy = tmp_path / "copy.pdf"
    got = served.cli("jobs", "download", job_id, "-o", str(copy))
    assert got.returncode == 0 and copy.read_bytes() == signed.read_bytes(), got.stderr
    listed = served.cli("jobs", "list")
    assert listed.returncode == 0 and job_id in listed.stdout
    kiosk_out = tmp_path / "kiosk.signed.pdf"
    kiosk = served.cli("sign", str(contract), "--case", "MKT-2026-00042", "-o", str(kiosk_out))
    assert kiosk.returncode == 0, kiosk.stdout + kiosk.stderr
    ver = served.cli("verify", str(kiosk_out), "--trust", str(served.state / "ca.pem"))
    assert ver.returncode == 0, ver.stdout + ver.stderr
    check = served.cli("check", str(contract), "--config", str(served.state / "config.toml"))
    assert check.returncode == 0, check.stdout + check.stderr
    assert first_session_commands() <= served.ran, first_session_commands() - served.ran
    assert served.signal(signal.SIGTERM) == 0
    audit = served.cli("audit", "verify", "--config", str(served.state / "config.toml"))
    assert audit.returncode == 0, audit.stdout + audit.stderr


def test_a_crash_and_a_restart_lose_nothing(served, tmp_path):
    served.start()
    contract = reportlab_pdf(tmp_path / "c.pdf")
    ref = json.loads(served.cli("upload", str(contract), "--case", "C-0").stdout)
    ids = []
    for i in range(5):
        manifest = {"kind": "sign_case", "case_id": f"C-{i}",
                    "items": [{"role": "contract", "name": "c.pdf", "media_type": "application/pdf",
                               "object_ref": "sha256:" + ref["sha256"], "sha256": ref["sha256"],
                               "size": ref["size"]}],
                    "signers": [{"id": "s", "name": "S", "role": "r"}]}
        if i:
            served.cli("upload", str(contract), "--case", f"C-{i}")
        (tmp_path / f"m{i}.json").write_text(json.dumps(manifest))
        out = served.cli("submit", str(tmp_path / f"m{i}.json"))
        assert out.returncode == 0, out.stdout + out.stderr
        ids.append(json.loads(out.stdout)["job_id"])
    served.signal(signal.SIGKILL)
    served.start()
    for job_id in ids:
        deadline = time.monotonic() + 60
        while True:
            job = json.loads(served.cli("jobs", "show", job_id).stdout)
            if job["state"] in ("ready", "failed"):
                break
            assert time.monotonic() < deadline
            time.sleep(0.2)
        assert job["state"] == "ready", job
    assert served.signal(signal.SIGTERM) == 0
    assert served.cli("audit", "verify", "--config", str(served.state / "config.toml")).returncode == 0


def test_the_example_config_is_what_serve_would_run(tmp_path):
    proc = subprocess.run([sys.executable, "-c",
                           "from casesignd import config; config.load('config.example.toml')"],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
