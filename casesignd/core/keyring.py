"""Storage keys: the key-encryption keys of ``[storage]`` and the data keys they wrap.

With ``[storage] encrypt = true`` every object and artifact is sealed
(:mod:`casesignd.core.sealed`) under a data key of its own, and that data key is kept
in the store wrapped by a key-encryption key (KEK) the operator holds: a file, or a
systemd credential. Rotation is a new current KEK (``key_id``), the old ones kept for
reading (``[[storage.old_keys]]``) until ``casesignd store rekey`` has rewrapped every
data key; the data itself is never rewritten.

A data key is wrapped with AES-256-GCM under the KEK, a random 96-bit nonce, and the
KEK's id and the owner (``object:<sha256>`` or ``artifact:<id>``) as associated data:
a wrapped key copied onto another object's row, or relabelled with another key id,
does not unwrap. (AES key wrap, RFC 3394, takes no associated data; binding the owner
would need a second construction, and random GCM nonces are safe far past the
number of data keys a store holds before its KEK rotates.)

Key material is read here and held in memory only: :class:`Keyring` never shows a key
in its ``repr``, and nothing here writes or logs one.
"""

from __future__ import annotations

import binascii
import os
from dataclasses import dataclass, field
from pathlib import Path

import msgspec
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from casesignd.core.errors import ConfigError

KEK_BYTES = 32
_NONCE_BYTES = 12
# A key file holds the key as 64 hex digits (``openssl rand -hex 32``) or as 32 raw
# bytes (``head -c 32 /dev/urandom``); anything else is refused.
_MAX_KEY_FILE_BYTES = 4096
KEY_ID_CHARS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-"


