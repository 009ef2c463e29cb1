"""Temp areas: quota, private directories, cleanup on every exit, streaming checks."""

from __future__ import annotations

import asyncio
import hashlib
import os
import stat

import pytest

from casesignd.core.errors import DigestMismatch, LimitExceeded, SizeMismatch, TempQuota
from casesignd.core.sealed import is_sealed
from casesignd.files.temp import TempManager, charge_after, check_name


async def chunks_of(data: bytes, size: int = 10_000):
    for i in range(0, len(data), size):
        await asyncio.sleep(0)
        yield data[i : i + size]


@pytest.fixture
def manager(tmp_path):
    m = TempManager(tmp_path / "tmp", quota_bytes=1_000_000, retry_delay_s=2.5)
    m.sweep()
    return m


@pytest.mark.parametrize(
    "name, ok",
    [
        ("contract.pdf", True),
        ("item-3", True),
        ("a" * 64, True),
        ("a" * 65, False),
        (".hidden", False),
        (".", False),
        ("..", False),
        ("a/b", False),
        ("Upper.pdf", False),
        ("", False),
        ("x\x00", False),
    ],
)
def test_names_are_server_chosen(name, ok):
    if ok:
        assert check_name(name) == name
    else:
        with pytest.raises(ValueError):
            check_name(name)


@pytest.mark.parametrize(
    "reserved, used, charged", [(0, 0, 0), (100, 10, 100), (100, 150, 150), (0, 7, 7)]
)
def test_an_area_costs_its_reservation_or_what_it_wrote(reserved, used, charged):
    assert charge_after(reserved, used) == charged


def test_sweep_removes_what_a_crash_left_and_makes_root_private(tmp_path):
    root = tmp_path / "tmp"
    (root / "deadbeef" / "sub").mkdir(parents=True)
    (root / "deadbeef" / "sub" / "f").write_bytes(b"x")
    os.chmod(root / "deadbeef" / "sub", 0o500)  # read-only dir left by a tool
    (root / "stray").write_bytes(b"y")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep").write_bytes(b"k")
    os.symlink(outside, root / "link")
    m = TempManager(root, quota_bytes=10)
    assert m.sweep() == 3
    assert list(root.iterdir()) == []
    assert (outside / "keep").exists()  # the symlink was removed, not followed
    assert stat.S_IMODE(root.stat().st_mode) == 0o700
    assert TempManager(tmp_path / "new", 10).sweep() == 0
    assert stat.S_IMODE((tmp_path / "new").stat().st_mode) == 0o700


async def test_area_is_private_and_removed_on_success(manager):
    async with manager.attempt("job1", 1, 1000) as area:
        assert stat.S_IMODE(area.path.stat().st_mode) == 0o700
        assert area.path.parent == manager.root
        with area.create("out.pdf") as f:
            f.write(b"hello")
        assert stat.S_IMODE(os.stat(area.path_for("out.pdf")).st_mode) == 0o600
        with pytest.raises(FileExistsError):
            area.create("out.pdf")
        assert manager.usage().reserved_bytes == 1000
        path = area.path
    assert not path.exists()
    u = manager.usage()
    assert (u.reserved_bytes, u.used_bytes, u.free_bytes) == (0, 0, 1_000_000)
    assert u.fs_free_bytes > 0


async def test_create_does_not_follow_a_planted_symlink(manager, tmp_path):
    victim = tmp_path / "victim"
    victim.write_bytes(b"keep")
    async with manager.attempt("job", 1, 0) as area:
        os.symlink(victim, area.path / "out.pdf")
        with pytest.raises(OSError):
            area.create("out.pdf")
    assert victim.read_bytes() == b"keep"


async def test_area_removed_and_released_on_exception(manager):
    with pytest.raises(RuntimeError):
        async with manager.attempt("job", 1, 500) as area:
            area.create("x").close()
            path = area.path
            raise RuntimeError("boom")
    assert not path.exists()
    assert manager.usage().reserved_bytes == 0


async def test_area_removed_and_released_on_cancellation(manager):
    entered = asyncio.Event()
    seen = {}

    async def job():
        async with manager.attempt("job", 1, 500) as area:
            seen["path"] = area.path
            area.create("x").close()
            entered.set()
            await asyncio.sleep(3600)

    task = asyncio.create_task(job())
    await asyncio.wait_for(entered.wait(), 5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, 5)
    assert not seen["path"].exists()
    assert manager.usage().reserved_bytes == 0


