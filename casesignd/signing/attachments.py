"""Evidence files in the signing update: embedded file streams, their file
specifications and the catalog's name tree (PDF 32000-1 §7.11.3, §7.11.4), or, in a
document that carries a signature already, their digests alone.

:mod:`casesignd.signing.pades` writes the update; this module writes the parts of it that
carry the files, streamed from disk in bounded memory.

The signature dictionary's /CasesignCase lists every evidence file it covers
(/Evidence [<< /Name /MediaType /Size /SHA256 >> ...]) and says how they are bound
(/EvidenceBinding): /Embedded, the files are in the document; /Digest, the document
carried a signature already and the files are not in it. No form of embedded file
keeps an earlier signature valid: an update that adds a name tree or /AF to the
catalog is a change beyond form filling (PDF 32000-1 §12.8.2.2, Table 254: DocMDP
P=2 allows filling in forms and signing), and pyHanko's difference analysis classes
it as a modification of the signed document (``ModificationLevel.OTHER``); its rules
whitelist no object an embedded file could hang from (the signature dictionary is
approved alone, not what it references). A digest in the signed dictionary binds
the evidence's content as firmly; the caller keeps the files.
"""

from __future__ import annotations

import datetime as dt
import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from pypdf import generic as g

from casesignd.core.errors import DigestMismatch, SizeMismatch
from casesignd.core.hashing import feed_chunks
from casesignd.core.media import PendingText, TextScan
from casesignd.core.sealed import SealedPath, open_plain, plain_size
from casesignd.pdf.structure import Structure, name_tree_items
from casesignd.pdf.syntax import (
    indirect,
    name_object,
    pdf_date,
    pdf_text,
    raw,
    resolved,
    serialize,
    string_key,
    text_object,
)

CHUNK_BYTES = 1024 * 1024


@dataclass(frozen=True)
class Attachment:
    """A file to embed (PDF 32000-1 §7.11.4), streamed from ``path`` (plain, or sealed
    in a temp area or at rest).

    ``sha256`` the digest its item names. A file that reads as other bytes (a stored
    file changed on disk) is refused (``digest_mismatch``) rather than embedded or
    bound under its new digest; with ``verified``, reading it can only yield the
    bytes of that digest or fail (a sealed file: every chunk authenticated under a
    key that only those bytes were sealed with, checked against the digest when they
    were), and it is not hashed for it again. None: the digest is what the file
    reads as.

    ``text`` the rest of the file's media type check when only the whole file can
    settle it (:func:`casesignd.core.media.check_evidence_head`). Both are settled
    as the file is read here, before the key signs anything."""

    path: Path | SealedPath
    name: str
    media_type: str
    description: str = ""
    sha256: bytes | None = None
    verified: bool = False
    text: PendingText | None = None


@dataclass(frozen=True)
class Bound:
    """An evidence file as the signature dictionary lists it."""

    name: str
    media_type: str
    size: int
    sha256: bytes


EMBEDDED = "embedded"
DIGEST = "digest"


def evidence_binding(signed: bool, count: int) -> str:
    """How ``count`` evidence files are bound to a document that carries a signature
    already (``signed``) or not: :data:`EMBEDDED`, :data:`DIGEST`, or "" for none."""
    if not count:
        return ""
    return DIGEST if signed else EMBEDDED


def bound_by_digest(att: Attachment) -> Bound:
    size, sha = hash_file(att.path, att.text)
    return Bound(att.name, att.media_type, size, _as_expected(att, sha))


def _as_expected(att: Attachment, sha: bytes) -> bytes:
    if att.sha256 is not None and sha != att.sha256:
        raise DigestMismatch(f"evidence {att.name!r} reads as other bytes than its item's SHA-256")
    return sha


class _TextCheck:
    """An attachment's :class:`PendingText` finished on the chunks as they are read:
    the mismatch is raised as soon as a chunk shows it, or at the end."""

    def __init__(self, pending: PendingText | None) -> None:
        self._pending = pending
        self._scan = TextScan() if pending is not None else None

    def feed(self, chunk: bytes | bytearray) -> None:
        if self._scan is not None and not self._scan.feed(chunk):
            self.finish()

    def finish(self) -> None:
        if self._scan is not None and self._pending is not None:
            self._pending.judge(self._scan.finish())
            self._scan = None


def evidence_entries(bound: list[Bound], binding: str) -> bytes:
    """The /CasesignCase entries for the evidence (see the module docstring)."""
    if not bound:
        return b""
    items = b" ".join(
        b"<</Name " + pdf_text(b.name) + b" /MediaType " + pdf_text(b.media_type)
        + b" /Size %d /SHA256 (%s)>>" % (b.size, b.sha256.hex().encode()) for b in bound)
    return b" /EvidenceBinding /" + binding.capitalize().encode() + b" /Evidence [" + items + b"]"


class ObjectWriter(Protocol):
    """Where the update's objects go (:class:`casesignd.signing.pades._Writer`):
    ``hasher`` the signature's hash of everything written."""

    hasher: Any

    def write(self, data: bytes | memoryview) -> None: ...

    def write_unhashed(self, data: bytes | bytearray | memoryview) -> None: ...

    def begin(self, num: int, gen: int = 0) -> None: ...


