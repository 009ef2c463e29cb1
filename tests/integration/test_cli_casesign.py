"""``casesignd case sign`` and ``jobs download`` against one real daemon on loopback:
the signed packet with its evidence, a re-run that sends no object again, a run
killed midway through an upload and run again, the artifact downloaded by job id,
and refusals of one line."""

from __future__ import annotations

import contextlib
import hashlib
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator

import pytest
from cryptography import x509

from tests.daemon import Daemon
from tests.helpers_ops import PNG, scrape, value
from tests.helpers_pki import embedded_files, pyhanko_statuses, reportlab_pdf

OBJECTS = "/v1/cases/{case_id}/objects/{sha256}"
NOTE = b"delivered on time, see the photo\n"
# Large enough for progress lines (over 1 MiB) and to be cut off midway.
BIG = b"meter reading 000417, taken at the door\n" * 160_000


@pytest.fixture(scope="module")
def d(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    daemon = Daemon(tmp_path_factory.mktemp("casesign") / "state")
    daemon.start()
    reportlab_pdf(daemon.dir / "contract.pdf", pages=2)
    (daemon.dir / "photo.png").write_bytes(PNG)
    (daemon.dir / "note.txt").write_bytes(NOTE)
    (daemon.dir / "readings.txt").write_bytes(BIG)
    try:
        yield daemon
    finally:
        daemon.stop()


def puts(d: Daemon) -> dict[str, float]:
    """Object uploads the daemon has answered, by status; and the HEADs."""
    _, samples, _ = scrape(d)
    name = "casesignd_http_request_seconds_count"
    out = {s: value(samples, name, method="PUT", route=OBJECTS, status=s)
           for s in ("200", "201")}
    out["HEAD"] = value(samples, name, method="HEAD", route=OBJECTS)
    return out


def one_line(text: str) -> str:
    assert text.count("\n") == 1 and text.endswith("\n"), text
    return text.rstrip("\n")


def test_case_sign_writes_a_signed_packet_and_a_rerun_sends_nothing(d: Daemon) -> None:
    args = ["case", "sign", "contract.pdf", "--case", "MKT-2026-00042",
            "--evidence", "photo.png", "--evidence", "note.txt",
            "--signer", "seller-881:Acme Ltd:seller", "--signer", "buyer-19:J. Doe:buyer",
            "--wait"]
    before = puts(d)
    first = d.cli(*args)
    assert first.returncode == 0, first.stderr
    assert first.stderr == ""  # no terminal, no --progress: nothing but errors
    job_id, _, digest, _, written = one_line(first.stdout).split()[1:]
    signed = d.dir / "contract.signed.pdf"
    assert written == "contract.signed.pdf" and hashlib.sha256(signed.read_bytes()).hexdigest() == digest
    after_first = puts(d)
    assert after_first["201"] - before["201"] == 3

    assert embedded_files(signed) == {"photo.png": PNG, "note.txt": NOTE}
    ca = x509.load_pem_x509_certificate((d.dir / "ca.pem").read_bytes())
    statuses = pyhanko_statuses(signed, [ca])
    assert len(statuses) == 1 and statuses[0].intact and statuses[0].valid and statuses[0].trusted

    # Again, as after an interruption: every object is there, the job is the same one.
    signed.unlink()
    again = d.cli(*args)
    assert again.returncode == 0, again.stderr
    assert one_line(again.stdout).split()[1] == job_id
    assert hashlib.sha256(signed.read_bytes()).hexdigest() == digest
    after = puts(d)
    assert (after["200"], after["201"]) == (after_first["200"], after_first["201"])
    assert after["HEAD"] - after_first["HEAD"] == 3

    # jobs download: the same artifact, to -o and to ID.pdf in the current directory.
    got = d.cli("jobs", "download", job_id, "-o", "copy.pdf")
    assert got.returncode == 0, got.stderr
    assert one_line(got.stdout) == f"job {job_id} sha256 {digest} wrote copy.pdf"
    assert (d.dir / "copy.pdf").read_bytes() == signed.read_bytes()
    assert d.cli("jobs", "download", job_id).returncode == 0
    assert (d.dir / f"{job_id}.pdf").read_bytes() == signed.read_bytes()


class StallingProxy:
    """A TCP relay to the daemon that stops passing a connection's request bytes on
    after ``stall_after`` of them: an upload hung midway, until :meth:`close`."""

    def __init__(self, port: int, stall_after: int) -> None:
        self.port, self.stall_after = port, stall_after
        self.stalled = threading.Event()
        self.server = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.server.getsockname()[1]}"
        self.sockets: list[socket.socket] = [self.server]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.port))
            self.sockets += [client, upstream]
            for src, dst, limit in ((client, upstream, self.stall_after),
                                    (upstream, client, None)):
                threading.Thread(target=self._pipe, args=(src, dst, limit), daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket, limit: int | None) -> None:
        passed = 0
        try:
            while data := src.recv(1 << 16):
                if limit is not None and passed + len(data) > limit:
                    self.stalled.set()
                    return  # read no more: the client's sends block once buffers fill
                dst.sendall(data)
                passed += len(data)
        except OSError:
            pass
        for s in (src, dst):
            s.close()

    def close(self) -> None:
        for s in self.sockets:
            # shutdown wakes a thread blocked in recv and ends the TCP connection;
            # close alone would leave it open under that thread.
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()


