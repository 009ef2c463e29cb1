"""The temp volume holds ciphertext only: a case packet whose contract and evidence
carry a marker, the daemon killed (-9) in the middle of each phase of its job, leaves
no file under the temp root with the marker or any 64-byte run of the contract; the
restarted daemon signs it. A sealed temp file altered while its job waits (a flipped
byte, a chunk from another file, a cut tail) ends that attempt in the retryable
``io_error``, and the next attempt signs from the source: never what was altered."""

from __future__ import annotations

import contextlib
import hashlib
import io
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from casesignd.core.sealed import CHUNK_PLAIN_BYTES, HEADER_BYTES, TAG_BYTES, is_sealed
from tests.helpers_chaos import ThreadedSource
from tests.helpers_clamd import short_tempdir
from tests.helpers_http_source import Body, Trickle
from tests.helpers_pki import pki, pyhanko_statuses  # noqa: F401 - the fixture
from tests.helpers_tsa import LocalTsa

MARKER = b"SEALTEMP-MARKER-4b1d9e"
STRIDE = CHUNK_PLAIN_BYTES + TAG_BYTES
SIGNERS = [{"id": "seller-1", "name": "Acme Ltd", "role": "seller"}]


def marked_contract(pages: int = 30) -> bytes:
    """A PDF whose page streams are left uncompressed, so the marker and long runs of
    plain text are in its bytes."""
    from reportlab.lib.pagesizes import A4
    from reportlab.pdfgen import canvas

    out = io.BytesIO()
    c = canvas.Canvas(out, pagesize=A4, pageCompression=0, invariant=1)
    for page in range(pages):
        for line in range(60):
            c.drawString(30, 800 - 12 * line,
                         f"{MARKER.decode()} page {page} line {line} the parties agree " * 2)
        c.showPage()
    c.save()
    data = out.getvalue()
    assert data.count(MARKER) > 1000
    return data


def marked_note() -> bytes:
    return b"".join(b"%s evidence line %06d: delivered as agreed\n" % (MARKER, i)
                    for i in range(3000))


def packet(case_id: str, contract: bytes, note: bytes) -> dict:
    def remote(data: bytes, path: str) -> dict:
        return {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data),
                "object_ref": f"remote:{path}"}

    return {"kind": "sign_case", "case_id": case_id, "signers": SIGNERS, "items": [
        {"role": "contract", "name": "contract.pdf", "media_type": "application/pdf",
         **remote(contract, "contract.pdf")},
        {"role": "evidence", "name": "note.txt", "media_type": "text/plain",
         **remote(note, "note.txt")}]}


class HangingClamd:
    """clamd's protocol on a unix socket: ``PING`` answered at once; each ``INSTREAM``
    read whole, then answered clean, from the :attr:`hold_from`-th on only once
    :attr:`release` is set."""

    def __init__(self) -> None:
        self.hold_from = 1
        self.path = str(short_tempdir() / "clamd.sock")
        self.release = threading.Event()
        self.streams = 0
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock.bind(self.path)
        self._sock.listen(16)
        self._thread = threading.Thread(target=self._serve, daemon=True)

    def __enter__(self) -> HangingClamd:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release.set()
        self._sock.close()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    def _answer(self, conn: socket.socket) -> None:
        with conn, contextlib.suppress(OSError):
            f = conn.makefile("rb")
            command = b""
            while not command.endswith(b"\0"):
                command += f.read(1)
            if command == b"zPING\0":
                conn.sendall(b"PONG\0")
                return
            while (size := struct.unpack(">I", f.read(4))[0]) > 0:
                f.read(size)
            self.streams += 1
            if self.streams >= self.hold_from:
                self.release.wait(120)
            conn.sendall(b"stream: OK\0")


