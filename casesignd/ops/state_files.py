"""The files beside a store, under ``storage.state_dir``: the objects
(``objects/``, :mod:`casesignd.files.objects`) and the artifacts (``artifacts/``,
:mod:`casesignd.files.artifacts`). Walked in artifact-id order, so that they are compared
with the store's records as two sorted streams, side by side (:func:`side_by_side`),
and copied to another state directory the way the daemons write them (temp name,
fsync, link, directory fsync) with every digest checked. Blocking throughout.
"""

from __future__ import annotations

import os
import re
import secrets
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from casesignd.core.errors import DigestMismatch
from casesignd.core.hashing import file_sha256
from casesignd.core.keyring import NO_KEYS, Keyring, KeyUnavailable, artifact_owner, object_owner
from casesignd.core.sealed import SealBroken, SealKey, is_sealed
from casesignd.files.artifacts import (
    ARTIFACT_ID_PATTERN,
    ArtifactStore,
    artifact_path,
    copy_new,
    link_new,
)
from casesignd.files.envelope import broken, plain_sha256, read_head
from casesignd.files.objects import SHA256_PATTERN, ensure_dir, fsync_dir
from casesignd.store.data_keys import unseal_inline
from casesignd.store.snapshot import Row, Snapshot

OBJECTS = "objects"
ARTIFACTS = "artifacts"
# The node name the copy's files in flight carry: a daemon's sweep removes what a
# copy that died left behind, a day later.
NODE = "store-copy"

_FANOUT = re.compile(r"^[0-9a-f]{2}$")
_IN_FLIGHT = re.compile(r"^\..*\.tmp$")  # .<node>.<random>.tmp (ArtifactStore.temp_path)
# Paths of stray files a walk keeps to show; the rest are only counted.
STRAYS_SHOWN = 100


@dataclass
class Strays:
    """Files under ``artifacts/`` that are no artifact's (a name of another shape, or in
    the wrong fan-out directory, or not a regular file)."""

    count: int = 0
    paths: list[Path] = field(default_factory=list)

    def add(self, path: Path) -> None:
        self.count += 1
        if len(self.paths) < STRAYS_SHOWN:
            self.paths.append(path)


def artifact_files(root: Path, strays: Strays) -> Iterator[tuple[str, Path]]:
    """The artifact files under ``root`` as (artifact id, path), in id order: a fan-out
    directory is named by the two hex digits after ``art_``, so directories in order
    and names in order within each are ids in order. Publications in flight are left
    out; anything else that is no artifact's goes to ``strays``."""
    if not root.is_dir():
        return
    for top in sorted(os.scandir(root), key=lambda e: e.name):
        if not _FANOUT.match(top.name) or not top.is_dir(follow_symlinks=False):
            strays.add(Path(top.path))
            continue
        for entry in sorted(os.scandir(top.path), key=lambda e: e.name):
            if _IN_FLIGHT.match(entry.name):
                continue
            if (ARTIFACT_ID_PATTERN.match(entry.name) and entry.name[4:6] == top.name
                    and entry.is_file(follow_symlinks=False)):
                yield entry.name, Path(entry.path)
            else:
                strays.add(Path(entry.path))


def side_by_side(records: Iterable[Row], files: Iterable[tuple[str, Path]]
                 ) -> Iterator[tuple[str, Row | None, Path | None]]:
    """Records (``artifact_id`` first) and files, both in id order, as (id, record or
    None, file or None): a merge of two sorted streams, in constant memory."""
    rec_it, file_it = iter(records), iter(files)
    rec, found = next(rec_it, None), next(file_it, None)
    while rec is not None or found is not None:
        if found is None or (rec is not None and rec["artifact_id"] < found[0]):
            assert rec is not None
            yield rec["artifact_id"], rec, None
            rec = next(rec_it, None)
        elif rec is None or found[0] < rec["artifact_id"]:
            yield found[0], None, found[1]
            found = next(file_it, None)
        else:
            yield found[0], rec, found[1]
            rec, found = next(rec_it, None), next(file_it, None)