async def test_quota_full_is_retryable_and_too_big_is_permanent(manager):
    async with manager.attempt("a", 1, 800_000):
        with pytest.raises(TempQuota) as e:
            async with manager.attempt("b", 1, 300_000):
                pass
        assert e.value.retryable and e.value.delay_s == 2.5
        async with manager.attempt("c", 1, 200_000):
            assert manager.usage().free_bytes == 0
    with pytest.raises(LimitExceeded) as e2:
        async with manager.attempt("d", 1, 1_000_001):
            pass
    assert not e2.value.retryable
    assert list(manager.root.iterdir()) == []


async def test_download_checks_digest_and_counts_bytes(manager):
    data = os.urandom(300_000)
    digest = hashlib.sha256(data).hexdigest()
    async with manager.attempt("j", 1, 0) as area:
        p = await area.download("doc.pdf", chunks_of(data), digest.upper(), len(data), 10**6)
        with p.open() as f:
            assert f.read() == data
        # On disk, ciphertext under the area's key for its name only; usage counts what
        # the disk holds (the header and a tag per 64 KiB chunk beside the plain bytes).
        assert p.key == area.key.for_name("doc.pdf") and is_sealed(p.path.read_bytes()) and data[:64] not in p.path.read_bytes()
        assert stat.S_IMODE(p.path.stat().st_mode) == 0o600
        on_disk = p.path.stat().st_size
        assert on_disk > len(data)
        assert manager.usage().used_bytes == on_disk
        assert manager.usage().free_bytes == 1_000_000 - on_disk
    assert manager.usage().used_bytes == 0


@pytest.mark.parametrize(
    "declared_sha, declared_size, max_bytes, error, code",
    [
        ("0" * 64, 5000, 10**6, DigestMismatch, "digest_mismatch"),
        (None, 4000, 10**6, SizeMismatch, "size_mismatch"),  # stream is longer
        (None, 6000, 10**6, SizeMismatch, "size_mismatch"),  # stream is shorter
        (None, None, 4999, LimitExceeded, "limit_exceeded"),
        (None, 10**7, 10**6, LimitExceeded, "limit_exceeded"),  # refused before reading
    ],
)
async def test_download_failures_leave_no_file(
    manager, declared_sha, declared_size, max_bytes, error, code
):
    data = b"z" * 5000
    async with manager.attempt("j", 1, 0) as area:
        with pytest.raises(error) as e:
            await area.download(
                "doc", chunks_of(data, 1000), declared_sha, declared_size, max_bytes
            )
        assert e.value.code == code
        assert not area.path_for("doc").exists()
        assert manager.usage().used_bytes == 0


async def test_download_stops_as_soon_as_the_limit_passes(manager):
    pulled = 0

    async def endless():
        nonlocal pulled
        while True:
            pulled += 1
            yield b"x" * 1024

    async with manager.attempt("j", 1, 0) as area:
        with pytest.raises(LimitExceeded):
            await area.download("doc", endless(), None, None, 10 * 1024)
    assert pulled == 11


async def test_writing_past_the_reservation_takes_quota_or_fails(tmp_path):
    from casesignd.core.sealed import sealed_size

    data = b"a" * 500_000
    quota = sealed_size(len(data)) + 100_000  # a's file on disk, and b's reservation
    m = TempManager(tmp_path / "t", quota_bytes=quota)
    m.sweep()
    async with m.attempt("a", 1, 100_000) as a, m.attempt("b", 1, 100_000) as b:
        await a.download("f", chunks_of(data), None, None, 10**6)
        assert m.usage().free_bytes == 0
        with pytest.raises(TempQuota):
            await b.download("f", chunks_of(data), None, None, 10**6)
        assert not b.path_for("f").exists()
    assert m.usage().free_bytes == quota


async def test_attempt_recreates_a_missing_root(tmp_path):
    m = TempManager(tmp_path / "gone" / "tmp", quota_bytes=10)
    async with m.attempt("j", 1, 0) as area:
        assert area.path.is_dir()
    assert stat.S_IMODE(m.root.stat().st_mode) == 0o700


async def test_an_fd_in_use_by_a_thread_is_closed_only_when_the_thread_is_done(tmp_path):
    from casesignd.files.temp import close_after

    fd = os.open(tmp_path / "f", os.O_WRONLY | os.O_CREAT, 0o600)
    pending = asyncio.get_running_loop().create_future()
    close_after(pending, fd)
    os.fstat(fd)  # still open while the "thread" runs
    pending.set_exception(OSError("the write failed after the caller left"))
    await asyncio.sleep(0)
    with pytest.raises(OSError):
        os.fstat(fd)
