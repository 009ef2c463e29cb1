"""A document signed in a temp area: its body sealed on the temp volume, its end in memory.

A sealed file (:mod:`casesignd.core.sealed`) is written once: the chunk that holds
the /Contents placeholder cannot be sealed again with the signature in it (that
would reuse its nonce), nor can a sealed file be extended in place. So the
preparation of a sealed destination (:func:`prepare`) seals the body — the document
as received or rewritten, and the evidence streams — and holds the update's tail
(the signature's objects with the placeholder: a few KiB beside the placeholder) in
memory, as :class:`casesignd.signing.pades.PreparedUpdate` does for a document in
memory. Finishing (:func:`finish`) fills the placeholder in memory; the long-term
levels append their updates to a :class:`SealedSigned` view of body and tail
(:class:`AppendView`, which pyHanko reads and writes in place); publishing streams
the body's plain bytes and then the tail into the artifact. Nothing holds the body
in memory, and nothing writes it in plain on the temp volume.

A document the signing process finishes itself (B-B, its key in the process) need
not pass through the temp volume at all: prepared into a :class:`Publication`, the
body goes straight into the artifact's file in flight (plain, or sealed under the
artifact's data key when the stores are sealed at rest), the signed tail after it,
and the process fsyncs it; its SHA-256 is the preparation's hash of the body carried
on over the tail. Publishing it is then a hard link, not a read, hash and copy.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import IO, Any

from pypdf import PdfReader

from casesignd.core.outcomes import Artifact, InFlight
from casesignd.core.positioned import PositionedReader
from casesignd.core.sealed import SealedPath, open_plain, seal_writer
from casesignd.signing import pades
from casesignd.signing.attachments import evidence_binding


@dataclass(frozen=True)
class SealedPrepared:
    """:class:`casesignd.signing.pades.Prepared` for a sealed destination: ``path`` the
    sealed body, ``held`` the rest of the document (the update's tail around the
    /Contents placeholder)."""

    path: SealedPath
    digest: bytes
    contents_offset: int
    contents_bytes: int
    size: int
    held: pades.PreparedUpdate
    evidence: str = ""
    source_sha256: str = ""


def prepare(src: Path | SealedPath, dst: SealedPath, *, attachments: list[pades.Attachment],
            meta: pades.SignatureMeta, contents_bytes: int = 16384,
            reader: PdfReader | None = None, into: Publication | None = None
            ) -> SealedPrepared:
    """:func:`casesignd.signing.pades.prepare` into a sealed ``dst``: the body sealed,
    the tail held. Nothing is left at ``dst`` on a failure. ``into``: the body goes to
    that publication instead (nothing is written at ``dst``)."""
    try:
        return _prepare(src, dst, attachments, meta, contents_bytes, reader, into)
    except BaseException:
        dst.unlink(missing_ok=True)
        raise


def _prepare(src: Path | SealedPath, dst: SealedPath, attachments: list[pades.Attachment],
             meta: pades.SignatureMeta, contents_bytes: int,
             reader: PdfReader | None, into: Publication | None) -> SealedPrepared:
    hasher = hashlib.sha256()
    with open_plain(src) as f:
        s = pades._structure(f, reader)
        pades.check_docmdp(s.docmdp)
        size = f.seek(0, os.SEEK_END)
        f.seek(0)
        with dst.create() if into is None else contextlib.nullcontext(into.out) as out:
            copied = pades._copy_hashing(f, out, hasher, size)  # type: ignore[arg-type]
            source_sha256 = hasher.copy().hexdigest()
            w = pades._Writer(out, copied, hasher)  # type: ignore[arg-type]
            start, total, tail = pades.held_update(s, w, attachments, meta, contents_bytes)
    if into is not None:
        into.body_hasher = w.body_hasher
    at = start + 1 - (total - len(tail))  # the first hex digit, within the tail
    held = pades.PreparedUpdate(bytes(tail[:at]), bytes(tail[at + 2 * contents_bytes:]),
                                hasher.digest(), contents_bytes)
    return SealedPrepared(dst, held.digest, start, contents_bytes, total, held,
                          evidence_binding(s.signed, len(attachments)), source_sha256)


def finish(prepared: pades.Prepared | SealedPrepared, cms_der: bytes) -> bytes:
    """The CMS into the placeholder: for a sealed preparation, the held end with it
    (returned, nothing written); for a plain file, in place (returns b"")."""
    if isinstance(prepared, SealedPrepared):
        return prepared.held.signed(cms_der)
    pades.finalize(prepared, cms_der, sync=False)  # published by a durable copy
    return b""


# An artifact's file is written out every so many bytes as it grows, for the reason
# casesignd.files.artifacts gives: a 200 MB file flushed at once stalls every other
# fsync on the volume (a kiosk's store commit) for its whole size.
_SYNC_EVERY_BYTES = 8 * 1024 * 1024


class _WrittenOut:
    """A file written out (fdatasync) every :data:`_SYNC_EVERY_BYTES`."""

    def __init__(self, f: IO[bytes]) -> None:
        self.f = f
        self._unsynced = 0

    def write(self, b: bytes | bytearray | memoryview) -> int:
        n = self.f.write(b)
        self._unsynced += n
        if self._unsynced >= _SYNC_EVERY_BYTES:
            self.f.flush()
            os.fdatasync(self.f.fileno())
            self._unsynced = 0
        return n

    def flush(self) -> None:
        self.f.flush()

    def close(self) -> None:
        self.f.close()


class Publication:
    """A signed document written by the signing process into an artifact's file in
    flight (``target``, created here: exclusive, 0600): the body as :func:`prepare`
    writes it ``into`` this, then :meth:`finish` with the signed tail. Left by an
    exception (a ``with`` block), the file is removed; a crash leaves it to the
    artifact store's sweep, and no artifact name ever points at it until the daemon
    links it (:meth:`casesignd.files.artifacts.ArtifactStore.publish_written`)."""

    def __init__(self, target: InFlight) -> None:
        self.target = target
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        self._file = _WrittenOut(os.fdopen(os.open(target.path, flags, 0o600), "wb"))
        self.out: Any = self._file if target.key is None else seal_writer(self._file, target.key)  # type: ignore[arg-type]
        self.body_hasher: Any = None  # set by prepare(): the SHA-256 of the body written

    def finish(self, prepared: SealedPrepared, tail: bytes) -> Artifact:
        """Write ``tail`` after the body, complete the file (its last sealed chunk) and
        fsync it; the artifact it makes (its id, the SHA-256 and size of its plain
        bytes)."""
        assert self.body_hasher is not None, "the body was prepared into this publication"
        self.out.write(tail)
        if self.out is not self._file:
            self.out.close()  # the last chunk: only now does the file read as whole
        self._file.flush()
        os.fsync(self._file.f.fileno())
        self._file.close()
        self.body_hasher.update(tail)
        return Artifact(self.target.artifact_id, self.body_hasher.hexdigest(), prepared.size)

    def __enter__(self) -> Publication:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if exc_type is None:
            return
        if self.out is not self._file:
            self.out.abort()
        with contextlib.suppress(OSError):
            self._file.close()
        self.target.path.unlink(missing_ok=True)


@dataclass(frozen=True)
class SealedSigned:
    """A signed document as a sealed body and the plain ``tail`` that follows it (held
    in memory: the signing update, and the long-term levels' updates)."""

    body: SealedPath
    tail: bytes

    def extended(self, more: bytes) -> SealedSigned:
        return SealedSigned(self.body, self.tail + more)

    def view(self) -> AppendView:
        """The whole document, readable and seekable, writable past the body."""
        return AppendView(self.body, self.tail)


class AppendView(PositionedReader):
    """A sealed body and a writable end in memory as one file: reads anywhere, writes
    only past the body (what an incremental update does in place). ``appended()`` is
    the end as it is now."""

    def __init__(self, body: SealedPath, end: bytes) -> None:
        super().__init__()
        self._body = body.open()
        self._base = self._body.seek(0, os.SEEK_END)
        self._end = bytearray(end)
        self._pos = 0

    def _size(self) -> int:
        return self._base + len(self._end)

    def writable(self) -> bool:
        return True

    def readinto(self, b: bytearray | memoryview) -> int:  # type: ignore[override]
        out = memoryview(b).cast("B")
        if self._pos < self._base:
            self._body.seek(self._pos)
            n = self._body.readinto(out[:self._base - self._pos])
        else:
            at = self._pos - self._base
            chunk = self._end[at:at + len(out)]
            n = len(chunk)
            out[:n] = chunk
        self._pos += n
        return n

    def write(self, b: bytes | bytearray | memoryview) -> int:  # type: ignore[override]
        data = memoryview(b).cast("B")
        if self._pos < self._base:
            raise OSError(30, "the sealed body of a signed document is not rewritten")
        at = self._pos - self._base
        if at > len(self._end):
            self._end.extend(bytes(at - len(self._end)))
        self._end[at:at + len(data)] = data
        self._pos += len(data)
        return len(data)

    def appended(self) -> bytes:
        return bytes(self._end)

    def close(self) -> None:
        if not self.closed:
            self._body.close()
        super().close()