class PlainDigests:
    """Digests of the files under ``state_dir`` as their records name them: of the plain
    bytes, through the data key the snapshot holds for a file sealed at rest (storage
    encryption) and the configured keys that unwrap it. Blocking. A sealed file that
    does not read back (altered, cut, its key gone or not configured) raises the
    ``io_error`` TransientJobError, whose message says which."""

    def __init__(self, snap: Snapshot | None = None, keyring: Keyring = NO_KEYS) -> None:
        self.snap = snap
        self.keyring = keyring
        self.sealed = 0  # sealed files read

    def __call__(self, path: Path, owner: str) -> tuple[str, int]:
        if not is_sealed(read_head(path)):
            return file_sha256(path)
        row = self.snap.one("data_key", owner=owner) if self.snap is not None else None
        if row is None:
            raise broken(owner, "it is sealed and the store holds no data key for it")
        try:
            key = SealKey.from_bytes(self.keyring.unwrap(row["key_id"], bytes(row["wrapped"]),
                                                         owner))
        except KeyUnavailable as e:
            raise broken(owner, e) from None
        self.sealed += 1
        return plain_sha256(path, key, owner)

    def inline(self, artifact_id: str, row: Row) -> bytes:
        """The plain bytes of an ``inline_data`` row (sealed or not)."""
        try:
            return unseal_inline(self.keyring, artifact_id, row)
        except (KeyUnavailable, SealBroken) as e:
            raise broken(artifact_owner(artifact_id), e) from None


def keys_needed(snap: Snapshot, keyring: Keyring) -> tuple[dict[str, int], list[str]]:
    """The key ids the snapshot's data keys are wrapped under (with their counts), and
    those of them ``keyring`` lacks."""
    held = {str(r["key_id"]): int(r["n"]) for r in snap.stream("data_key_ids")}
    return held, sorted(set(held) - keyring.ids)


def same_dir(a: Path, b: Path) -> bool:
    """Whether two configured directories are one (by path, or by inode once both exist)."""
    if a.resolve() == b.resolve():
        return True
    return a.exists() and b.exists() and os.path.samefile(a, b)


# --- copying ----------------------------------------------------------------------------


@dataclass
class FilesCopied:
    """What a copy of the files did: placed, or found in place with the same bytes."""

    objects: int = 0
    objects_there: int = 0
    case_links: int = 0
    artifacts: int = 0
    artifacts_there: int = 0
    # Artifact files that no record names, copied as they are.
    unrecorded: int = 0


def _mismatch(path: Path, got: tuple[str, int], sha256: str, size: int | None,
              what: str) -> DigestMismatch:
    want = f"{size} bytes, SHA-256 {sha256}" if size is not None else f"SHA-256 {sha256}"
    return DigestMismatch(f"{path} is {got[1]} bytes, SHA-256 {got[0]}; {what} says {want}: "
                          "run `casesignd store check` on the source")


def _matches(got: tuple[str, int], sha256: str, size: int | None) -> bool:
    return got[0] == sha256 and (size is None or got[1] == size)


def place_copy(src: Path, final: Path, tmp: Path, stop: Path, *, sha256: str | None,
               size: int | None, what: str, owner: str = "",
               digest: PlainDigests | None = None) -> bool:
    """Copy ``src`` to ``final`` atomically (through ``tmp``, on ``final``'s file
    system), checking its bytes against ``sha256``/``size`` (``what`` names where they
    come from) before it gets its name; None: it is copied as it is. True when it was
    placed, False when ``final`` was there with the same bytes (a copy run again);
    DigestMismatch otherwise."""
    want = sha256
    plain = digest or PlainDigests()
    if final.exists():
        got = plain(final, owner)
        if want is None:
            want = plain(src, owner)[0]
        if not _matches(got, want, size):
            raise _mismatch(final, got, want, size, f"{src}, the file to copy,")
        return False

    def write(path: Path) -> tuple[str, int]:
        got = copy_new(src, path)  # as it is: a sealed file stays sealed
        if is_sealed(read_head(path)):
            got = plain(path, owner)
        if want is not None and not _matches(got, want, size):
            raise _mismatch(src, got, want, size, what)
        return got

    ensure_dir(final.parent, stop)
    if link_new(tmp, final, write) is None:  # placed meanwhile by someone else: compare
        return place_copy(src, final, tmp, stop, sha256=sha256, size=size, what=what,
                          owner=owner, digest=digest)
    return True


