"""ClamdScanner against a real clamd with a test-only EICAR signature."""

from __future__ import annotations

import asyncio
import os
import shutil
from pathlib import Path

import pytest

from casesignd.config import Config, Scanner
from casesignd.core.errors import MalwareDetected, ScanLimitExceeded, ScannerUnavailable
from casesignd.files.scanner import (
    ClamdScanner,
    NoopScanner,
    Verdict,
    instream_frames,
    make_scanner,
    parse_reply,
)
from tests.helpers_clamd import (
    EICAR_SIGNATURE,
    STREAM_MAX_BYTES,
    clamd_socket,  # noqa: F401  (session fixture)
    eicar_bytes,
    needs_clamd,
    short_tempdir,
    start_clamd,
)

TIMEOUT_S = 10.0

# --- pure parts (no clamd needed) ----------------------------------------------------


@pytest.mark.parametrize(("reply", "outcome"), [
    (b"stream: OK\0", Verdict(None)),
    (b"stream: OK\n", Verdict(None)),
    (b"stream: Win.Test.EICAR_HDB-1 FOUND\0", Verdict("Win.Test.EICAR_HDB-1")),
    (b"stream: Casesignd.Test.EICAR.UNOFFICIAL FOUND\0",
     Verdict("Casesignd.Test.EICAR.UNOFFICIAL")),
    (b"INSTREAM size limit exceeded. ERROR\0", "scan_limit_exceeded"),
    (b"stream: Can't allocate memory ERROR\0", "scanner_unavailable"),
    (b"UNKNOWN COMMAND\0", "scanner_unavailable"),
    (b"", "scanner_unavailable"),
])
def test_parse_reply(reply: bytes, outcome: object) -> None:
    if isinstance(outcome, Verdict):
        assert parse_reply(reply) == outcome
        return
    with pytest.raises((ScanLimitExceeded, ScannerUnavailable)) as info:
        parse_reply(reply)
    assert info.value.code == outcome
    assert info.value.retryable is (outcome == "scanner_unavailable")


def test_instream_frames() -> None:
    # clamd(8): "<length><data>" with a 4-byte unsigned big-endian length.
    assert instream_frames(b"abc") == b"\x00\x00\x00\x03abc"
    assert instream_frames(b"") == b"\x00\x00\x00\x00"


async def test_make_scanner() -> None:
    assert isinstance(make_scanner(Config()), NoopScanner)
    await make_scanner(Config()).scan(Path("/nonexistent"), "x")
    cfg = Config(scanner=Scanner(kind="clamd", socket="/run/x.sock", timeout_s=3.0))
    scanner = make_scanner(cfg)
    assert isinstance(scanner, ClamdScanner)
    assert (scanner.socket_path, scanner.timeout_s) == ("/run/x.sock", 3.0)


async def test_unreachable_socket_is_unavailable(tmp_path: Path) -> None:
    sample = tmp_path / "a.txt"
    sample.write_text("hello\n")
    scanner = ClamdScanner(str(tmp_path / "nobody.sock"), 1.0)
    with pytest.raises(ScannerUnavailable):
        await scanner.scan(sample, "a.txt")
    assert not await scanner.ping()


# --- against a real clamd ------------------------------------------------------------


@needs_clamd
async def test_clean_file_passes(clamd_socket: str, tmp_path: Path) -> None:  # noqa: F811
    clean = tmp_path / "letter.txt"
    clean.write_text("Dear J. Doe,\nplease find the contract attached.\n")
    await ClamdScanner(clamd_socket, TIMEOUT_S).scan(clean, "letter.txt")


@needs_clamd
async def test_eicar_is_detected_by_name(clamd_socket: str, tmp_path: Path) -> None:  # noqa: F811
    infected = tmp_path / "photo-1.jpg"
    infected.write_bytes(eicar_bytes())
    with pytest.raises(MalwareDetected) as info:
        await ClamdScanner(clamd_socket, TIMEOUT_S).scan(infected, "photo-1.jpg")
    assert info.value.code == "malware_detected"
    assert not info.value.retryable
    assert info.value.detail["signature"].startswith(EICAR_SIGNATURE)
    assert "photo-1.jpg" in info.value.message


