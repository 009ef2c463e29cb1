"""What an attempt ends in: :class:`Finish`, :class:`RetryLater` or :class:`Fail`.

A job kind's run returns a :class:`Finish` (a failure is an exception, which
:mod:`casesignd.engine.recorder` turns into one of the other two); the store writes any of
the three with the fenced update that ends the attempt (``Store.conclude``), and the
kiosk path hands the same values to its one write (``Store.record_flight``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from casesignd.core import audit
from casesignd.core.keyring import WrappedKey
from casesignd.core.sealed import SealKey


@dataclass(frozen=True)
class Artifact:
    """A published result: its id (the store's and the link's), digest and size."""

    artifact_id: str
    sha256: str
    size: int
    media_type: str = "application/pdf"
    # A B-LTA document's: when its last document timestamp's chain expires (epoch
    # seconds), before which it is renewed.
    timestamp_expires_at: float | None = None
    # Its file's data key when sealed at rest, written again in the transaction that
    # records the artifact (a no-op while the key stands), so that a record never
    # names a file whose key a sweep of unrecorded keys took meanwhile.
    data_key: WrappedKey | None = field(default=None, repr=False, compare=False)

    def record(self) -> dict[str, Any]:
        return {"artifact_id": self.artifact_id, "sha256": self.sha256, "size": self.size}


@dataclass(frozen=True)
class InFlight:
    """An artifact's file in flight (:mod:`casesignd.files.artifacts`), handed to the
    process that writes the result: it writes and fsyncs ``path`` itself, sealed under
    ``key`` when the stores are sealed at rest (None: plain, as the artifact will be),
    so that publishing it is a hard link rather than a copy of it."""

    artifact_id: str
    path: Path
    key: SealKey | None = None


@dataclass(frozen=True)
class Signature:
    """A signature to record with the finish, in the same transaction: its key, its
    artifact, the ``signed`` event's detail and, for a small result, its bytes (kept
    in the store rather than as a file)."""

    sig_key: str
    artifact: Artifact
    signed: dict[str, Any] | None = None
    inline: bytes | None = None
    # With storage encryption the store seals ``inline`` before it writes it, under a
    # data key of its own kept wrapped beside it (casesignd.store.data_keys).
    inline_key: WrappedKey | None = None


@dataclass(frozen=True)
class Finish:
    """running → succeeded, with the result a client reads."""

    artifact: Artifact | None = None
    detail: dict[str, Any] = field(default_factory=dict)
    signature: Signature | None = None
    # The artifact this one renews (extend_signature): it is marked renewed by it.
    renews: str | None = None

    def result(self) -> dict[str, Any]:
        out: dict[str, Any] = {"detail": self.detail}
        if self.artifact is not None:
            out["artifact"] = {**self.artifact.record(), "media_type": self.artifact.media_type}
        return out

    def with_artifact(self, artifact: Artifact) -> Finish:
        return Finish(artifact, self.detail, self.signature, self.renews)

    def naming(self, record: dict[str, Any]) -> Finish | None:
        """This finish naming the recorded signature ``record`` (artifact_id, sha256,
        size) instead of its own, or None when it names that record already. Every
        job of one signature key names one artifact id (the key's), so a second
        signature of the key differs from the recorded one by its bytes alone."""
        if self.artifact is None or (self.artifact.artifact_id, self.artifact.sha256) == (
                record["artifact_id"], record["sha256"]):
            return None
        return self.with_artifact(Artifact(record["artifact_id"], record["sha256"],
                                           record["size"], self.artifact.media_type))


@dataclass(frozen=True)
class RetryLater:
    """running → retry_wait, due after ``delay_s``. With ``counts`` False (a wait for a
    shared resource) the attempt does not count against the job's budget."""

    code: str
    delay_s: float
    detail: dict[str, Any] = field(default_factory=dict)
    counts: bool = True


@dataclass(frozen=True)
class Fail:
    """running → failed (the dead letter). ``refusal``: a refused document's reason,
    where and message, which the job resource shows (kept as the job's result)."""

    category: str
    code: str
    detail: dict[str, Any] = field(default_factory=dict)
    refusal: dict[str, Any] | None = None

    def result(self) -> str | None:
        """The failed job's stored result: its refusal, or nothing."""
        return audit.canonical({"refusal": self.refusal}).decode() if self.refusal else None


Outcome = Finish | RetryLater | Fail

__all__ = ["Artifact", "Fail", "Finish", "InFlight", "Outcome", "RetryLater", "Signature"]