class OldKey(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """``[[storage.old_keys]]``: a key kept for reading what it wrapped, until
    ``casesignd store rekey`` has rewrapped it under the current key."""

    id: str
    # A file path, or a bare name looked up in $CREDENTIALS_DIRECTORY first.
    file: str


class KeyUnavailable(Exception):
    """A wrapped data key names a key id the configuration does not hold, or does not
    unwrap under it (a changed row, or a key file that is not the one it was wrapped
    with). The message names the key id and the owner, never key bytes."""


@dataclass(frozen=True)
class WrappedKey:
    """One data key as the store keeps it: its owner, the id of the key that wraps it,
    and the wrap (nonce, ciphertext and tag). Its repr shows no bytes."""

    owner: str
    key_id: str
    wrapped: bytes = field(repr=False)


def object_owner(sha256: str) -> str:
    """The owner of a stored object's data key (one per digest, as its blob)."""
    return f"object:{sha256.lower()}"


def artifact_owner(artifact_id: str) -> str:
    """The owner of an artifact's data key."""
    return f"artifact:{artifact_id}"


def check_key_id(key_id: str, at: str) -> None:
    """A key id is 1-64 of ``[A-Za-z0-9._-]``: it is stored beside every data key."""
    if not key_id or len(key_id) > 64 or any(c not in KEY_ID_CHARS for c in key_id):
        raise ConfigError(at, "a key id is 1-64 characters of A-Z a-z 0-9 . _ -")


def read_key_file(path: Path, at: str) -> bytes:
    """The 32-byte key in ``path`` (64 hex digits with an optional newline, or 32 raw
    bytes); ConfigError naming ``at`` otherwise. The error never quotes the file."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        with os.fdopen(fd, "rb") as f:
            raw = f.read(_MAX_KEY_FILE_BYTES + 1)
    except OSError as e:
        raise ConfigError(at, f"cannot read {path}: {e.strerror}") from None
    if len(raw) == KEK_BYTES:
        return raw
    text = raw.strip()
    if len(text) == 2 * KEK_BYTES:
        try:
            return binascii.unhexlify(text)
        except (binascii.Error, ValueError):
            pass
    raise ConfigError(at, f"{path} must hold a 256-bit key: 64 hex digits "
                          "(openssl rand -hex 32) or 32 raw bytes")


def _aad(key_id: str, owner: str) -> bytes:
    return msgspec.json.encode(["casesignd/data-key/v1", key_id, owner])


@dataclass(frozen=True)
class Keyring:
    """The configured key-encryption keys: ``current`` wraps new data keys (None: no
    key configured), every one of ``keys`` unwraps. ``encrypt`` says whether new
    objects and artifacts are sealed; a keyring that does not encrypt still reads what
    was sealed while it did."""

    encrypt: bool
    current: str | None
    keys: dict[str, bytes] = field(repr=False)

    def __repr__(self) -> str:
        return f"Keyring(encrypt={self.encrypt}, current={self.current!r}, ids={sorted(self.keys)})"

    @property
    def ids(self) -> frozenset[str]:
        return frozenset(self.keys)

    def wrap(self, data_key: bytes, owner: str) -> WrappedKey:
        """``data_key`` wrapped under the current key, for ``owner``."""
        if self.current is None:
            raise KeyUnavailable("no storage key is configured (storage.key_file)")
        nonce = os.urandom(_NONCE_BYTES)
        sealed = AESGCM(self.keys[self.current]).encrypt(nonce, data_key,
                                                         _aad(self.current, owner))
        return WrappedKey(owner, self.current, nonce + sealed)

    def open(self, key: WrappedKey) -> bytes:
        """The data key ``key`` wraps (see :meth:`unwrap`)."""
        return self.unwrap(key.key_id, key.wrapped, key.owner)

    def unwrap(self, key_id: str, wrapped: bytes, owner: str) -> bytes:
        """The data key ``wrapped`` under ``key_id`` for ``owner``; KeyUnavailable when
        the key id is not configured or the wrapped key does not authenticate."""
        kek = self.keys.get(key_id)
        if kek is None:
            raise KeyUnavailable(f"the data key of {owner} is wrapped under key id "
                                 f"{key_id!r}, which the configuration does not hold")
        wrapped = bytes(wrapped)
        try:
            return AESGCM(kek).decrypt(wrapped[:_NONCE_BYTES], wrapped[_NONCE_BYTES:],
                                       _aad(key_id, owner))
        except (InvalidTag, ValueError):
            raise KeyUnavailable(f"the data key of {owner} does not unwrap under key id "
                                 f"{key_id!r}") from None

    def rewrap(self, key: WrappedKey) -> WrappedKey | None:
        """``key`` wrapped under the current key instead, or None when it is already."""
        if key.key_id == self.current:
            return None
        return self.wrap(self.open(key), key.owner)


NO_KEYS = Keyring(encrypt=False, current=None, keys={})


def load_keyring(encrypt: bool, key_file: Path | None, key_id: str,
                 old: list[tuple[str, Path]]) -> Keyring:
    """The keys ``[storage]`` names, read from their files (the config resolves the
    paths and credentials). ConfigError for a missing or malformed one."""
    keys: dict[str, bytes] = {}
    if key_file is not None:
        keys[key_id] = read_key_file(key_file, "storage.key_file")
    for i, (old_id, path) in enumerate(old):
        keys[old_id] = read_key_file(path, f"storage.old_keys[{i}].file")
    return Keyring(encrypt=encrypt, current=key_id if key_file is not None else None, keys=keys)


def check_storage_keys(encrypt: bool, key_file: str, key_id: str, old: list[OldKey]) -> None:
    """The checks of ``[storage]``'s key settings, without reading a key."""
    if encrypt and not key_file:
        raise ConfigError("storage.key_file", "encrypt = true needs a key file (or credential)")
    if key_file:
        check_key_id(key_id, "storage.key_id")
    elif key_id:
        raise ConfigError("storage.key_id", "names the key in storage.key_file, which is empty")
    seen = {key_id} if key_file else set()
    for i, k in enumerate(old):
        check_key_id(k.id, f"storage.old_keys[{i}].id")
        if not k.file:
            raise ConfigError(f"storage.old_keys[{i}].file", "must name the key's file")
        if k.id in seen:
            raise ConfigError(f"storage.old_keys[{i}].id", f"key id {k.id!r} is named twice")
        seen.add(k.id)
