"""A large artifact is written out in steps while it is copied, so that other fsyncs
(a kiosk request's object and store commits) never wait for its whole size."""

from __future__ import annotations

import hashlib
import os

import pytest

from casesignd.files import artifacts
from casesignd.files.artifacts import ArtifactStore

SECRET = b"s" * 32
MiB = 1024 * 1024


@pytest.mark.parametrize(("size", "syncs"), [
    (1000, 0),
    (8 * MiB - 1, 0),
    (8 * MiB, 1),
    (20 * MiB + 5, 2),
])
def test_publish_syncs_data_every_8_mib_and_keeps_the_bytes(tmp_path, monkeypatch, size, syncs):
    calls = []
    real = os.fdatasync
    monkeypatch.setattr(artifacts.os, "fdatasync", lambda fd: (calls.append(fd), real(fd))[1])
    src = tmp_path / "signed.pdf"
    data = os.urandom(size)
    src.write_bytes(data)
    store = ArtifactStore(tmp_path / "artifacts", SECRET)
    art = store.publish(src, store.artifact_id("t", "sig:x"), "application/pdf")
    assert art.sha256 == hashlib.sha256(data).hexdigest() and art.size == size
    assert store.open_path(art.artifact_id).read_bytes() == data
    assert len(calls) == syncs


async def test_an_upload_is_written_out_in_steps_too(tmp_path, monkeypatch):
    from casesignd.files import temp as tempfiles

    calls = []
    real = os.fdatasync
    monkeypatch.setattr(tempfiles.os, "fdatasync", lambda fd: (calls.append(fd), real(fd))[1])
    path = tmp_path / "upload.part"
    writer = tempfiles.HashingWriter(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    chunk = os.urandom(MiB)
    try:
        for _ in range(20):
            await writer.write(chunk)
        await writer.fsync()
    finally:
        writer.close()
    assert len(calls) == 2
    assert writer.hexdigest() == hashlib.sha256(chunk * 20).hexdigest()
    assert path.stat().st_size == 20 * MiB


def test_concurrent_publications_into_one_directory_share_their_fsyncs(tmp_path):
    import threading
    import time as _time

    from casesignd.files.artifacts import DirSyncs

    calls: list[float] = []

    def slow_sync(path):
        calls.append(_time.monotonic())
        _time.sleep(0.05)

    syncs = DirSyncs(slow_sync)
    threads = [threading.Thread(target=syncs.sync, args=(tmp_path,)) for _ in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # Every caller returned after an fsync that began after it came; twelve callers
    # arriving together need one or two, never twelve.
    assert 1 <= len(calls) <= 3 and syncs.syncs == len(calls)
    syncs.sync(tmp_path)  # a later caller gets an fsync of its own
    assert len(calls) >= 2


def test_a_failed_directory_fsync_is_raised_and_the_next_caller_tries_again(tmp_path):
    import pytest

    from casesignd.files.artifacts import DirSyncs

    failures = [OSError("EIO")]

    def flaky(path):
        if failures:
            raise failures.pop()

    syncs = DirSyncs(flaky)
    with pytest.raises(OSError):
        syncs.sync(tmp_path)
    syncs.sync(tmp_path)
    assert syncs.syncs == 1
