"""The signing worker processes' side of the ladder: steps 1–5 of the pipeline in one call.

A worker process (the kiosk's, or a batch one) is started with the signer's CMS
template and, when the key can leave the daemon (a key in memory), the key itself
(:func:`init_signing_process`). One call then checks, prepares and signs a document
(:func:`sign_document` for bytes, :func:`sign_stored` for a stored object read in
place, :func:`sign_prepared_file` for a file): the key is used only once the document
has passed (:mod:`casesignd.signing.pipeline`), under a batch key slot when the
process has them. A token's key cannot be handed over: the call then returns the
signed attributes unsigned, and :mod:`casesignd.signing.ladder` signs them in the
daemon. With no timestamp to wait for, the call finishes the document too.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import stat
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from casesignd.core.errors import (
    DigestMismatch,
    PermanentJobError,
    SizeMismatch,
    TransientJobError,
)
from casesignd.core.hashing import sha256_hex
from casesignd.core.outcomes import Artifact, InFlight
from casesignd.core.sealed import (
    MAGIC,
    SealBroken,
    SealedPath,
    SealKey,
    is_sealed,
    open_sealed,
    reading_sealed,
    sealed_size,
    unseal_bytes,
)
from casesignd.pdf.inspect import PdfLimits
from casesignd.signing import cms, pades, sealed_output
from casesignd.signing.keys import FileSlots, ProcessKey
from casesignd.signing.pipeline import Checked, prepare_document, prepare_file, sign_with
from casesignd.signing.sealed_output import SealedPrepared

# In each such process: the signer template, and the key when it can sign there (a
# key in memory; a token's key signs on the event loop's side).
_PROCESS: dict[str, Any] = {}


def init_signing_process(template: cms.SignerInfoTemplate | None, key: ProcessKey | None,
                         slot: FileSlots | None = None) -> None:
    """The initializer of a worker process that signs. With ``slot`` (the batch key
    slots, a :class:`casesignd.signing.keys.FileSlots`), every key operation here takes one
    of them, and only around the key's use."""
    _PROCESS.update(template=template, key=key, slot=slot)


def _process_sign(signed_attrs: bytes) -> tuple[bytes, float]:
    """The key operation in a signing worker process, under its key slot when it has
    one: the signature and the time it took (a wait for the slot included)."""
    started = time.perf_counter()
    slot = _PROCESS.get("slot")
    if slot is None:
        return sign_with(_PROCESS["key"], signed_attrs), time.perf_counter() - started
    with slot.slot():
        return sign_with(_PROCESS["key"], signed_attrs), time.perf_counter() - started


@dataclass(frozen=True)
class SignedWork:
    """What a signing worker process hands back: the decision, the document the update
    goes after (None: the one it was given), the update to fill in, the signed
    attributes, their signature (None when the key is not in the process) and its
    time, and, when it could finish the document, the update with the CMS in place
    and the SHA-256 of the signed document. A finished update is handed back alone:
    ``prepared`` is then None, so the update's bytes (a visible stamp's fonts among
    them) cross the process boundary once."""

    checked: Checked
    base: bytes | None
    prepared: pades.PreparedUpdate | None
    signed_attrs: bytes
    signature: bytes | None
    sign_s: float
    update: bytes | None = None
    sha256: str | None = None


def sign_document(document: bytes, limits: PdfLimits, meta: pades.SignatureMeta,
                  contents_bytes: int, finish: bool, sha256: str | None = None) -> SignedWork:
    """Steps 1–5 for one document in one call to a signing worker process: the key is
    used only once the document has passed; with ``finish`` (no timestamp to wait
    for), the signed update is made too. ``sha256``: the document's, if known."""
    checked, base, prepared = prepare_document(document, limits=limits, meta=meta,
                                               contents_bytes=contents_bytes, sha256=sha256)
    template = _PROCESS["template"]
    signed_attrs = cms.build_signed_attrs(prepared.digest, template)
    rewritten = base if base is not document else None
    if _PROCESS["key"] is None:
        return SignedWork(checked, rewritten, prepared, signed_attrs, None, 0.0)
    signature, sign_s = _process_sign(signed_attrs)
    update = sha256 = None
    if finish:
        update = prepared.signed(cms.assemble(template, signed_attrs, signature, None))
        digest = hashlib.sha256(base)
        digest.update(update)
        sha256 = digest.hexdigest()
    return SignedWork(checked, rewritten, None if finish else prepared, signed_attrs,
                      signature, sign_s, update, sha256)


def sign_stored(path: str, sha256: str, size: int, limits: PdfLimits,
                meta: pades.SignatureMeta, contents_bytes: int, finish: bool,
                key: SealKey | None = None) -> SignedWork:
    """:func:`sign_document` for a stored object (a batch job's contract, read here
    rather than copied into a temp area): its size and digest are checked against the
    job's before anything else reads it. ``key``: the object's data key when the store
    may hold it sealed at rest (it came over this process's pipe); a sealed object is
    opened here, in place, and one that does not authenticate is ``io_error``."""
    document = _read_stored(path, sha256, size, key)
    if sha256_hex(document) != sha256:
        raise DigestMismatch("the object's SHA-256 differs from the item's")
    work = sign_document(document, limits, meta, contents_bytes, finish, sha256)
    # The caller has not read the document: the update goes after these bytes.
    return work if work.base is not None else dataclasses.replace(work, base=document)