@needs_clamd
async def test_large_file_streams_in_chunks(clamd_socket: str, tmp_path: Path) -> None:  # noqa: F811
    # Three quarters of StreamMaxLength in 64 KiB chunks, the EICAR string far past
    # the first chunk: found only if every chunk arrived in order.
    size = STREAM_MAX_BYTES * 3 // 4
    big = tmp_path / "scan.bin"
    with open(big, "wb") as f:
        f.write(os.urandom(size - 1000))
        f.write(eicar_bytes())
    scanner = ClamdScanner(clamd_socket, TIMEOUT_S, chunk_bytes=64 * 1024)
    with pytest.raises(MalwareDetected):
        await scanner.scan(big, "scan.bin")
    clean = tmp_path / "clean.bin"
    with open(clean, "wb") as f:
        f.write(b"\x00" * size)
    await scanner.scan(clean, "clean.bin")


@needs_clamd
async def test_file_over_the_stream_limit_is_a_permanent_error(
    clamd_socket: str, tmp_path: Path,  # noqa: F811
) -> None:
    big = tmp_path / "huge.bin"
    with open(big, "wb") as f:
        f.truncate(STREAM_MAX_BYTES + 1024 * 1024)
    with pytest.raises(ScanLimitExceeded) as info:
        await ClamdScanner(clamd_socket, TIMEOUT_S, chunk_bytes=256 * 1024).scan(big, "huge.bin")
    assert info.value.code == "scan_limit_exceeded"
    assert not info.value.retryable


@needs_clamd
async def test_concurrent_scans(clamd_socket: str, tmp_path: Path) -> None:  # noqa: F811
    files = []
    for i in range(6):
        p = tmp_path / f"f{i}.txt"
        p.write_bytes(eicar_bytes() if i % 2 else b"clean text\n" * 1000)
        files.append(p)
    scanner = ClamdScanner(clamd_socket, TIMEOUT_S)
    results = await asyncio.gather(*(scanner.scan(p, p.name) for p in files),
                                   return_exceptions=True)
    assert [type(r) for r in results] == [type(None), MalwareDetected] * 3


@needs_clamd
async def test_ping(clamd_socket: str) -> None:  # noqa: F811
    assert await ClamdScanner(clamd_socket, TIMEOUT_S).ping()


@needs_clamd
async def test_stopped_clamd_is_unavailable_and_retryable(tmp_path: Path) -> None:
    workdir = short_tempdir()
    clamd = await asyncio.to_thread(start_clamd, workdir)
    try:
        scanner = ClamdScanner(clamd.socket_path, TIMEOUT_S)
        sample = tmp_path / "a.txt"
        sample.write_text("hello\n")
        await scanner.scan(sample, "a.txt")
        await asyncio.to_thread(clamd.stop)
        with pytest.raises(ScannerUnavailable) as info:
            await scanner.scan(sample, "a.txt")
        assert info.value.retryable and info.value.code == "scanner_unavailable"
        assert not await scanner.ping()
    finally:
        await asyncio.to_thread(clamd.stop)
        shutil.rmtree(workdir, ignore_errors=True)


async def test_silent_scanner_times_out(tmp_path: Path) -> None:
    # Something listens on the socket but never answers: the timeout decides.
    workdir = short_tempdir()
    path = str(workdir / "silent.sock")

    async def hold(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read()  # read until the client gives up, never reply
        writer.close()

    server = await asyncio.start_unix_server(hold, path)
    try:
        sample = tmp_path / "a.txt"
        sample.write_text("hello\n")
        with pytest.raises(ScannerUnavailable) as info:
            await ClamdScanner(path, 0.3).scan(sample, "a.txt")
        assert "in time" in info.value.message
        assert not await ClamdScanner(path, 0.3).ping()
    finally:
        server.close()
        await server.wait_closed()
        shutil.rmtree(workdir, ignore_errors=True)
