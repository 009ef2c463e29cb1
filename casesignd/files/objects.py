"""The object store: bytes uploaded to a case, named by their SHA-256.

Layout under ``root`` (directories 0700, files 0600)::

    blobs/<first two hex>/<sha256>        the bytes, stored once per digest
    cases/<H(tenant)>/<H(tenant, case)>/<sha256>
                                          a hard link to the blob: the object
                                          belongs to that tenant and case
    tmp/<node>.<random>.part              uploads in flight (same file system)

With storage encryption (``ObjectStore.envelope``: casesignd.files.envelope) a blob
holds its bytes sealed under its digest's data key, sealed as the upload streams in;
the digest is always of the plain bytes.

Tenant names and case IDs never become path components themselves (a case ID may
be ``..``); ``H`` is a SHA-256 over an unambiguous encoding of them. A blob shared
by two cases costs its bytes once; which cases hold it is visible only through the
links, so another tenant's or case's object is simply absent (:meth:`path`).

An upload is streamed into ``tmp/`` while hashing, checked, fsynced, linked into
``blobs/`` and then into its case, with the directories fsynced, so a crash leaves
either the whole object or nothing under ``blobs/`` and ``cases/`` (stray
``tmp/*.part`` files are removed by :meth:`ObjectStore.sweep`). Several daemons may
share ``root``: an upload in flight carries its node's name, and a node's sweep
removes its own at once and another's only once it is a day old (a node that never
came back).

Blocking calls: :meth:`sweep` and :meth:`path` touch the file system (cheap stat
calls for ``path``); :meth:`put` is async and offloads its file work to threads.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import msgspec

from casesignd.core.errors import DigestMismatch, TooLarge, ValidationError
from casesignd.core.hashing import sha256_hex
from casesignd.core.keyring import WrappedKey, object_owner
from casesignd.core.sealed import SealKey
from casesignd.files.envelope import Envelope, opens_under, reseal
from casesignd.files.temp import HashingWriter, stream_into

CASE_ID_PATTERN = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")
SHA256_PATTERN = re.compile(r"^[0-9a-fA-F]{64}$")

_CREATE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


@dataclass(frozen=True)
class PutResult:
    """``created`` is False when the case already held this object (HTTP 200, not 201)."""

    created: bool
    size: int


def normalize_sha256(sha256: str, field: str = "sha256") -> str:
    """Lowercase a hex SHA-256, or raise ValidationError ``invalid_sha256``."""
    if not isinstance(sha256, str) or not SHA256_PATTERN.match(sha256):
        raise ValidationError(
            "expected a SHA-256 as 64 hex digits", code="invalid_sha256", field=field
        )
    return sha256.lower()


def check_case_id(case_id: str, field: str = "case_id") -> str:
    """Return ``case_id`` if valid (1-128 of ``[A-Za-z0-9._:-]``), else raise ``invalid_case_id``."""
    if not isinstance(case_id, str) or not CASE_ID_PATTERN.match(case_id):
        raise ValidationError(
            "case_id must be 1-128 characters of A-Z a-z 0-9 . _ : -",
            code="invalid_case_id",
            field=field,
        )
    return case_id


def owner_dirs(tenant: str, case_id: str) -> tuple[str, str]:
    """The two directory names for a tenant and case: fixed-length hex, never user text."""
    t = sha256_hex(msgspec.json.encode(["tenant", tenant]))
    c = sha256_hex(msgspec.json.encode(["case", tenant, case_id]))
    return t, c


def fsync_dir(path: Path) -> None:
    """Make a rename or link in ``path`` durable (the directory entry itself)."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# A file in flight that another node left this long ago is that node's crash, and
# the node may never come back: any node's sweep removes it.
STALE_S = 86400.0


def sweep_in_flight(directory: Path, own_prefix: str, suffix: str, now: float | None = None) -> int:
    """Remove the files in flight under ``directory`` (names ending in ``suffix``) that
    are this node's (names starting with ``own_prefix``) or older than :data:`STALE_S`;
    leave another live node's alone. Returns the count removed."""
    cutoff = (time.time() if now is None else now) - STALE_S
    removed = 0
    for entry in os.scandir(directory):
        if not entry.name.endswith(suffix) or not entry.is_file(follow_symlinks=False):
            continue
        with contextlib.suppress(FileNotFoundError):
            if entry.name.startswith(own_prefix) or entry.stat(follow_symlinks=False).st_mtime < cutoff:
                os.unlink(entry.path)
                removed += 1
    return removed


def ensure_dir(path: Path, stop: Path) -> None:
    """mkdir -p with 0700, fsyncing each parent whose entries changed (up to ``stop``)."""
    if path.is_dir():
        return
    if path != stop:
        ensure_dir(path.parent, stop)
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        return
    fsync_dir(path.parent)


