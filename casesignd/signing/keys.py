"""Signing keys: a PKCS#12 file or a PKCS#11 token behind one small interface.

A :class:`KeySigner` signs bytes with SHA-256 (PKCS#1 v1.5 for RSA, DER-encoded
ECDSA for EC) and carries its certificate and chain. Library errors are
translated to :class:`casesignd.core.errors.SigningError` (retryable: tokens come
back); configuration mistakes raise :class:`casesignd.core.errors.ConfigError`.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import hashlib
import os
import stat
import threading
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa
from cryptography.hazmat.primitives.asymmetric.types import PublicKeyTypes
from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature
from cryptography.hazmat.primitives.serialization import pkcs12

from casesignd.core.errors import Busy, ConfigError, SigningError
from casesignd.signing.cms import key_algorithm


@runtime_checkable
class KeySigner(Protocol):
    """A signing key with its certificate. ``sign`` is safe to call from many threads."""

    algorithm: str  # "rsa" or "ec"
    cert: x509.Certificate
    chain: list[x509.Certificate]

    def sign(self, data: bytes) -> bytes:
        """Sign ``data`` with SHA-256 (PKCS#1 v1.5 or DER ECDSA)."""
        ...


def configured(signer: KeySigner | None) -> KeySigner:
    """``signer``, or the refusal of a signature when no key is configured."""
    if signer is None:
        raise SigningError("no signing key is configured", code="signing_key_unavailable")
    return signer


class LocalSigner:
    """A private key held in memory (from PKCS#12)."""

    def __init__(
        self,
        key: rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey,
        cert: x509.Certificate,
        chain: list[x509.Certificate] | None = None,
    ) -> None:
        self._key = key
        self.cert = cert
        self.chain = list(chain or [])
        self.algorithm = key_algorithm(cert)
        if _spki(key.public_key()) != _spki(cert.public_key()):
            raise SigningError("the private key does not match the certificate")

    def sign(self, data: bytes) -> bytes:
        return _sign(self._key, data)

    def for_process(self) -> ProcessKey:
        """The key to sign with in a worker process of this daemon."""
        return ProcessKey(self._key)


def _spki(public_key: PublicKeyTypes) -> bytes:
    """A public key as its SubjectPublicKeyInfo: equal for equal keys of any type."""
    return bytes(public_key.public_bytes(serialization.Encoding.DER,
                                         serialization.PublicFormat.SubjectPublicKeyInfo))


def _sign(key: rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey, data: bytes) -> bytes:
    try:
        if isinstance(key, rsa.RSAPrivateKey):
            return key.sign(data, padding.PKCS1v15(), hashes.SHA256())
        return key.sign(data, ec.ECDSA(hashes.SHA256()))
    except Exception as e:  # a key operation failing is never an input problem
        raise SigningError(f"signing failed: {e}") from e


class ProcessKey:
    """A key held in memory, handed to a worker process of the daemon when the process
    starts (through its pipe, never a file), which then signs on its own: the kiosk's
    processes sign without a round trip to the event loop's threads. Pickles as
    PKCS#8 DER; each process parses it once."""

    def __init__(self, key: rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey) -> None:
        self._key = key

    def sign(self, data: bytes) -> bytes:
        return _sign(self._key, data)

    def __getstate__(self) -> bytes:
        return self._key.private_bytes(serialization.Encoding.DER, serialization.PrivateFormat.PKCS8,
                                       serialization.NoEncryption())

    def __setstate__(self, der: bytes) -> None:
        key = serialization.load_der_private_key(der, password=None)
        assert isinstance(key, rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey)
        self._key = key


def check_private_file(path: Path, key: str) -> None:
    """Refuse a secret file that group or others can read (ConfigError naming ``key``)."""
    try:
        mode = path.stat().st_mode
    except OSError as e:
        raise ConfigError(key, f"cannot read {path}: {e.strerror}") from None
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise ConfigError(
            key, f"{path} is accessible by group or others (mode {stat.S_IMODE(mode):o}); chmod 600"
        )


def load_pkcs12(path: Path, password: bytes) -> KeySigner:
    """Load a PKCS#12 file holding one key, its certificate and optionally the chain."""
    try:
        key, cert, extra = pkcs12.load_key_and_certificates(Path(path).read_bytes(), password)
    except (OSError, ValueError) as e:
        raise SigningError(f"cannot load PKCS#12 {path}: {e}") from e
    if key is None or cert is None:
        raise SigningError(f"PKCS#12 {path} lacks a private key or its certificate")
    if not isinstance(key, rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey):
        raise SigningError(f"PKCS#12 {path}: unsupported key type {type(key).__name__}")
    return LocalSigner(key, cert, list(extra or []))


# --- PKCS#11 --------------------------------------------------------------------

_LIBS: dict[str, Any] = {}
_LIBS_LOCK = threading.Lock()
_LOGINS: dict[tuple[str, str], str] = {}  # (module, token) -> the PIN that logged in


def _pkcs11_lib(module_path: str) -> Any:
    # A PKCS#11 module is initialised once per process (C_Initialize).
    import pkcs11

    with _LIBS_LOCK:
        if module_path not in _LIBS:
            _LIBS[module_path] = pkcs11.lib(module_path)
        return _LIBS[module_path]


class Pkcs11Signer:
    """A private key on a PKCS#11 token; the certificate comes from the token or ``cert``.

    One session is shared under a lock (PKCS#11 sessions are not safe for concurrent
    use). After a token error the session is dropped and reopened on the next call,
    so a token that comes back is used again without a restart.
    """

    def __init__(
        self,
        module_path: str,
        token_label: str,
        key_label: str,
        pin: str,
        cert: x509.Certificate | None = None,
        chain: list[x509.Certificate] | None = None,
    ) -> None:
        self._module_path = module_path
        self._token_label = token_label
        self._key_label = key_label
        self._pin = pin
        self._lock = threading.Lock()
        self._session: Any = None
        self._key: Any = None
        self.chain = list(chain or [])
        with self._lock:
            self._open()
            self.cert = cert or self._token_cert()
        self.algorithm = key_algorithm(self.cert)

    def _open(self) -> None:
        import pkcs11
        from pkcs11 import ObjectClass

        try:
            token = _pkcs11_lib(self._module_path).get_token(token_label=self._token_label)
            login = (self._module_path, self._token_label)
            try:
                self._session = token.open(user_pin=self._pin)
                _LOGINS[login] = self._pin
            except pkcs11.UserAlreadyLoggedIn:
                # Login state is per application and token (PKCS#11 §5.6), not per
                # session: another signer of this process logged in; the PIN must be
                # the one it used, since the token cannot check it again.
                if _LOGINS.get(login) != self._pin:
                    raise
                self._session = token.open()
            self._key = self._session.get_key(
                object_class=ObjectClass.PRIVATE_KEY, label=self._key_label
            )
        except (pkcs11.PKCS11Error, RuntimeError, OSError) as e:
            self._session = None
            raise SigningError(
                f"PKCS#11 token {self._token_label!r} key {self._key_label!r}: {type(e).__name__} {e}"
            ) from e

    def _token_cert(self) -> x509.Certificate:
        from pkcs11 import Attribute, ObjectClass

        for obj in self._session.get_objects(
            {Attribute.CLASS: ObjectClass.CERTIFICATE, Attribute.LABEL: self._key_label}
        ):
            return x509.load_der_x509_certificate(obj[Attribute.VALUE])
        raise SigningError(f"no certificate labelled {self._key_label!r} on the token")

    def sign(self, data: bytes) -> bytes:
        import pkcs11
        from pkcs11 import Mechanism

        with self._lock:
            try:
                if self._session is None:
                    self._open()
                if self.algorithm == "rsa":
                    return bytes(self._key.sign(data, mechanism=Mechanism.SHA256_RSA_PKCS))
                # Hash here and use plain CKM_ECDSA: every token has it, not all
                # have CKM_ECDSA_SHA256. The token returns r || s (PKCS#11 §2.3.1).
                raw = bytes(self._key.sign(hashlib.sha256(data).digest(), mechanism=Mechanism.ECDSA))
            except pkcs11.PKCS11Error as e:
                self._session = None
                raise SigningError(f"PKCS#11 signing failed: {type(e).__name__} {e}") from e
        half = len(raw) // 2
        return encode_dss_signature(
            int.from_bytes(raw[:half], "big"), int.from_bytes(raw[half:], "big")
        )


# --- from the configuration -------------------------------------------------------


def _read_secret(path: Path, key: str) -> bytes:
    check_private_file(path, key)
    try:
        return path.read_bytes().rstrip(b"\r\n")
    except OSError as e:
        raise ConfigError(key, f"cannot read {path}: {e.strerror}") from None


@dataclass(frozen=True)
class Pkcs11Settings:
    """A key on a PKCS#11 token (``[signing.pkcs11]``): the module, the token's and the
    key's labels, the file holding the PIN, and the certificate's file when the token
    does not hold it."""

    module: str
    token_label: str
    key_label: str
    pin_file: Path
    cert_file: Path | None = None


@dataclass(frozen=True)
class KeySettings:
    """Where the service's signing key is (``[signing]``), its paths resolved: a token
    (``pkcs11``), else a PKCS#12 file and the file of its password; and the file of
    further certificates of its chain."""

    pkcs12_path: Path | None = None
    pkcs12_password_file: Path | None = None
    chain_file: Path | None = None
    pkcs11: Pkcs11Settings | None = None


def _load_chain(path: Path | None) -> list[x509.Certificate]:
    if path is None:
        return []
    try:
        return x509.load_pem_x509_certificates(path.read_bytes())
    except (OSError, ValueError) as e:
        raise ConfigError("signing.chain_file", f"cannot read certificates from {path}: {e}") from None


def load_signer(settings: KeySettings) -> KeySigner:
    """The service's signing key as configured: ``signing.pkcs11`` if set, else PKCS#12."""
    chain = _load_chain(settings.chain_file)
    p11 = settings.pkcs11
    if p11 is not None:
        pin = _read_secret(p11.pin_file, "signing.pkcs11.pin_file").decode()
        cert = None
        if p11.cert_file is not None:
            try:
                cert = x509.load_pem_x509_certificate(p11.cert_file.read_bytes())
            except (OSError, ValueError) as e:
                raise ConfigError("signing.pkcs11.cert_file", f"cannot read certificate: {e}") from None
        return Pkcs11Signer(p11.module, p11.token_label, p11.key_label, pin, cert=cert, chain=chain)
    if settings.pkcs12_path is None:
        raise ConfigError("signing.pkcs12_path", "no signing key configured")
    key_path = settings.pkcs12_path
    check_private_file(key_path, "signing.pkcs12_path")
    password = b""
    if settings.pkcs12_password_file is not None:
        password = _read_secret(settings.pkcs12_password_file, "signing.pkcs12_password_file")
    signer = load_pkcs12(key_path, password)
    if chain:
        signer.chain = [*signer.chain, *chain]
    return signer


# --- how many may use the key at once -------------------------------------------


class FileSlots:
    """``size`` slots shared by processes, one lock file each (``flock``): a process
    that dies holding a slot, however it dies (an out-of-memory kill in the middle of
    a key operation), frees it, because the kernel drops its locks. Pickled as its
    paths: each process opens the files for itself. A process takes one slot at a
    time per thread; the event loop, which may hold several, keeps count of its own."""

    def __init__(self, directory: Path, size: int, name: str = "batch") -> None:
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.paths = [str(directory / f"{name}-{i}.lock") for i in range(size)]
        for path in self.paths:
            os.close(os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600))
        self._fds: list[int] | None = None
        self._mine: set[int] = set()  # slots this process holds

    def __getstate__(self) -> list[str]:
        return self.paths

    def __setstate__(self, paths: list[str]) -> None:
        self.paths, self._fds, self._mine = paths, None, set()

    def _open(self) -> list[int]:
        if self._fds is None:
            self._fds = [os.open(p, os.O_RDWR | os.O_CLOEXEC) for p in self.paths]
        return self._fds

    def _try(self, i: int) -> bool:
        if i in self._mine:
            return False
        try:
            fcntl.flock(self._open()[i], fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        self._mine.add(i)
        return True

    def try_acquire(self) -> int | None:
        """A free slot's number, now, or None."""
        for i in range(len(self.paths)):
            if self._try(i):
                return i
        return None

    def acquire(self) -> int:
        """A slot's number, waiting for one (blocking: for a worker process)."""
        got = self.try_acquire()
        if got is not None:
            return got
        i = os.getpid() % len(self.paths)
        fcntl.flock(self._open()[i], fcntl.LOCK_EX)
        self._mine.add(i)
        return i

    def release(self, i: int) -> None:
        self._mine.discard(i)
        fcntl.flock(self._open()[i], fcntl.LOCK_UN)

    def held(self) -> int:
        """Slots taken now, by any process (a probe: each free one is taken and given
        back at once)."""
        taken = 0
        for i in range(len(self.paths)):
            if i in self._mine:
                taken += 1
            elif self._try(i):
                self.release(i)
            else:
                taken += 1
        return taken

    @contextlib.contextmanager
    def slot(self) -> Iterator[None]:
        i = self.acquire()
        try:
            yield
        finally:
            self.release(i)


class _Gate:
    """``size`` slots on the event loop's side, or shared with worker processes
    (:class:`FileSlots`, which a process takes around its key operation and the event
    loop takes by polling: a short wait, and no thread to leave behind when the
    waiter is cancelled)."""

    def __init__(self, size: int, shared: FileSlots | None = None) -> None:
        self.size = size
        self.shared = shared
        self._sem = asyncio.Semaphore(size) if shared is None else None

    def locked(self) -> bool:
        return self.used() >= self.size

    def used(self) -> int:
        if self._sem is not None:
            return self.size - self._sem._value
        assert self.shared is not None
        return self.shared.held()

    async def acquire(self, timeout_s: float | None = None) -> int | None:
        """Take a slot; its number, for :meth:`release`."""
        if self._sem is not None:
            if not self._sem.locked():
                await self._sem.acquire()  # free: returns at once, without a task
            elif timeout_s is None:
                await self._sem.acquire()
            else:
                await asyncio.wait_for(self._sem.acquire(), max(0.0, timeout_s))
            return None
        assert self.shared is not None
        delay = 0.0005
        deadline = None if timeout_s is None else time.monotonic() + max(0.0, timeout_s)
        while (got := self.shared.try_acquire()) is None:
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.01)
        return got

    def release(self, token: int | None) -> None:
        if self._sem is not None:
            self._sem.release()
        else:
            assert self.shared is not None and token is not None
            self.shared.release(token)


