"""The artifact store: published results, and expiring signed download links.

An artifact is named deterministically from its tenant and the job's signature
key (:meth:`ArtifactStore.artifact_id`), so a job that runs again after a crash
arrives at the same name. Publication is crash-safe and first-writer-wins: the
bytes go to a temp file in the artifact's directory, are fsynced, then hard-linked
to the final name (``link(2)`` never replaces), and the directory is fsynced. If
the name already exists, the existing artifact is kept and returned: there is never
a second, different artifact under one name.

Layout under ``root`` (directories 0700, files 0600)::

    <id[4:6]>/<artifact_id>          e.g. 3f/art_3f...  (fan-out by two hex digits)
    <id[4:6]>/.<node>.<random>.tmp   a publication in flight (several daemons may
                                     share ``root``; a node sweeps only its own)

With storage encryption (``ArtifactStore.envelope``) an artifact's file holds its bytes
sealed under the artifact's data key (:meth:`ArtifactStore.key_for`), and readers take
it through :meth:`ArtifactStore.source`.

Links (``GET /v1/artifacts/{id}?expires=&sig=``) carry an HMAC-SHA256 over the
artifact ID, the owning tenant and the expiry, keyed by a key derived from the
link secret. They are checked without a bearer token, so the caller passes the
tenant the job store says owns the artifact.

Blocking calls: :meth:`ArtifactStore.publish` (copies, hashes and fsyncs; run it via
``asyncio.to_thread``) and :meth:`ArtifactStore.open_path` (one stat). ID and link
functions are pure and cheap.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import dataclasses
import hashlib
import hmac
import os
import re
import secrets
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import msgspec

from casesignd.core.errors import Forbidden
from casesignd.core.hashing import OverlappedSha256, file_sha256
from casesignd.core.keyring import WrappedKey, artifact_owner
from casesignd.core.outcomes import Artifact, InFlight
from casesignd.core.sealed import SealKey, is_sealed, seal_writer
from casesignd.files.envelope import (
    Envelope,
    SealedFile,
    broken,
    opens_under,
    plain_sha256,
    read_head,
)
from casesignd.files.objects import fsync_dir, sweep_in_flight

ARTIFACT_ID_PATTERN = re.compile(r"^art_[0-9a-f]{32}$")
_EXPIRES_PATTERN = re.compile(r"^[0-9]{1,12}$")
_COPY_CHUNK_BYTES = 1024 * 1024
# A large copy writes its data out every so many bytes instead of all at the final
# fsync: on a journaling file system (ext4, data=ordered) every other fsync, such as
# a kiosk request's small object and store commit, waits for all dirty data queued
# before it, so a 200 MB artifact flushed at once stalls them for its whole size.
_SYNC_EVERY_BYTES = 8 * 1024 * 1024


def _subkey(secret: bytes, purpose: bytes) -> bytes:
    # One secret, separate keys per use: a link signature can never double as an ID.
    return hmac.new(secret, b"casesignd/" + purpose, hashlib.sha256).digest()


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _b64url_decode(text: str) -> bytes | None:
    if not re.fullmatch(r"[A-Za-z0-9_-]{1,128}", text or ""):
        return None
    try:
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError):
        return None


def artifact_path(root: Path, artifact_id: str) -> Path:
    """Where the artifact ``artifact_id`` lives under ``root`` (ValueError for what is
    not an artifact id)."""
    if not ARTIFACT_ID_PATTERN.match(artifact_id or ""):
        raise ValueError(f"not an artifact id: {artifact_id!r}")
    return root / artifact_id[4:6] / artifact_id


def write_new(parts: Iterable[bytes], dst: Path, key: SealKey | None = None) -> tuple[str, int]:
    """Write ``parts`` to a new file ``dst`` (0600), hashing them; fsynced. SHA-256 hex
    and size of the plain bytes (blocking). With ``key`` the file holds them sealed
    (storage encryption: casesignd.files.envelope)."""
    size = 0
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    # Hashed on a helper thread while the next part is read and written.
    with OverlappedSha256() as h, os.fdopen(os.open(dst, flags, 0o600), "wb") as fout:
        out: Any = fout if key is None else seal_writer(fout, key)
        for part in parts:
            h.update(part)
            out.write(part)
            size += len(part)
            if size % _SYNC_EVERY_BYTES < len(part):
                fout.flush()
                os.fdatasync(fout.fileno())
        if key is not None:
            out.close()  # the last chunk: only now does the file read as whole
        fout.flush()
        os.fsync(fout.fileno())
    return h.hexdigest(), size


def copy_new(src: Path, dst: Path, key: SealKey | None = None) -> tuple[str, int]:
    """:func:`write_new` with the bytes of the file ``src``, read in chunks."""
    with open(src, "rb") as fin:
        return write_new(iter(lambda: fin.read(_COPY_CHUNK_BYTES), b""), dst, key)


def link_new(tmp: Path, final: Path, write: Callable[[Path], tuple[str, int]],
             sync_dir: Callable[[Path], None] = fsync_dir) -> tuple[str, int] | None:
    """Make ``final`` appear whole or not at all: ``write`` fills the new file ``tmp``
    (on the same file system, fsynced), which is hard-linked to ``final`` (``link(2)``
    never replaces a name) before the directory is fsynced; ``tmp`` is removed either
    way. (SHA-256, size) of what was written, or None when ``final`` existed already
    (it is kept as it is). Blocking."""
    try:
        digest, size = write(tmp)
        try:
            os.link(tmp, final)
        except FileExistsError:
            return None
        sync_dir(final.parent)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
    return digest, size


class DirSyncs:
    """fsyncs of directories, grouped: a caller whose new entry is in a directory
    waits for an fsync of it that began after the entry was made; callers that come
    while one runs share the next one, so concurrent publications into one directory
    cost one fsync (or two) rather than one each. Thread-safe (publications run in
    threads)."""

    def __init__(self, sync: Callable[[Path], None] = fsync_dir) -> None:
        self._sync = sync
        self._cond = threading.Condition()
        # directory -> [entries announced, entries an fsync has covered, fsync running]
        self._dirs: dict[Path, list[Any]] = {}
        self.syncs = 0  # fsyncs made, for tests and benchmarks

    def sync(self, directory: Path) -> None:
        """Return once an fsync of ``directory`` that began after this call did."""
        with self._cond:
            state = self._dirs.setdefault(directory, [0, 0, False])
            state[0] += 1
            mine = state[0]
            while state[1] < mine:
                if state[2]:
                    self._cond.wait()
                    continue
                state[2] = True
                covers = state[0]
                self._cond.release()
                try:
                    self._sync(directory)
                finally:
                    self._cond.acquire()
                    state[2] = False
                    self._cond.notify_all()
                self.syncs += 1
                state[1] = max(state[1], covers)


class ArtifactStore:
    """Durable result files and their signed links. See the module docstring."""

    def __init__(self, root: Path, link_secret: bytes, node: str = "local") -> None:
        if len(link_secret) < 16:
            raise ValueError("the link secret must be at least 16 bytes")
        self.root = Path(root)
        self.node = node
        # Copied per id: keyed once, and a short HMAC then runs without releasing the
        # GIL (a one-shot HMAC releases it, and the event loop waits to get it back).
        self._id_hmac = hmac.new(_subkey(link_secret, b"artifact-id"), digestmod=hashlib.sha256)
        self._link_key = _subkey(link_secret, b"artifact-link")
        self.dir_syncs = DirSyncs()
        # Storage encryption: results sealed as they are published (set by the daemon).
        self.envelope = Envelope()

    # --- names ------------------------------------------------------------------------

    def artifact_id(self, tenant: str, signature_key: str) -> str:
        """``art_`` + 32 hex: deterministic for (tenant, signature key), not reversible.

        Keyed (HMAC), so even a guessable signature key (a case ID and digests) cannot
        be confirmed from the ID without the link secret.
        """
        msg = msgspec.json.encode([tenant, signature_key])
        mac = self._id_hmac.copy()
        mac.update(msg)
        return "art_" + mac.hexdigest()[:32]

    def _final_path(self, artifact_id: str) -> Path:
        return artifact_path(self.root, artifact_id)

    # --- files (blocking) ---------------------------------------------------------------

    def sweep(self) -> int:
        """Create the root (0700) and remove publications a crash of this node left
        half-done (and any node's a day old: :func:`~casesignd.files.objects.sweep_in_flight`).

        Blocking; call at start-up. Returns the number of temp files removed.
        """
        self._ensure_dirs(self.root)
        removed = 0
        for fanout in self.root.iterdir():
            if not fanout.is_dir() or fanout.is_symlink():
                continue
            removed += sweep_in_flight(fanout, f".{self.node}.", ".tmp")
        return removed

    def remove(self, artifact_id: str) -> int:
        """Remove an artifact's file, if it has one; answers the bytes freed. Blocking."""
        path = self._final_path(artifact_id)
        try:
            size = os.stat(path, follow_symlinks=False).st_size
            os.unlink(path)
        except FileNotFoundError:
            return 0
        return size

    async def source(self, artifact_id: str) -> Path | SealedFile | None:
        """Where the artifact's file is, as a reader takes it (its path, or with its
        data key when sealed), or None; ``io_error`` when its key is gone."""
        path = self.open_path(artifact_id)
        if path is None:
            return None
        try:
            return await self.envelope.sealed(path, artifact_owner(artifact_id))
        except FileNotFoundError:
            return None

    async def key_for(self, artifact_id: str) -> SealKey | None:
        """The data key to publish ``artifact_id`` under (None: not sealed); pass it to
        :meth:`publish` or :meth:`publish_bytes`."""
        return await self.envelope.key_for(artifact_owner(artifact_id))

    def open_path(self, artifact_id: str) -> Path | None:
        """The artifact's file, or None if there is none (or the ID is malformed)."""
        try:
            p = self._final_path(artifact_id)
        except ValueError:
            return None
        return p if p.is_file() and not p.is_symlink() else None

    def publish(self, src: Path, artifact_id: str, media_type: str,
                key: SealKey | None = None) -> Artifact:
        """Publish ``src`` as ``artifact_id``; if it already exists, return the existing one.

        Blocking (copy, hash, fsync): run via ``asyncio.to_thread``. ``src`` is copied,
        not moved, so it may live on another file system (the temp tmpfs). ``key``
        (:meth:`key_for`): the data key the file is sealed under when the envelope
        seals, and that opens one published before.
        """
        seal = key if self.envelope.sealing else None
        return self._publish(artifact_id, media_type, lambda tmp: copy_new(src, tmp, seal),
                             key)[0]

    def publish_bytes(self, parts: Iterable[bytes], artifact_id: str,
                      media_type: str, key: SealKey | None = None) -> tuple[Artifact, bool]:
        """:meth:`publish` for a result held in memory: ``parts`` written in order.
        Also says whether these bytes are the ones published (False: an earlier
        publication under the same id is kept). Blocking (write, fsync)."""
        seal = key if self.envelope.sealing else None
        return self._publish(artifact_id, media_type, lambda tmp: write_new(parts, tmp, seal),
                             key)

    def in_flight(self, artifact_id: str, key: SealKey | None = None) -> InFlight | None:
        """A file in flight for ``artifact_id`` (not created), for a process that writes
        the result into it itself and fsyncs it (publish it with
        :meth:`publish_written`); sealed under ``key`` when the envelope seals. None
        when the artifact's file exists already (:meth:`publish` finds it). Blocking
        (a stat, and the fan-out directory made if it is missing)."""
        final = self._final_path(artifact_id)
        if final.is_file():
            return None
        self._ensure_dirs(final.parent)
        return InFlight(artifact_id, self.temp_path(final, self.node),
                        key if self.envelope.sealing else None)

    def publish_written(self, target: InFlight, written: Artifact,
                        key: SealKey | None = None) -> tuple[Artifact, bool]:
        """Publish the file in flight ``target``, written whole and fsynced by another
        process, which says what it holds (``written``: the SHA-256 and size of its
        plain bytes): a hard link and a directory fsync, first writer wins as in
        :meth:`publish` (``key`` reads an earlier artifact kept instead). The file in
        flight is gone afterwards either way. Blocking."""
        try:
            return self._publish(target.artifact_id, written.media_type,
                                 lambda _tmp: (written.sha256, written.size), key, target.path)
        finally:
            target.path.unlink(missing_ok=True)

    def _publish(self, artifact_id: str, media_type: str,
                 write: Callable[[Path], tuple[str, int]],
                 key: SealKey | None = None, tmp: Path | None = None) -> tuple[Artifact, bool]:
        final = self._final_path(artifact_id)
        wrapped = (self.envelope.keyring.wrap(key.raw(), artifact_owner(artifact_id))
                   if key is not None and self.envelope.sealing else None)
        if final.is_file():
            if not self._left_sealed_by_a_crash(final, key):
                return self._described(final, artifact_id, media_type, key, wrapped), False
            # Sealed under a key that is gone (a crash before its record, then the
            # start-up sweep of unrecorded keys): unreadable, and replaced.
            with contextlib.suppress(FileNotFoundError):
                os.unlink(final)
        self._ensure_dirs(final.parent)
        # Grouped with the fsyncs of other publications into the same directory.
        written = link_new(tmp or self.temp_path(final, self.node), final, write,
                           self.dir_syncs.sync)
        if written is None:
            # Someone published first: theirs is the recorded one.
            return self._described(final, artifact_id, media_type, key, wrapped), False
        digest, size = written
        return Artifact(artifact_id=artifact_id, sha256=digest, size=size, media_type=media_type,
                        data_key=wrapped), True

    def _described(self, path: Path, artifact_id: str, media_type: str,
                   key: SealKey | None, wrapped: WrappedKey | None) -> Artifact:
        described = self._describe(path, artifact_id, media_type, key)
        return dataclasses.replace(described, data_key=wrapped) if wrapped else described

    def _left_sealed_by_a_crash(self, path: Path, key: SealKey | None) -> bool:
        """Whether ``path`` is a sealed file that does not open under ``key``, the key
        that stands for its id: a crash's leftover, since a recorded artifact's key
        is never swept (its record keeps it). Blocking."""
        return key is not None and is_sealed(read_head(path)) and not opens_under(path, key)

    @staticmethod
    def temp_path(final: Path, node: str) -> Path:
        """A name for ``final``'s bytes in flight, beside it: :meth:`sweep` removes it
        when its node left it behind."""
        return final.parent / f".{node}.{secrets.token_hex(8)}.tmp"

    def _describe(self, path: Path, artifact_id: str, media_type: str,
                  key: SealKey | None) -> Artifact:
        if is_sealed(read_head(path)):
            owner = artifact_owner(artifact_id)
            if key is None:
                raise broken(owner, "it is sealed and no data key is known")
            digest, size = plain_sha256(path, key, owner)
            return Artifact(artifact_id=artifact_id, sha256=digest, size=size,
                            media_type=media_type)
        digest, size = file_sha256(path)
        return Artifact(artifact_id=artifact_id, sha256=digest, size=size, media_type=media_type)

    def _ensure_dirs(self, fanout: Path) -> None:
        for d in (self.root, fanout):
            if not d.is_dir():
                with contextlib.suppress(FileExistsError):
                    d.mkdir(mode=0o700, parents=True)
                    fsync_dir(d.parent)

    # --- links (pure) -----------------------------------------------------------------

    def _link_mac(self, artifact_id: str, tenant: str, expires_at: int) -> bytes:
        msg = msgspec.json.encode(["link-v1", artifact_id, tenant, int(expires_at)])
        return hmac.digest(self._link_key, msg, "sha256")

    def sign_link(self, artifact_id: str, tenant: str, expires_at: int) -> str:
        """``/v1/artifacts/{id}?expires={unix}&sig={b64url HMAC}`` (unpadded base64url)."""
        sig = _b64url(self._link_mac(artifact_id, tenant, expires_at))
        return f"/v1/artifacts/{artifact_id}?expires={int(expires_at)}&sig={sig}"

    def check_link(self, artifact_id: str, tenant: str, expires: str, sig: str, now: float) -> None:
        """Accept a link for ``tenant``'s artifact or raise Forbidden (see :meth:`link_tenant`)."""
        self.link_tenant(artifact_id, [tenant], expires, sig, now)

    def link_tenant(self, artifact_id: str, tenants: Iterable[str], expires: str, sig: str,
                    now: float) -> str:
        """The tenant, among ``tenants``, a link to ``artifact_id`` was signed for; or
        Forbidden.

        ``link_invalid`` for a malformed expiry or a signature that does not cover this
        ID, a tenant and expiry; ``link_expired`` for a genuine link whose time is up
        (the signature is checked first, so a forged expiry never reads as expired).
        It needs no record: a link is checked before anything is looked up, so a bad
        one answers the same whether its artifact exists or not. Every tenant is tried,
        each in constant time.
        """
        if not _EXPIRES_PATTERN.match(expires or ""):
            raise Forbidden("the link is not valid", code="link_invalid")
        given = _b64url_decode(sig)
        found = None
        for tenant in tenants:
            want = self._link_mac(artifact_id, tenant, int(expires))
            if given is not None and hmac.compare_digest(given, want):
                found = tenant
        if found is None:
            raise Forbidden("the link is not valid", code="link_invalid")
        if now >= int(expires):
            raise Forbidden("the link has expired", code="link_expired")
        return found