class ObjectStore:
    """Content-addressed objects owned by (tenant, case). See the module docstring."""

    def __init__(self, root: Path, node: str = "local") -> None:
        self.root = Path(root)
        self.node = node
        self._blobs = self.root / "blobs"
        self._cases = self.root / "cases"
        self._tmp = self.root / "tmp"
        # Told of every object before its case link is made (the store's put_object,
        # which its retention counts from): a crash in between leaves a row whose
        # file is absent, which a removal passes over, never a file no row names.
        self.record: Callable[[str, str, str, int], Awaitable[None]] | None = None
        # Where a job's attempt hard-links the objects it reads (casesignd.files.sources):
        # a removal looks there for links an attempt left (a crash), so that what goes
        # is in no file (storage.temp_dir; set by the daemon).
        self.job_roots: list[Path] = []
        # Storage encryption: uploads sealed as they stream in, under the digest's
        # data key (set by the daemon; the default seals nothing).
        self.envelope = Envelope()

    def sweep(self) -> int:
        """Create the layout and remove the uploads a crashed run of this node left in
        ``tmp/`` (and any node's older than :data:`STALE_S`).

        Blocking; call at start-up (via ``asyncio.to_thread``). Returns the count removed.
        """
        for d in (self._blobs, self._cases, self._tmp):
            ensure_dir(d, self.root.parent)
        return sweep_in_flight(self._tmp, f"{self.node}.", ".part")

    def blob_path(self, sha256: str) -> Path:
        return self._blobs / sha256[:2] / sha256

    def _ref_path(self, tenant: str, case_id: str, sha256: str) -> Path:
        t, c = owner_dirs(tenant, case_id)
        return self._cases / t / c / sha256

    def where(self, tenant: str, case_id: str, sha256: str) -> Path | None:
        """Where the object would be if this tenant's case held it, without looking
        (None for bad input): for a reader that opens it with ``O_NOFOLLOW`` and
        checks what it opened (a regular file of the right size and digest)."""
        if not CASE_ID_PATTERN.match(case_id or "") or not SHA256_PATTERN.match(sha256 or ""):
            return None
        return self._ref_path(tenant, case_id, sha256.lower())

    def path(self, tenant: str, case_id: str, sha256: str) -> Path | None:
        """The object's file if this tenant's case holds it, else None (also for bad input)."""
        if not CASE_ID_PATTERN.match(case_id or "") or not SHA256_PATTERN.match(sha256 or ""):
            return None
        p = self._ref_path(tenant, case_id, sha256.lower())
        return p if p.is_file() and not p.is_symlink() else None

    async def put(
        self,
        tenant: str,
        case_id: str,
        sha256: str,
        body: AsyncIterator[bytes],
        max_bytes: int,
        declared_size: int | None,
    ) -> PutResult:
        """Stream ``body`` in as the object ``sha256`` of ``tenant``'s case ``case_id``.

        Raises ValidationError (``invalid_case_id`` / ``invalid_sha256``), TooLarge
        (413, as soon as the body or its declared size passes ``max_bytes``) and
        DigestMismatch (422 ``digest_mismatch``, also when the body is not
        ``declared_size`` bytes). A body for an object the case already has is still
        read and checked, then discarded: ``created`` is False.
        """
        check_case_id(case_id)
        sha256 = normalize_sha256(sha256)
        if declared_size is not None and declared_size > max_bytes:
            raise TooLarge(f"the object is {declared_size} bytes, the limit is {max_bytes}")

        def check(total: int) -> None:
            if total > max_bytes:
                raise TooLarge(f"the object passes the limit of {max_bytes} bytes")
            if declared_size is not None and total > declared_size:
                raise DigestMismatch(f"the body is longer than the declared {declared_size} bytes")

        if not self._tmp.is_dir():
            await asyncio.to_thread(self.sweep)
        tmp = self._tmp / f"{self.node}.{secrets.token_hex(16)}.part"
        fd = os.open(tmp, _CREATE_FLAGS, 0o600)
        # A fresh data key, kept in the store only once the body proved to be the
        # object (no key rows for uploads that fail their digest).
        sealed = self.envelope.new_key(object_owner(sha256)) if self.envelope.sealing else None
        writer = HashingWriter(fd, sealed[0] if sealed is not None else None)
        try:
            try:
                digest, size = await stream_into(writer, body, check=check)
                if declared_size is not None and size != declared_size:
                    raise DigestMismatch(f"the body is {size} bytes, declared {declared_size}")
                if digest != sha256:
                    raise DigestMismatch(
                        "the body's SHA-256 does not match the object name",
                        field="sha256",
                        detail={"expected": sha256, "actual": digest},
                    )
                await writer.seal()  # the last chunk, once the body proved whole
                await writer.fsync()
            finally:
                writer.close()
            seal = await self._keep_key(tmp, *sealed) if sealed is not None else None
            if self.record is not None:
                await self.record(tenant, case_id, sha256, size)
            if seal is not None:
                # An erasure of the last other case holding the digest may have
                # dropped its key between the key's write and the object's row (it
                # drops a key no object row names): written again, the key stands for
                # the row made now, which keeps it from then on.
                stood = await self.envelope.still_standing(seal, object_owner(sha256))
                if stood != seal:
                    await asyncio.to_thread(reseal, tmp, seal, stood)
                seal = stood
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise
        # From here the thread owns tmp; shielded so a client that goes away now
        # cannot leave a blob without its case link.
        commit = asyncio.ensure_future(
            asyncio.to_thread(self._commit, tmp, tenant, case_id, sha256, seal)
        )
        created = await asyncio.shield(commit)
        return PutResult(created=created, size=size)

    async def _keep_key(self, tmp: Path, key: SealKey, wrapped: WrappedKey) -> SealKey:
        """Keep the upload's data key as its digest's, or, when another upload of the
        digest kept one first, seal the file again under that one (rare: two uploads
        of one digest at once), so that whichever file is linked reads under the key
        that stands; the key ``tmp`` is sealed under now."""
        stood = await self.envelope.standing(key, wrapped)
        if stood is not key and stood != key:
            await asyncio.to_thread(reseal, tmp, key, stood)
        return stood

    def remove(self, tenant: str, case_id: str, sha256: str) -> int:
        """Remove the object from its case, and its blob once no case links it;
        answers the bytes freed. Blocking. A blob another upload links at the same
        moment keeps its bytes through that link: only the name under blobs/ goes,
        and the next upload of the digest writes it again."""
        ref = self._ref_path(tenant, case_id, sha256)
        try:
            os.unlink(ref)
        except FileNotFoundError:
            return 0
        blob = self.blob_path(sha256)
        try:
            st = os.stat(blob, follow_symlinks=False)
        except FileNotFoundError:
            return 0
        if st.st_nlink > 1:
            if self._linked_by_a_case(sha256):
                return 0
            # No case holds it any more: the other names are links an attempt made
            # for a job (a job that runs keeps its case from erasure, and its objects
            # from retention, so these were left by a crash). They go with it.
            self._unlink_job_links(st)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(blob)
        return st.st_size

    def _replace_blob(self, tmp: Path, blob: Path) -> None:
        spare = self._tmp / f"{self.node}.{secrets.token_hex(16)}.part"
        os.link(tmp, spare)
        try:
            os.replace(spare, blob)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(spare)
            raise
        fsync_dir(blob.parent)

    def _linked_by_a_case(self, sha256: str) -> bool:
        """Whether any case still has the object (a walk of the case folders, done only
        for a blob with more than one name)."""
        try:
            tenants = list(os.scandir(self._cases))
        except FileNotFoundError:
            return False
        for t in tenants:
            with contextlib.suppress(OSError), os.scandir(t.path) as cases:
                if any(os.path.lexists(os.path.join(c.path, sha256)) for c in cases):
                    return True
        return False

    def _unlink_job_links(self, st: os.stat_result) -> None:
        for root in self.job_roots:
            for d, _dirs, names in os.walk(root):
                for name in names:
                    path = os.path.join(d, name)
                    with contextlib.suppress(OSError):
                        found = os.stat(path, follow_symlinks=False)
                        if (found.st_dev, found.st_ino) == (st.st_dev, st.st_ino):
                            os.unlink(path)

    def _commit(self, tmp: Path, tenant: str, case_id: str, sha256: str,
                seal: SealKey | None = None) -> bool:
        try:
            return self._link_in(tmp, tenant, case_id, sha256, seal)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)

    def _link_in(self, tmp: Path, tenant: str, case_id: str, sha256: str,
                 seal: SealKey | None = None) -> bool:
        # link(2) never replaces an existing name, so two concurrent uploads of the
        # same digest or the same (case, digest) settle on one winner without a lock.
        blob = self.blob_path(sha256)
        ensure_dir(blob.parent, self.root)
        source = blob
        try:
            os.link(tmp, blob)
            fsync_dir(blob.parent)
        except FileExistsError:
            if seal is not None and not opens_under(blob, seal):
                # Sealed under a key an erasure destroyed (its files not yet removed
                # when this upload's key was written): this upload's file, under the
                # key that stands, takes its place, and the case links this one.
                self._replace_blob(tmp, blob)
                source = tmp
        ref = self._ref_path(tenant, case_id, sha256)
        ensure_dir(ref.parent, self.root)
        try:
            os.link(source, ref)
        except FileExistsError:
            return False
        fsync_dir(ref.parent)
        return True