class KeySlots:
    """Bounds concurrent use of the signing key. Batch jobs share ``total - reserved``
    slots; the kiosk path has ``reserved`` slots of its own and may borrow a free
    batch slot, never the other way round. With ``shared`` (a ``multiprocessing``
    semaphore of the batch slots' size), the batch slots are the ones the batch worker
    processes that hold the key take around each key operation."""

    def __init__(self, total: int, kiosk_reserved: int, shared: FileSlots | None = None) -> None:
        self.batch_slots = max(1, total - kiosk_reserved)
        self.kiosk_slots = kiosk_reserved
        self._batch = _Gate(self.batch_slots, shared)
        self._kiosk = _Gate(kiosk_reserved) if kiosk_reserved else None

    @property
    def shared(self) -> FileSlots | None:
        """The batch slots as worker processes take them (None: the event loop's own)."""
        return self._batch.shared

    @property
    def in_use(self) -> dict[str, int]:
        """Slots taken, by the slots' pool (a kiosk borrowing a batch slot counts there)."""
        return {"batch": self._batch.used(),
                "kiosk": self._kiosk.used() if self._kiosk is not None else 0}

    @contextlib.asynccontextmanager
    async def batch(self) -> AsyncIterator[None]:
        token = await self._batch.acquire()
        try:
            yield
        finally:
            self._batch.release(token)

    @contextlib.asynccontextmanager
    async def kiosk(self, timeout_s: float) -> AsyncIterator[None]:
        """A slot for one kiosk key operation: a free kiosk slot, else a free batch
        slot, else the next kiosk slot within ``timeout_s`` (the time left before the
        deadline), else Busy. The key operation is short (a worker process holding the
        key checks a document and signs it in about two milliseconds), so kiosks share
        their reserved slots without holding them for the whole request."""
        if self._kiosk is not None and not self._kiosk.locked():
            gate = self._kiosk
        elif not self._batch.locked() or self._kiosk is None:
            gate = self._batch
        else:
            gate = self._kiosk
        try:
            token = await gate.acquire(timeout_s)
        except TimeoutError:
            raise Busy("every signing slot is taken", headers={"Retry-After": "1"}) from None
        try:
            yield
        finally:
            gate.release(token)