def wait_until(cond: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        if time.monotonic() > deadline:
            raise TimeoutError(what)
        time.sleep(0.05)


def temp_files(d) -> list[Path]:
    return [p for p in (d.dir / d.config["storage"].get("temp_dir", "tmp")).rglob("*")
            if p.is_file()]


def plain_runs(contract: bytes) -> set[bytes]:
    """The contract's 32-byte blocks at offsets that are multiples of 32: any 64-byte
    run of it holds one of them whole."""
    return {contract[i:i + 32] for i in range(0, len(contract) - 31, 32)}


def assert_no_plain_under_temp(d, contract: bytes) -> int:
    """No file under the temp root holds the marker or 64 bytes of the contract;
    returns how many files were scanned."""
    blocks = plain_runs(contract)
    files = temp_files(d)
    for path in files:
        data = path.read_bytes()
        assert MARKER not in data, path
        hit = next((i for i in range(len(data) - 31) if data[i:i + 32] in blocks), None)
        assert hit is None, f"{path} holds plain contract bytes at {hit}"
    return len(files)


def area_file(d, name: str) -> Path | None:
    found = [p for p in temp_files(d) if p.name == name]
    return found[0] if found else None


@contextlib.contextmanager
def phase_hold(phase: str, daemon_factory, tmp_path: Path, pki, contract: bytes,  # noqa: F811
               note: bytes, held_scan: int = 1, more: dict[str, bytes] | None = None
               ) -> Iterator[tuple[object, Callable[[], None], Callable[[], None]]]:
    """A daemon whose job is about to be held in ``phase``: yields it, a wait for the
    job to be there, and what lets the job go on after a restart. In the check
    phase the job is held at its ``held_scan``-th item's scan, that item read whole.
    ``more``: other files the source serves, by path."""
    with ThreadedSource() as source, HangingClamd() as clamd, LocalTsa(pki.tsa) as tsa:
        clamd.hold_from = held_scan
        if phase == "publish":
            # Held at the timestamp: after the key, before publishing, the signed body
            # sealed in the area and the signature's end in memory.
            tsa.answer.clear()
        source.script("/contract.pdf", [Trickle(contract, 16 * 1024, 0.4)] if phase == "fetch"
                      else [Body(contract)])
        source.script("/note.txt", [Body(note)])
        for path, body in (more or {}).items():
            source.script(path, [Body(body)] * 3)
        overrides = {"sources": [{"name": "remote", "kind": "http", "base_url": source.base_url,
                                  "read_timeout_s": 30.0}],
                     "scanner": {"kind": "clamd", "socket": clamd.path, "timeout_s": 120.0},
                     "policies": [{"version": "contract-v1", "tsa_url": tsa.url,
                                   "tsa_timeout_s": 120.0}],
                     "retry": {"base_delay_s": 0.2, "max_delay_s": 1.0}}
        if phase != "check":
            clamd.release.set()
        d = daemon_factory(overrides, sign_delay_ms=60000 if phase == "sign" else 0)
        waits = {
            "fetch": lambda: (f := area_file(d, "item-0")) is not None
            and f.stat().st_size > 3 * STRIDE,
            "check": lambda: clamd.streams >= held_scan,
            "sign": lambda: area_file(d, "signed.pdf") is not None,
            "publish": tsa.waiting.is_set,
        }

        def go_on() -> None:
            clamd.release.set()
            tsa.answer.set()
            d.sign_delay_ms = 0
            source.script("/contract.pdf", [Body(contract)] * 3)

        yield d, lambda: wait_until(waits[phase], 60, f"the job never reached {phase}"), go_on
        go_on()


@pytest.mark.parametrize("phase", ["fetch", "check", "sign", "publish"])
def test_kill9_in_each_phase_leaves_only_ciphertext_under_the_temp_root(
        daemon_factory, tmp_path, pki, phase):  # noqa: F811 - the fixture
    contract, note = marked_contract(), marked_note()
    with phase_hold(phase, daemon_factory, tmp_path, pki, contract, note) as (d, reached, go_on):
        r = d.submit(packet(f"SEAL-{phase}", contract, note))
        assert r.status == 202, r.body
        job_id = r.json()["job_id"]
        reached()
        time.sleep(0.3)  # well inside the phase
        d.kill9()
        scanned = assert_no_plain_under_temp(d, contract)
        assert scanned >= 1 and all(is_sealed(p.read_bytes()[:8]) for p in temp_files(d)
                                    if p.stat().st_size >= 8)
        go_on()
        d.start()
        job = d.wait_job(job_id, timeout_s=120)
        assert job["state"] == "ready", job
        signed = d.request("GET", job["result"]["download_url"], auth=False).body
        assert MARKER in signed  # the marked contract is what was signed
        statuses = pyhanko_statuses_of(signed, tmp_path, d)
        assert statuses and all(s.intact and s.valid for s in statuses)
        # The restart swept what the killed run left.
        assert_no_plain_under_temp(d, contract)


def pyhanko_statuses_of(signed: bytes, tmp_path: Path, d) -> list:
    from cryptography import x509

    path = tmp_path / "signed.pdf"
    path.write_bytes(signed)
    return pyhanko_statuses(path, [x509.load_pem_x509_certificate((d.dir / "ca.pem").read_bytes())])


def flip_a_byte(item0: Path, item1: Path) -> None:
    data = bytearray(item0.read_bytes())
    data[HEADER_BYTES + 2 * STRIDE + 77] ^= 0x01
    item0.write_bytes(bytes(data))


def flip_an_evidence_byte(item0: Path, item1: Path) -> None:
    """The evidence, whose digest the signature binds without hashing it again."""
    flip_a_byte(item1, item0)


def swap_a_chunk(item0: Path, item1: Path) -> None:
    """Chunk 1 of the evidence (same key, another file) in place of the contract's."""
    data, other = bytearray(item0.read_bytes()), item1.read_bytes()
    at = HEADER_BYTES + STRIDE
    data[at:at + STRIDE] = other[at:at + STRIDE]
    item0.write_bytes(bytes(data))


def cut_the_tail(item0: Path, item1: Path) -> None:
    data = item0.read_bytes()
    item0.write_bytes(data[:len(data) - 1000])


def signed_after_an_io_error(d, job_id: str) -> bytes:
    """The document a job signed once, on the attempt after one that ended in io_error."""
    job = d.wait_job(job_id, timeout_s=120)
    assert job["state"] == "ready", job
    events = d.events(job_id)
    retries = [e["detail"].get("code") for e in events if e["type"] == "retry_scheduled"]
    assert retries == ["io_error"], events
    assert [e["type"] for e in events].count("signed") == 1
    return d.request("GET", job["result"]["download_url"], auth=False).body


@pytest.mark.parametrize("tamper", [flip_a_byte, flip_an_evidence_byte, swap_a_chunk, cut_the_tail],
                         ids=["flipped byte", "flipped evidence byte", "chunk from another file",
                              "cut tail"])
def test_a_tampered_temp_file_is_a_retryable_io_error_never_signed(
        daemon_factory, tmp_path, pki, tamper):  # noqa: F811 - the fixture
    contract, note = marked_contract(), marked_note()
    # Altered once the scanner has read it, the evidence is found out by the signing.
    held = 2 if tamper is flip_an_evidence_byte else 1
    with phase_hold("check", daemon_factory, tmp_path, pki, contract, note,
                    held_scan=held) as (d, reached, go_on):
        job_id = d.submit(packet("SEAL-TAMPER", contract, note)).json()["job_id"]
        reached()  # both items fetched and sealed; the scanner holds the job
        item0, item1 = area_file(d, "item-0"), area_file(d, "item-1")
        assert item0 is not None and item1 is not None
        assert item1.stat().st_size > 2 * STRIDE
        tamper(item0, item1)
        go_on()
        signed = signed_after_an_io_error(d, job_id)
        assert MARKER in signed
        # The evidence is bound by the digest of what was received, embedded whole.
        assert b"/SHA256 (%s)" % hashlib.sha256(note).hexdigest().encode() in signed
        assert note in signed
        statuses = pyhanko_statuses_of(signed, tmp_path, d)
        assert statuses and all(s.intact and s.valid for s in statuses)
        assert "internal_error" not in d.logs()


def test_evidence_swapped_for_another_file_of_its_area_is_never_signed_as_it(
        daemon_factory, tmp_path, pki):  # noqa: F811 - the fixture
    # Every file of an attempt's area is sealed under the area's key, so one copied
    # over another authenticates chunk by chunk. The evidence is bound by the digest
    # its download was checked under, not hashed again: the second note's file made
    # a copy of the first's must end the attempt (io_error), not sign the first
    # note's bytes under the second's digest.
    contract, note = marked_contract(), marked_note()
    other = note.replace(b"delivered", b"refused!!")
    with phase_hold("check", daemon_factory, tmp_path, pki, contract, note, held_scan=3,
                    more={"/other.txt": other}) as (d, reached, go_on):
        body = packet("SEAL-SWAP", contract, note)
        body["items"].append({**body["items"][1], "name": "other.txt",
                              "sha256": hashlib.sha256(other).hexdigest(),
                              "size": len(other), "object_ref": "remote:other.txt"})
        job_id = d.submit(body).json()["job_id"]
        reached()  # every item fetched and sealed, the last one's scan held
        item1, item2 = area_file(d, "item-1"), area_file(d, "item-2")
        assert item1 is not None and item2 is not None
        item2.write_bytes(item1.read_bytes())
        go_on()
        signed = signed_after_an_io_error(d, job_id)
        assert note in signed and other in signed
        assert b"/SHA256 (%s)" % hashlib.sha256(other).hexdigest().encode() in signed
        assert "internal_error" not in d.logs()


def test_a_signed_body_swapped_for_another_file_of_its_area_is_never_published(
        daemon_factory, tmp_path, pki):  # noqa: F811 - the fixture
    # Held at the timestamp, the signed body waits sealed in the area under the key
    # its downloads share. The contract's file copied over it must not be published
    # with the signature's end as the signed document.
    contract, note = marked_contract(), marked_note()
    with phase_hold("publish", daemon_factory, tmp_path, pki, contract, note) as (
            d, reached, go_on):
        job_id = d.submit(packet("SEAL-BODY", contract, note)).json()["job_id"]
        reached()
        body, item0 = area_file(d, "signed.pdf"), area_file(d, "item-0")
        assert body is not None and item0 is not None
        body.write_bytes(item0.read_bytes())
        go_on()
        signed = signed_after_an_io_error(d, job_id)
        assert note in signed
        statuses = pyhanko_statuses_of(signed, tmp_path, d)
        assert statuses and all(s.intact and s.valid for s in statuses)
        assert "internal_error" not in d.logs()