def test_a_run_killed_mid_upload_resumes_and_progress_stays_off_stdout(d: Daemon) -> None:
    args = ["case", "sign", "contract.pdf", "--case", "RESUME-1", "--evidence", "photo.png",
            "--evidence", "readings.txt", "--wait", "--progress"]
    proxy = StallingProxy(d.port, stall_after=1 << 20)
    log = (d.dir / "killed.err").open("w+")
    try:
        env = {**d.env, "CASESIGND_URL": proxy.url, "CASESIGND_TOKEN": d.token}
        killed = subprocess.Popen([sys.executable, "-m", "casesignd", *args], cwd=d.dir,
                                  env=env, stdout=subprocess.DEVNULL, stderr=log)
        try:
            assert proxy.stalled.wait(30), "the upload never reached the proxy's limit"
        finally:
            killed.kill()
            killed.wait(10)
    finally:
        proxy.close()
        log.seek(0)
        cut = log.read()
        log.close()
    assert "upload evidence readings.txt:" in cut, cut
    sha = hashlib.sha256(BIG).hexdigest()
    assert d.request("HEAD", f"/v1/cases/RESUME-1/objects/{sha}").status == 404
    before = puts(d)

    done = d.cli(*args)
    assert done.returncode == 0, done.stderr
    line = one_line(done.stdout)
    assert line.startswith("job ") and line.endswith(" wrote contract.signed.pdf")
    after = puts(d)
    assert after["201"] - before["201"] == 1 and after["200"] == before["200"]
    err = done.stderr.splitlines()
    assert "contract contract.pdf: already there" in err
    assert "evidence photo.png: already there" in err
    assert any(e.startswith("upload evidence readings.txt: 100% ") for e in err), err
    assert any(e.endswith(" ready") and e.startswith("job ") for e in err), err
    assert embedded_files(d.dir / "contract.signed.pdf")["readings.txt"] == BIG


@pytest.mark.parametrize(("files", "rc", "start"), [
    (["contract.pdf", "--evidence", "photo.gif"], 1,
     "error: media_type_not_allowed: evidence photo.gif: "),
    (["photo.png"], 1, "error: malformed_pdf: contract photo.png: not a PDF"),
    (["contract.pdf", "--evidence", "missing.jpg"], 2,
     "error: cannot read evidence missing.jpg: no such file"),
    (["contract.pdf", "--signer", "no spaces:Acme:seller"], 1,
     "error: invalid_field: --signer no spaces: "),
])
def test_refusals_are_one_line_naming_the_file(d: Daemon, files: list[str], rc: int,
                                               start: str) -> None:
    (d.dir / "photo.gif").write_bytes(b"GIF89a\x01\x00\x01\x00\x00\x00\x00;")
    r = d.cli("case", "sign", *files, "--case", "REFUSED-1")
    assert (r.returncode, r.stdout) == (rc, "")
    assert one_line(r.stderr).startswith(start), r.stderr


def test_a_pdf_refused_by_the_worker_and_its_download(d: Daemon) -> None:
    (d.dir / "broken.pdf").write_bytes(b"%PDF-1.7\n1 0 obj <</Type /Catalog\n%%EOF\n")
    r = d.cli("case", "sign", "broken.pdf", "--case", "BROKEN-1", "--wait")
    assert (r.returncode, r.stdout) == (1, "")
    line = one_line(r.stderr)
    assert line.startswith("error: malformed_pdf: contract broken.pdf: job job_"), line
    # What the worker said, and why in a word: the refusal's message and reason.
    assert " failed: the PDF is damaged" in line
    assert "(category permanent_input, reason damaged, correlation id " in line
    job_id = line.split()[5]
    got = d.cli("jobs", "download", job_id)
    assert (got.returncode, got.stdout) == (1, "")
    assert one_line(got.stderr) == f"error: not_ready: job {job_id} is failed"
    assert not (d.dir / f"{job_id}.pdf").exists()
    bad = d.cli("case", "sign", "contract.pdf", "--case", "no spaces")
    assert bad.returncode == 2 and one_line(bad.stderr).startswith("error: invalid_case_id: --case: ")
