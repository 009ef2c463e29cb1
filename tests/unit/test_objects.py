"""The object store: streaming upload, digest check, ownership by tenant and case."""

from __future__ import annotations

import asyncio
import hashlib
import os
import stat
import time

import pytest

from casesignd.core.errors import DigestMismatch, TooLarge, ValidationError
from casesignd.files.objects import ObjectStore, check_case_id, normalize_sha256, owner_dirs


async def body(data: bytes, size: int = 64 * 1024):
    for i in range(0, len(data), size):
        await asyncio.sleep(0)
        yield data[i : i + size]


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.fixture
def store(tmp_path):
    s = ObjectStore(tmp_path / "objects")
    s.sweep()
    return s


def leftovers(store: ObjectStore) -> list[str]:
    return os.listdir(store.root / "tmp")


@pytest.mark.parametrize(
    "case_id, ok",
    [
        ("MKT-2026-00042", True),
        ("a.b_c:d-e", True),
        (".", True),
        ("..", True),
        ("x" * 128, True),
        ("x" * 129, False),
        ("", False),
        ("a/b", False),
        ("a b", False),
        ("é", False),
    ],
)
def test_case_ids(case_id, ok):
    if ok:
        assert check_case_id(case_id) == case_id
    else:
        with pytest.raises(ValidationError) as e:
            check_case_id(case_id)
        assert e.value.code == "invalid_case_id"


def test_sha256_is_normalized_or_refused():
    assert normalize_sha256("AB" * 32) == "ab" * 32
    for bad in ("ab" * 31, "g" * 64, "../" + "a" * 61, ""):
        with pytest.raises(ValidationError) as e:
            normalize_sha256(bad)
        assert e.value.code == "invalid_sha256"


def test_owner_dirs_are_hex_and_unambiguous():
    dirs = {owner_dirs(t, c) for t, c in [("a", "b:c"), ("a:b", "c"), ("a", ".."), ("b", "..")]}
    assert len(dirs) == 4
    for t, c in dirs:
        assert len(t) == len(c) == 64 and all(ch in "0123456789abcdef" for ch in t + c)


async def test_put_creates_then_replays(store):
    data = os.urandom(200_000)
    r = await store.put("t1", "case-1", sha(data), body(data), 10**6, len(data))
    assert (r.created, r.size) == (True, len(data))
    p = store.path("t1", "case-1", sha(data))
    assert p is not None and p.read_bytes() == data
    assert stat.S_IMODE(p.stat().st_mode) == 0o600
    r2 = await store.put("t1", "case-1", sha(data).upper(), body(data), 10**6, None)
    assert (r2.created, r2.size) == (False, len(data))
    assert leftovers(store) == []


async def test_objects_belong_to_their_tenant_and_case(store):
    data = b"contract bytes"
    await store.put("t1", "..", sha(data), body(data), 1000, None)
    assert store.path("t1", "..", sha(data)) is not None
    assert store.path("t2", "..", sha(data)) is None
    assert store.path("t1", ".", sha(data)) is None
    assert store.path("t1", "../x", sha(data)) is None
    assert store.path("t1", "..", "0" * 64) is None
    # Nothing named after the case or tenant exists anywhere in the tree.
    for _dirpath, dirnames, filenames in os.walk(store.root):
        assert ".." not in dirnames and "t1" not in dirnames + filenames
    # Another tenant uploading the same bytes gets its own object, one stored blob.
    r = await store.put("t2", "..", sha(data), body(data), 1000, None)
    assert r.created
    assert store.path("t2", "..", sha(data)).stat().st_nlink == 3  # blob + two cases


