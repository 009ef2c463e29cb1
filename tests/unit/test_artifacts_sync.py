"""A large artifact is written out in steps while it is copied, so that other fsyncs
(a kiosk request's object and store commits) never wait for its whole size."""

from __future__ import annotations

import hashlib
import os

import pytest

from casesignd import artifacts
from casesignd.artifacts import ArtifactStore

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
    from casesignd import tempfiles

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
