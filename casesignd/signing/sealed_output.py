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
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

from pypdf import PdfReader

from casesignd.core.sealed import PositionedReader, SealedPath, open_plain
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
            reader: PdfReader | None = None) -> SealedPrepared:
    """:func:`casesignd.signing.pades.prepare` into a sealed ``dst``: the body sealed,
    the tail held. Nothing is left at ``dst`` on a failure."""
    try:
        return _prepare(src, dst, attachments, meta, contents_bytes, reader)
    except BaseException:
        dst.unlink(missing_ok=True)
        raise


def _prepare(src: Path | SealedPath, dst: SealedPath, attachments: list[pades.Attachment],
             meta: pades.SignatureMeta, contents_bytes: int,
             reader: PdfReader | None) -> SealedPrepared:
    hasher = hashlib.sha256()
    with open_plain(src) as f:
        s = pades._structure(f, reader)
        pades.check_docmdp(s.docmdp)
        size = f.seek(0, os.SEEK_END)
        f.seek(0)
        with dst.create() as out:
            copied = pades._copy_hashing(f, out, hasher, size)  # type: ignore[arg-type]
            source_sha256 = hasher.copy().hexdigest()
            start, total, tail = pades.held_update(s, pades._Writer(out, copied, hasher),  # type: ignore[arg-type]
                                                   attachments, meta, contents_bytes)
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