def _read_stored(path: str, sha256: str, size: int, key: SealKey | None) -> bytes:
    """The plain bytes of a stored object, ``size`` of them or ``SizeMismatch``."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError as e:  # not there, or a link: the case holds no such object
        raise PermanentJobError(f"object sha256:{sha256} was not found",
                                code="object_not_found") from e
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise PermanentJobError(f"object sha256:{sha256} was not found",
                                    code="object_not_found")
        sealed = is_sealed(os.pread(fd, len(MAGIC), 0))
        if not sealed and st.st_size != size:
            raise SizeMismatch(f"the object is not {size} bytes")
    except BaseException:
        os.close(fd)
        raise
    with os.fdopen(fd, "rb", buffering=0) as f:
        if not sealed:
            document = f.read(size + 1)
        elif key is None:
            raise TransientJobError(f"object sha256:{sha256} is sealed at rest and its data "
                                    "key is not in the store", code="io_error")
        else:
            try:
                if st.st_size <= sealed_size(size):
                    # Its bytes are read whole anyway: one read, every chunk then
                    # authenticated in memory, rather than a reader's seeks and reads.
                    document = unseal_bytes(f.read(st.st_size + 1), key)
                else:
                    with open_sealed(f, key) as plain:  # type: ignore[arg-type]
                        if plain.plain_size != size:
                            raise SizeMismatch(f"the object is not {size} bytes")
                        document = plain.readall()
            except SealBroken as e:
                raise TransientJobError(f"object sha256:{sha256} cannot be read back: {e}",
                                        code="io_error") from None
    if len(document) != size:
        raise SizeMismatch(f"the object is not {size} bytes")
    return document


@dataclass(frozen=True)
class SignedFile:
    """What a signing worker process hands back for a file signed in place: the
    decision, the preparation, the signed attributes and their signature (None when
    the key is not in the process; then the caller signs and finalizes)."""

    checked: Checked
    prepared: pades.Prepared | SealedPrepared
    signed_attrs: bytes
    signature: bytes | None
    sign_s: float
    # Finished here into a sealed destination: the signed end, which follows the
    # sealed body (b"" for a plain file, finished in place).
    update: bytes = b""
    # Written whole into the artifact's file in flight (``publish_to``): the artifact
    # it makes once linked; nothing is at the destination then, and nothing follows.
    published: Artifact | None = None


def sign_prepared_file(src: Path | SealedPath, dst: Path | SealedPath, limits: PdfLimits,
                       attachments: list[pades.Attachment], meta: pades.SignatureMeta,
                       contents_bytes: int, finish: bool, expect_sha256: str | None = None,
                       publish_to: InFlight | None = None) -> SignedFile:
    """Steps 1–5 for a file in one call to a signing worker process: ``dst`` receives
    the signed document (with ``finish``; else the prepared one, to be finalized by
    the caller once it has a timestamp or the key's signature). ``expect_sha256``:
    the digest ``src`` must have (a stored object read where it is stored), checked
    from the copy's hash before the key is used. Sealed files (an attempt's temp
    area, its key come with them over this process's pipe) are read and written
    sealed; one that does not read back whole ends the call as ``TempBroken``.

    ``publish_to`` (with a sealed ``dst``): when this process finishes the signature
    (``finish``, its key here), the signed document is written whole into that
    artifact's file in flight and fsynced, and ``published`` says what it holds; the
    daemon then only links it. Otherwise it is ignored."""
    with reading_sealed():
        if publish_to is None or not finish or _PROCESS["key"] is None:
            return _sign_prepared_file(src, dst, limits, attachments, meta, contents_bytes,
                                       finish, expect_sha256)
        with sealed_output.Publication(publish_to) as into:
            work = _sign_prepared_file(src, dst, limits, attachments, meta, contents_bytes,
                                       finish, expect_sha256, into)
            assert isinstance(work.prepared, SealedPrepared)
            published = into.finish(work.prepared, work.update)
        return dataclasses.replace(work, update=b"", published=published)


def _sign_prepared_file(src: Path | SealedPath, dst: Path | SealedPath, limits: PdfLimits,
                        attachments: list[pades.Attachment], meta: pades.SignatureMeta,
                        contents_bytes: int, finish: bool, expect_sha256: str | None,
                        into: sealed_output.Publication | None = None) -> SignedFile:
    checked, prepared = prepare_file(src, dst, limits=limits, attachments=attachments,
                                     meta=meta, contents_bytes=contents_bytes, into=into)
    if expect_sha256 is not None and checked.received_sha256 != expect_sha256:
        dst.unlink(missing_ok=True)
        raise DigestMismatch("the document's SHA-256 differs from the item's")
    signed_attrs = cms.build_signed_attrs(prepared.digest, _PROCESS["template"])
    if _PROCESS["key"] is None:
        return SignedFile(checked, prepared, signed_attrs, None, 0.0)
    signature, sign_s = _process_sign(signed_attrs)
    update = b""
    if finish:
        # Not fsynced: publishing makes a durable copy of it.
        update = sealed_output.finish(prepared, cms.assemble(_PROCESS["template"], signed_attrs,
                                                             signature, None))
    return SignedFile(checked, prepared, signed_attrs, signature, sign_s, update)