@pytest.mark.parametrize(
    "named, declared, max_bytes, error, code",
    [
        ("0" * 64, None, 10**6, DigestMismatch, "digest_mismatch"),
        (None, 1000, 10**6, DigestMismatch, "digest_mismatch"),  # longer than declared
        (None, 300_000, 10**6, DigestMismatch, "digest_mismatch"),  # shorter than declared
        (None, None, 100_000, TooLarge, "too_large"),
        (None, 2 * 10**6, 10**6, TooLarge, "too_large"),  # refused before reading
    ],
)
async def test_put_failures_leave_nothing(store, named, declared, max_bytes, error, code):
    data = os.urandom(200_000)
    with pytest.raises(error) as e:
        await store.put("t", "c", named or sha(data), body(data), max_bytes, declared)
    assert e.value.code == code
    assert e.value.status in (413, 422)
    assert store.path("t", "c", named or sha(data)) is None
    assert leftovers(store) == []
    assert list((store.root / "blobs").iterdir()) == []


async def test_put_stops_reading_once_too_large(store):
    pulled = 0

    async def endless():
        nonlocal pulled
        while True:
            pulled += 1
            yield b"x" * 65536

    with pytest.raises(TooLarge):
        await store.put("t", "c", "a" * 64, endless(), 10 * 65536, None)
    assert pulled == 11
    assert leftovers(store) == []


async def test_concurrent_puts_of_one_object_create_it_once(store):
    data = os.urandom(500_000)
    results = await asyncio.gather(
        *(store.put("t", "c", sha(data), body(data), 10**6, None) for _ in range(4))
    )
    assert sorted(r.created for r in results) == [False, False, False, True]
    assert leftovers(store) == []


async def test_cancelled_upload_leaves_no_partial_file(store):
    started = asyncio.Event()

    async def stalled():
        yield b"x" * 300_000
        started.set()
        await asyncio.sleep(3600)
        yield b"never"

    task = asyncio.create_task(store.put("t", "c", "a" * 64, stalled(), 10**6, None))
    await asyncio.wait_for(started.wait(), 5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, 5)
    assert leftovers(store) == []


def test_sweep_removes_stale_uploads(tmp_path):
    s = ObjectStore(tmp_path / "o")
    s.sweep()
    (s.root / "tmp" / "local.abc.part").write_bytes(b"half")
    assert s.sweep() == 1
    assert stat.S_IMODE(s.root.stat().st_mode) == 0o700


def test_a_node_sweeps_its_own_uploads_and_another_nodes_only_when_a_day_old(tmp_path):
    a, b = ObjectStore(tmp_path / "o", "node-a"), ObjectStore(tmp_path / "o", "node-b")
    a.sweep()
    tmp = a.root / "tmp"
    (tmp / "node-a.1.part").write_bytes(b"mine, left by my crash")
    (tmp / "node-b.2.part").write_bytes(b"node-b's, in flight now")
    (tmp / "node-c.3.part").write_bytes(b"node-c's, from yesterday")
    day_old = time.time() - 86400 - 60
    os.utime(tmp / "node-c.3.part", (day_old, day_old))
    assert a.sweep() == 2
    assert sorted(os.listdir(tmp)) == ["node-b.2.part"]
    assert b.sweep() == 1


async def test_a_removed_object_takes_the_links_an_attempt_left_but_not_another_cases(store, tmp_path):
    data = b"a document of one case"
    await store.put("t1", "case-1", sha(data), body(data), 10**6, len(data))
    await store.put("t2", "case-9", sha(data), body(data), 10**6, len(data))
    jobs = tmp_path / "temp" / "node" / "attempt-1"
    jobs.mkdir(parents=True)
    os.link(store.blob_path(sha(data)), jobs / "input.pdf")  # as casesignd.files.sources does
    store.job_roots = [tmp_path / "temp"]
    # Another case still has it: only this case's name goes.
    assert store.remove("t1", "case-1", sha(data)) == 0
    assert store.blob_path(sha(data)).exists() and (jobs / "input.pdf").exists()
    # The last case's: the blob goes, and the link an attempt left with it.
    assert store.remove("t2", "case-9", sha(data)) == len(data)
    assert not store.blob_path(sha(data)).exists() and not (jobs / "input.pdf").exists()