def hash_file(path: Path | SealedPath, text: PendingText | None = None) -> tuple[int, bytes]:
    """The size and SHA-256 of the file at ``path``, read in chunks; ``text`` finished
    on the way."""
    sha = hashlib.sha256()
    size = 0
    check = _TextCheck(text)
    buf = bytearray(CHUNK_BYTES)
    with open_plain(path) as f:
        while n := f.readinto(buf):
            sha.update(memoryview(buf)[:n])
            check.feed(buf if n == len(buf) else buf[:n])
            size += n
    check.finish()
    return size, sha.digest()


def write_embedded_file(w: ObjectWriter, num: int, att: Attachment, name: str,
                        when: dt.datetime) -> Bound:
    """An embedded file stream (§7.11.4, Tables 44-46), embedded under ``name``.

    The file is read once (:func:`casesignd.core.hashing.feed_chunks`): its SHA-256
    (which the file specification and the signature dictionary carry, after the
    stream), the signature's hash of it and its write (maybe sealed) each run on a
    thread of their own while this one reads, and maybe unseals, the next chunk and
    finishes the attachment's text check (:attr:`Attachment.text`) on it. A
    :attr:`Attachment.verified` file is not hashed for its digest: a sealed file
    reads back as those bytes or raises ``SealBroken``. No /CheckSum: it is optional
    (Table 46) and MD5, which costs more than twice SHA-256 on a large file and binds
    nothing the SHA-256 does not."""
    size = plain_size(att.path)
    params = g.DictionaryObject(
        {
            name_object("Size"): g.NumberObject(size),
            name_object("ModDate"): text_object(pdf_date(when)),  # when it was embedded (Table 46)
        }
    )
    head = g.DictionaryObject(
        {
            name_object("Type"): name_object("EmbeddedFile"),
            name_object("Subtype"): g.NameObject("/" + (att.media_type or "application/octet-stream")),
            name_object("Params"): params,
            name_object("Length"): g.NumberObject(size),
        }
    )
    w.begin(num)
    w.write(serialize(head) + b"\nstream\n")
    check = _TextCheck(att.text)
    sha, known = hashlib.sha256(), att.sha256 if att.verified else None
    hashes = [w.hasher.update] if known is not None else [sha.update, w.hasher.update]
    with open_plain(att.path) as f:
        copied = feed_chunks(f, [*hashes, w.write_unhashed], check.feed)
    check.finish()
    digest = known if known is not None else _as_expected(att, sha.digest())
    if copied != size:
        raise SizeMismatch(f"attachment {att.name!r} changed while embedding")
    w.write(b"\nendstream\nendobj\n")
    return Bound(name, att.media_type, size, digest)


def filespec(att: Attachment, name: str, stream_num: int, sha: bytes) -> g.DictionaryObject:
    """The file specification of an embedded file (§7.11.3, Table 44), its SHA-256 in
    /Desc, associated with the document as a supplement (PDF 2.0 §14.13)."""
    desc = f"{att.description}; " if att.description else ""
    return g.DictionaryObject(
        {
            name_object("Type"): name_object("Filespec"),
            name_object("F"): text_object(name),
            name_object("UF"): text_object(name),
            name_object("EF"): g.DictionaryObject(
                {name_object("F"): indirect(stream_num), name_object("UF"): indirect(stream_num)}
            ),
            name_object("Desc"): text_object(f"{desc}SHA-256 {sha.hex()}"),
            name_object("AFRelationship"): name_object("Supplement"),
        }
    )


def taken_names(s: Structure) -> set[str]:
    """The names the document's /EmbeddedFiles name tree already holds."""
    names = resolved(s.catalog, "/Names")
    if isinstance(names, g.DictionaryObject) and "/EmbeddedFiles" in names:
        return {str(k) for k, _ in name_tree_items(raw(names, "/EmbeddedFiles"))}
    return set()


def catalog_updates(
    s: Structure, new_num: Callable[[], int], filespecs: list[tuple[str, int]]
) -> tuple[g.DictionaryObject, list[tuple[int, int, g.PdfObject]]]:
    """The new catalog and the other rewritten objects for the attachments."""
    catalog = g.DictionaryObject(s.catalog)
    extra: list[tuple[int, int, g.PdfObject]] = []
    if not filespecs:
        return catalog, extra
    names_raw = raw(s.catalog, "/Names")
    names = g.DictionaryObject(names_raw.get_object()) if names_raw is not None else g.DictionaryObject()
    entries: dict[bytes, tuple[Any, Any]] = {}
    if "/EmbeddedFiles" in names:
        for key, value in name_tree_items(raw(names, "/EmbeddedFiles")):
            entries[string_key(key)] = (key, value)
    for name, num in filespecs:
        key = text_object(name)
        entries[string_key(key)] = (key, indirect(num))
    tree_num = new_num()
    flat = g.ArrayObject(x for k in sorted(entries) for x in entries[k])
    extra.append((tree_num, 0, g.DictionaryObject({name_object("Names"): flat})))
    names[name_object("EmbeddedFiles")] = indirect(tree_num)
    if isinstance(names_raw, g.IndirectObject):
        extra.append((names_raw.idnum, names_raw.generation, names))
    else:
        catalog[name_object("Names")] = names
    af = resolved(s.catalog, "/AF")
    af_list = list(af.get_object()) if af is not None else []
    # /AF (PDF 2.0 §14.13, PDF/A-3): the attachments are associated with the document.
    catalog[name_object("AF")] = g.ArrayObject([*af_list, *(indirect(num) for _, num in filespecs)])
    return catalog, extra