def _object_tmp(root: Path) -> Path:
    # Beside the uploads in flight (ObjectStore's tmp/), which its sweep knows.
    ensure_dir(root / "tmp", root.parent)
    return root / "tmp" / f"{NODE}.{secrets.token_hex(16)}.part"


def _same_file(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except FileNotFoundError:
        return False


def _files(directory: Path, depth: int) -> Iterator[Path]:
    """The regular files ``depth`` directories below ``directory``, one directory's
    listing at a time."""
    if not directory.is_dir():
        return
    for entry in os.scandir(directory):
        if depth == 0:
            if entry.is_file(follow_symlinks=False):
                yield Path(entry.path)
        elif entry.is_dir(follow_symlinks=False):
            yield from _files(Path(entry.path), depth - 1)


def copy_objects(src: Path, dst: Path, done: FilesCopied,
                 digest: PlainDigests | None = None) -> None:
    """Copy an object store (``blobs/`` and the case links to them under ``cases/``)
    from ``src`` to ``dst``, each blob checked against the digest that names it."""
    for blob in _files(src / "blobs", 1):
        if SHA256_PATTERN.match(blob.name):
            placed = place_copy(blob, dst / blob.relative_to(src), _object_tmp(dst), dst,
                                sha256=blob.name.lower(), size=None, what="its name",
                                owner=object_owner(blob.name), digest=digest)
            done.objects += placed
            done.objects_there += not placed
    for ref in _files(src / "cases", 2):
        if not SHA256_PATTERN.match(ref.name):
            continue
        sha = ref.name.lower()
        blob = dst / "blobs" / sha[:2] / sha
        if not _same_file(ref, src / "blobs" / sha[:2] / sha):
            # Not a link to the source's blob (copied without hard links, or its blob
            # gone): its own bytes are checked, and make the blob where there is none.
            done.objects += place_copy(ref, blob, _object_tmp(dst), dst, sha256=sha,
                                       size=None, what="its name", owner=object_owner(sha),
                                       digest=digest)
        target = dst / ref.relative_to(src)
        ensure_dir(target.parent, dst)
        try:
            os.link(blob, target)
        except FileExistsError:
            if not _same_file(target, blob):  # there before: it must hold the same bytes
                place_copy(blob, target, _object_tmp(dst), dst, sha256=sha, size=None,
                           what="its name", owner=object_owner(sha), digest=digest)
            continue
        fsync_dir(target.parent)
        done.case_links += 1


def copy_artifacts(src: Path, dst: Path, records: Iterable[Row], done: FilesCopied,
                   digest: PlainDigests | None = None) -> None:
    """Copy the artifact files under ``src`` to ``dst``, each checked against the record
    that names it (``records``: ``artifact_records``, in id order); a file no record
    names is copied as it is."""
    for artifact_id, rec, path in side_by_side(records, artifact_files(src, Strays())):
        if path is None:
            continue
        final = artifact_path(dst, artifact_id)
        placed = place_copy(
            path, final, ArtifactStore.temp_path(final, NODE), dst,
            sha256=rec["sha256"] if rec else None, size=rec["size"] if rec else None,
            what=f"the record of {artifact_id}", owner=artifact_owner(artifact_id),
            digest=digest)
        done.artifacts += placed
        done.artifacts_there += not placed
        done.unrecorded += rec is None
