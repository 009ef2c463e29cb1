"""The signing ladder on its own: a key in the CPU process or a token's key signing
on the daemon's side, a document in memory or a file, and the refusal of a job whose
policy is gone. The CPU process is this one (its calls run inline)."""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from casesignd.core.calls import NO_CALLS
from casesignd.core.errors import PermanentJobError
from casesignd.ops import devpki
from casesignd.signing import cms, worker
from casesignd.signing.keys import LocalSigner
from casesignd.signing.ladder import Ladder, Stored, policy_in_force
from casesignd.signing.levels import SigningPolicy
from casesignd.signing.longterm import LongTerm, LongTermSettings
from casesignd.signing.pades import SignatureMeta
from tests.helpers_corpus import _one_page
from tests.helpers_pki import pyhanko_statuses

META = SignatureMeta(signing_time=dt.datetime(2026, 1, 1, tzinfo=dt.UTC), name="x")
B_B = SigningPolicy(version="v1")


class Services:
    """The daemon's signing services, for one key."""

    def __init__(self, signer: LocalSigner | None) -> None:
        self.signer = signer
        self.longterm = LongTerm(LongTermSettings(), lambda: [B_B])
        self.calls = NO_CALLS

    def cms_template(self) -> cms.SignerInfoTemplate:
        assert self.signer is not None
        return cms.template_for(self.signer.cert, tuple(self.signer.chain))

    def contents_bytes(self, timestamped: bool) -> int:
        return 8192


class InlineSteps:
    """An attempt whose CPU process is this one; it counts what the ladder asks of it."""

    def __init__(self) -> None:
        self.phases: list[str] = []
        self.slots = 0
        self.leases = 0

    @asynccontextmanager
    async def phase(self, name: str) -> AsyncIterator[None]:
        self.phases.append(name)
        yield

    def record_phase(self, name: str, took: float) -> None:
        self.phases.append(name)

    async def check_lease(self) -> None:
        self.leases += 1

    @asynccontextmanager
    async def key_slot(self) -> AsyncIterator[None]:
        self.slots += 1
        yield

    async def in_process(self, fn: Any, *args: Any) -> tuple[Any, float]:
        return fn(*args), 0.0


@pytest.fixture(scope="module")
def identity() -> tuple[devpki.Identity, Any]:
    ca = devpki.make_ca(kind="ec")
    return devpki.issue(ca, "ladder", kind="ec"), ca.cert


@pytest.fixture(params=["token", "in_process"])
def key(request: pytest.FixtureRequest, identity: Any) -> Iterator[tuple[Ladder, str]]:
    """The ladder, with the key in the CPU process or (a token's) only on the daemon's side."""
    ident, _ = identity
    signer = LocalSigner(ident.key, ident.cert, ident.chain)
    services = Services(signer)
    held = signer.for_process() if request.param == "in_process" else None
    worker.init_signing_process(services.cms_template(), held)
    try:
        yield Ladder(services), request.param
    finally:
        worker._PROCESS.clear()


async def _valid(path: Path, trust: Any) -> None:
    # pyHanko's validation runs a loop of its own: in a thread, off this one.
    statuses = await asyncio.to_thread(pyhanko_statuses, path, [trust])
    assert len(statuses) == 1
    assert statuses[0].intact and statuses[0].valid and statuses[0].trusted  # type: ignore[attr-defined]


async def test_a_document_in_memory_is_signed_where_its_key_is(key, identity, tmp_path) -> None:
    ladder, where = key
    steps = InlineSteps()
    doc = _one_page()
    signed = await ladder.sign_bytes(steps, doc, meta=META, policy=B_B)
    assert signed.base == doc and signed.appended.level == "B-B"
    # A token's key signs under a key slot held by the daemon's side; a key in the
    # process signs within the process's own call, and finishes the document there.
    assert steps.slots == (1 if where == "token" else 0)
    assert (signed.sha256 is None) == (where == "token")
    assert steps.phases == ["validate", "sign"]
    out = tmp_path / "signed.pdf"
    out.write_bytes(signed.base + signed.appended.tail)
    await _valid(out, identity[1])


async def test_a_stored_object_is_read_where_it_is(key, identity, tmp_path) -> None:
    import hashlib

    ladder, _where = key
    doc = _one_page()
    path = tmp_path / "object"
    path.write_bytes(doc)
    stored = Stored(str(path), hashlib.sha256(doc).hexdigest(), len(doc))
    signed = await ladder.sign_bytes(InlineSteps(), stored, meta=META, policy=B_B)
    assert signed.base == doc
    out = tmp_path / "signed.pdf"
    out.write_bytes(signed.base + signed.appended.tail)
    await _valid(out, identity[1])


async def test_a_file_is_signed_in_place(key, identity, tmp_path) -> None:
    ladder, where = key
    src = tmp_path / "in.pdf"
    src.write_bytes(_one_page())
    dst = tmp_path / "signed.pdf"
    steps = InlineSteps()
    signed = await ladder.sign_file(steps, src, dst, meta=META, attachments=[], policy=None)
    assert signed.appended.level == "B-B" and signed.appended.tail == b""
    assert steps.slots == (1 if where == "token" else 0)
    assert steps.phases == ["sign"] and steps.leases == 1 + (where == "token")
    await _valid(dst, identity[1])


async def test_no_key_is_refused_before_anything_is_read(tmp_path) -> None:
    from casesignd.core.errors import SigningError

    ladder = Ladder(Services(None))
    steps = InlineSteps()
    with pytest.raises(SigningError) as e:
        await ladder.sign_bytes(steps, b"not read", meta=META, policy=B_B)
    assert e.value.code == "signing_key_unavailable" and steps.phases == []


@pytest.mark.parametrize("policy, at_least, message", [
    (None, None, "the job's policy is no longer configured"),
    (SigningPolicy(version="v1", signature_level="B-T"), "B-LTA",
     "the job's policy is no longer configured at B-LTA"),
])
def test_a_job_whose_policy_is_gone_is_refused(policy, at_least, message) -> None:
    with pytest.raises(PermanentJobError) as e:
        policy_in_force(policy, at_least)
    assert e.value.code == "unknown_policy" and str(e.value) == message


@pytest.mark.parametrize("level, at_least", [("B-B", None), ("B-LTA", "B-LTA"), ("B-LTA", "B-LT")])
def test_a_policy_in_force_is_itself(level, at_least) -> None:
    policy = SigningPolicy(version="v1", signature_level=level)
    assert policy_in_force(policy, at_least) is policy
