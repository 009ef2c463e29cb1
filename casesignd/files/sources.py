"""Sources: turn an item's ``object_ref`` into a file in the attempt's temp area.

An ``object_ref`` is either ``sha256:<64 hex>`` (an object uploaded to the job's own
case) or ``<source>:<path>`` naming a source from the config's ``sources``: a
directory root (``kind = "dir"``) or an HTTP base URL (``kind = "http"``).
:func:`parse_ref` is pure and runs at admission; :class:`Fetcher` does the I/O in
the worker. Every fetched file is checked against the item's declared size and
SHA-256 while it streams.

Error codes (all PermanentJobError, 422, unless noted):

- ``invalid_object_ref`` (ValidationError): not one of the two forms, an unknown
  source, an empty or over-long path, a NUL byte;
- ``path_outside_source``: an absolute path, a ``..`` component, or (dir sources) a
  symlink that resolves outside the root; refused at admission and again here;
- ``object_not_found``: no such object in the case, no such file, HTTP 404;
- ``source_rejected``: any other HTTP 4xx, a redirect, a file that is not regular;
- ``source_unavailable`` (SourceUnavailable, retryable): an HTTP source kept
  timing out, refusing connections, answering 429 or 5xx through all
  ``max_attempts`` tries; the job engine decides about further attempts;
- ``size_mismatch`` / ``digest_mismatch`` / ``limit_exceeded``: from the download.

HTTP retries use capped exponential backoff with full jitter (:func:`backoff_s`),
or the server's ``Retry-After`` (capped) on 429 and 503.
"""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import errno
import os
import random
import re
import stat
import time
import urllib.parse
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Sequence
from dataclasses import dataclass
from pathlib import Path

import aiohttp
from yarl import URL

from casesignd.core.calls import NO_CALLS, Call, Calls, server_of, trace_headers
from casesignd.core.errors import (
    CasesignError,
    DigestMismatch,
    LimitExceeded,
    PermanentJobError,
    SizeMismatch,
    SourceUnavailable,
    ValidationError,
)
from casesignd.core.hashing import OBJECT_REF_PREFIX, object_ref, object_ref_digest
from casesignd.core.keyring import object_owner
from casesignd.core.sealed import SealedPath, SealKey
from casesignd.core.source_settings import Source
from casesignd.files.envelope import SealedFile, plain_size
from casesignd.files.objects import ObjectStore
from casesignd.files.temp import Area, close_after

_SOURCE_REF = re.compile(r"^([A-Za-z0-9][A-Za-z0-9_.-]{0,63}):(.+)$", re.DOTALL)
MAX_PATH_CHARS = 1024
READ_CHUNK_BYTES = 256 * 1024

RETRY_REASONS = ("timeout", "connect", "http_429", "http_5xx")


@dataclass(frozen=True)
class SourceRef:
    """A parsed object_ref: ``source`` is None for a tenant object (then ``sha256`` is set)."""

    source: str | None
    path: str = ""
    sha256: str | None = None

    def __str__(self) -> str:
        if self.source is not None:
            return f"{self.source}:{self.path}"
        assert self.sha256 is not None  # a tenant object's reference names its digest
        return object_ref(self.sha256)


# --- pure decisions ------------------------------------------------------------------


def path_parts(path: str) -> list[str] | None:
    """Split a source-relative path into its components; None if it could leave the root.

    Absolute paths and ``..`` components leave the root, and backslashes are refused
    too (a Windows-style ``..\\x`` must not reach a server that splits on them);
    empty and ``.`` components are dropped (``a//b/./c`` is ``a/b/c``).
    """
    if path.startswith("/") or "\\" in path:
        return None
    parts = [p for p in path.split("/") if p not in ("", ".")]
    if any(p == ".." for p in parts):
        return None
    return parts


def parse_ref(
    ref: str, sources: Collection[str] | None = None, *, field: str | None = None
) -> SourceRef:
    """Parse an ``object_ref``; raise ValidationError (``invalid_object_ref`` or
    ``path_outside_source``) naming ``field``.

    With ``sources`` (the configured source names), an unknown source is refused too.
    """
    if not isinstance(ref, str):
        raise ValidationError("object_ref must be a string", code="invalid_object_ref", field=field)
    sha = object_ref_digest(ref)
    if sha is not None:
        return SourceRef(source=None, sha256=sha)
    m = _SOURCE_REF.match(ref)
    if not m or ref.startswith(OBJECT_REF_PREFIX):
        raise ValidationError(
            "object_ref must be sha256:<64 hex> or <source>:<path>",
            code="invalid_object_ref",
            field=field,
        )
    name, path = m.group(1), m.group(2)
    if sources is not None and name not in sources:
        raise ValidationError(f"no source named {name!r}", code="invalid_object_ref", field=field)
    if "\x00" in path or len(path) > MAX_PATH_CHARS:
        raise ValidationError(
            "the source path is not valid", code="invalid_object_ref", field=field
        )
    parts = path_parts(path)
    if parts is None:
        raise ValidationError(
            "the path must stay inside the source", code="path_outside_source", field=field
        )
    if not parts:
        raise ValidationError("the source path is empty", code="invalid_object_ref", field=field)
    return SourceRef(source=name, path="/".join(parts))


def backoff_s(attempt: int, base: float, cap: float, rand: float) -> float:
    """Delay after failed try number ``attempt`` (1-based): full jitter over a capped
    exponential, ``rand * min(cap, base * 2**(attempt-1))`` with ``rand`` in [0, 1)."""
    if attempt < 1:
        return 0.0
    # Cap the exponent first so a large attempt number cannot overflow a float.
    ceiling = min(cap, base * 2.0 ** min(attempt - 1, 62))
    return max(0.0, min(1.0, rand)) * ceiling


def retry_after_s(value: str | None, now: float, cap: float) -> float | None:
    """A Retry-After header (delta-seconds or an HTTP date, RFC 9110 10.2.3) as
    seconds from ``now``, capped at ``cap``; None if absent or unreadable."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return min(float(value), cap)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when is None or when.tzinfo is None:
        return None
    return min(max(0.0, when.timestamp() - now), cap)


def classify_status(status: int) -> str:
    """What an HTTP status means for a fetch: ``ok``, a retry reason, or a final code."""
    if status == 200:
        return "ok"
    if status == 429:
        return "http_429"
    if 500 <= status <= 599:
        return "http_5xx"
    if status in (404, 410):
        return "object_not_found"
    return "source_rejected"


# --- I/O -------------------------------------------------------------------------------


def _not_found(what: str) -> PermanentJobError:
    return PermanentJobError(f"{what} was not found", code="object_not_found")


def _file_size(path: Path) -> int:
    return os.stat(path).st_size


def _outside(what: str) -> PermanentJobError:
    return PermanentJobError(f"{what} is outside the source", code="path_outside_source")


def _open_in_root(root: Path, parts: list[str]) -> int:
    """Open ``root/parts`` for reading, refusing anything that resolves outside ``root``.

    Symlinks inside the root are followed as long as the target stays inside. The
    final component is opened with O_NOFOLLOW (realpath already resolved it; a link
    swapped in afterwards fails), and the opened file's real path is checked again
    through /proc, so a directory swapped for a symlink in between is caught too.
    """
    real_root = os.path.realpath(root)
    shown = "/".join(parts)
    target = os.path.realpath(os.path.join(real_root, *parts))
    if os.path.commonpath([real_root, target]) != real_root or target == real_root:
        raise _outside(shown)
    try:
        fd = os.open(target, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except (FileNotFoundError, NotADirectoryError):
        raise _not_found(shown) from None
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise _outside(shown) from None
        if e.errno in (errno.EACCES, errno.EPERM, errno.EISDIR):
            raise PermanentJobError(f"{shown} cannot be read", code="source_rejected") from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise PermanentJobError(f"{shown} is not a regular file", code="source_rejected")
        with contextlib.suppress(OSError):
            opened = os.readlink(f"/proc/self/fd/{fd}")
            if os.path.commonpath([real_root, opened]) != real_root:
                raise _outside(shown)
        # Reads must block normally from here (O_NONBLOCK only kept a FIFO from hanging).
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _check_length(
    content_length: int | None, expect_size: int | None, limit: int, shown: str
) -> None:
    # A Content-Length that already says no saves downloading the body; the stream is
    # still counted, since the header may lie.
    if content_length is None:
        return
    if content_length > limit:
        raise LimitExceeded(f"{shown} is {content_length} bytes, the limit is {limit}")
    if expect_size is not None and content_length != expect_size:
        raise SizeMismatch(f"{shown} is {content_length} bytes, the item declares {expect_size}")


class _FdReader:
    """Reads a file descriptor in chunks, each read in a thread, and owns closing it.

    As with :class:`casesignd.files.temp.HashingWriter`, a cancelled caller may leave
    a read in flight: :meth:`close` waits for it before the fd number is released.
    """

    def __init__(self, fd: int, chunk_bytes: int = READ_CHUNK_BYTES) -> None:
        self.fd = fd
        self.chunk_bytes = chunk_bytes
        self._pending: asyncio.Future[bytes] | None = None
        self._closed = False

    async def chunks(self) -> AsyncIterator[bytes]:
        while True:
            self._pending = asyncio.ensure_future(
                asyncio.to_thread(os.read, self.fd, self.chunk_bytes)
            )
            chunk = await asyncio.shield(self._pending)
            if not chunk:
                return
            yield chunk

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        close_after(self._pending, self.fd)


async def _download_fd(
    fd: int, area: Area, name: str, want: str, expect_size: int | None, limit: int
) -> Path | SealedPath:
    reader = _FdReader(fd)
    try:
        return await area.download(name, reader.chunks(), want, expect_size, limit)
    finally:
        reader.close()


class Fetcher:
    """Fetches an item's bytes into an attempt's :class:`Area`.

    ``on_retry(source_name, reason)`` is called once per HTTP retry (reason one of
    :data:`RETRY_REASONS`). ``sleep`` and ``rand`` are injectable for tests. Call
    :meth:`close` at shutdown (it closes the HTTP session it opened).
    """

    def __init__(
        self,
        sources: Sequence[Source],
        objects: ObjectStore,
        *,
        max_bytes: int,
        on_retry: Callable[[str, str], None] | None = None,
        session: aiohttp.ClientSession | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        rand: Callable[[], float] = random.random,
        clock: Callable[[], float] = time.time,
        calls: Calls = NO_CALLS,
    ) -> None:
        self.sources = {s.name: s for s in sources}
        # Each HTTP request is a span of these, under the span current when the fetch
        # began (the job's fetch phase), and carries that span's traceparent.
        self.calls = calls
        self.objects = objects
        self.max_bytes = max_bytes
        self.on_retry = on_retry
        self._session = session
        self._own_session = session is None
        self._sleep = sleep
        self._rand = rand
        self._clock = clock

    async def close(self) -> None:
        if self._own_session and self._session is not None:
            await self._session.close()
            self._session = None

    def _http(self) -> aiohttp.ClientSession:
        if self._session is None:
            # Per-request timeouts are set in _fetch_http; no total cap here because a large
            # body may legitimately take long as long as bytes keep coming.
            self._session = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=None), auto_decompress=False
            )
        return self._session

    async def fetch(
        self,
        ref: SourceRef,
        tenant: str,
        case_id: str | None,
        area: Area,
        name: str,
        expect_sha256: str,
        expect_size: int | None,
        *,
        max_bytes: int | None = None,
    ) -> Path | SealedPath:
        """Where to read the bytes of ``ref`` from: a sealed file ``name`` in ``area``
        (:class:`casesignd.core.sealed.SealedPath`), or, for a tenant object, the stored
        file itself, never copied.

        The file is for reading only. ``max_bytes`` overrides the fetcher's
        limit for this item. Raises the errors listed in the module docstring.
        """
        limit = self.max_bytes if max_bytes is None else max_bytes
        want = expect_sha256.lower()
        if ref.source is None:
            return await self._fetch_object(
                ref, tenant, case_id, area, name, want, expect_size, limit
            )
        source = self.sources.get(ref.source)
        if source is None:
            raise PermanentJobError(f"no source named {ref.source!r}", code="invalid_object_ref")
        parts = path_parts(ref.path)
        if parts is None or "\x00" in ref.path:
            raise _outside(ref.path)
        if not parts:
            raise _not_found(ref.path or "(empty path)")
        if source.kind == "dir":
            return await self._fetch_dir(source, parts, area, name, want, expect_size, limit)
        if source.kind == "http":
            return await self._fetch_http(source, parts, area, name, want, expect_size, limit)
        raise PermanentJobError(f"source {source.name!r} has unknown kind {source.kind!r}")

    async def stored_key(self, sha256: str) -> SealKey | None:
        """The data key of a stored object when the store may hold it sealed at rest
        (a key is configured and the object has one), for the worker process that
        reads it in place (:meth:`stored_path`); None otherwise: no file is read
        here, and a plain store asks nothing of the store."""
        return await self.objects.envelope.key_if_any(object_owner(sha256))

    def forget_keys(self, sha256s: Collection[str]) -> None:
        """Drop the data keys of these stored objects from memory: a job that read them
        met a file that did not authenticate (``io_error``), which another process may
        have replaced under a new key since; its retry reads the keys afresh."""
        self.objects.envelope.forget([object_owner(s) for s in sha256s])

    async def scannable(self, path: Path, sha256: str) -> Path | SealedPath:
        """A stored object as a scanner takes it: its path when plain, with its data
        key when sealed at rest (``io_error`` when that key is gone)."""
        try:
            sealed = await self.objects.envelope.sealed(path, object_owner(sha256))
        except FileNotFoundError:
            raise _not_found(f"object sha256:{sha256}") from None
        return sealed

    def stored_path(self, ref: SourceRef, tenant: str, case_id: str | None, want: str,
                    expect_size: int) -> Path:
        """Where a stored object (``sha256:`` reference) is, to read in place by a
        reader that checks it itself (a batch job's contract, read by the worker
        process that signs it: :func:`casesignd.signing.worker.sign_stored`, which answers
        ``object_not_found`` when it is not there). Raises as :meth:`fetch` would."""
        if ref.source is not None:
            raise PermanentJobError("not a stored object", code="invalid_object_ref")
        if ref.sha256 != want.lower():
            raise DigestMismatch("object_ref and sha256 name different objects")
        if expect_size > self.max_bytes:
            raise LimitExceeded(f"the object passes the limit of {self.max_bytes} bytes")
        src = None if case_id is None else self.objects.where(tenant, case_id, want.lower())
        if src is None:
            raise _not_found(f"object sha256:{want.lower()}")
        return src

    async def _fetch_object(
        self,
        ref: SourceRef,
        tenant: str,
        case_id: str | None,
        area: Area,
        name: str,
        want: str,
        expect_size: int | None,
        limit: int,
    ) -> Path | SealedPath:
        if ref.sha256 != want:
            raise DigestMismatch("object_ref and sha256 name different objects")
        src = None if case_id is None else self.objects.path(tenant, case_id, ref.sha256)
        if src is None:
            raise _not_found(f"object sha256:{ref.sha256}")
        sealed = await self.objects.envelope.sealed(src, object_owner(ref.sha256))
        # Sealed at rest under its own data key, it is read in place too, as the
        # sealed file it is (every chunk authenticated as it is read); its plain size
        # follows from its size and header.
        size = await asyncio.to_thread(plain_size if isinstance(sealed, SealedFile)
                                       else _file_size, src)
        if expect_size is not None and size != expect_size:
            raise SizeMismatch(f"the object is {size} bytes, the item declares {expect_size}")
        if size > limit:
            raise LimitExceeded(f"the object passes the limit of {limit} bytes")
        # The store verified the digest when the object was uploaded, and a stored
        # object is never written again: it is read where it is. A copy would cost a
        # whole read, write and hash of it, and its size again in the temp area; a hard
        # link would put the stored file's bytes under the temp root, whose files are
        # all sealed. Neither retention nor erasure removes an object while a job that
        # uses it may run.
        return sealed

    async def _fetch_dir(
        self,
        source: Source,
        parts: list[str],
        area: Area,
        name: str,
        want: str,
        expect_size: int | None,
        limit: int,
    ) -> Path | SealedPath:
        fd = await asyncio.to_thread(_open_in_root, Path(source.root), parts)
        return await _download_fd(fd, area, name, want, expect_size, limit)

    def url_for(self, source: Source, parts: list[str]) -> str:
        """base_url + the percent-encoded path (each component quoted on its own)."""
        quoted = "/".join(urllib.parse.quote(p, safe="") for p in parts)
        return source.base_url.rstrip("/") + "/" + quoted

    async def _get(self, source: Source, url: str, shown: str, timeout: aiohttp.ClientTimeout,
                   call: Call, into: tuple[Area, str, str, int | None, int]
                   ) -> SealedPath | tuple[str, float | None]:
        """One GET of ``url``: the file downloaded into the area (``into``: the area,
        the name, the digest and size wanted, the limit), or why to try again (a
        reason of :data:`RETRY_REASONS` and the server's Retry-After, capped)."""
        area, name, want, expect_size, limit = into
        async with self._http().get(
            # encoded=True: the path is quoted already; yarl must not unquote %2F back
            # into a slash.
            URL(url, encoded=True),
            timeout=timeout,
            # The digest covers the bytes as stored: no transfer compression (and no
            # decompression bomb through Content-Encoding).
            headers={"Accept-Encoding": "identity", **trace_headers(call)},
            allow_redirects=False,
        ) as resp:
            call.note("http.response.status_code", resp.status)
            verdict = classify_status(resp.status)
            if verdict == "ok":
                _check_length(resp.content_length, expect_size, limit, shown)
                path = await area.download(
                    name, resp.content.iter_chunked(READ_CHUNK_BYTES), want, expect_size, limit)
                if resp.content_length is not None:
                    call.note("http.response.body.size", resp.content_length)
                return path
            if verdict == "object_not_found":
                raise _not_found(shown)
            if verdict == "source_rejected":
                raise PermanentJobError(
                    f"source {source.name!r} answered {resp.status} for {shown}",
                    code="source_rejected",
                )
            hint = None
            if resp.status in (429, 503):
                hint = retry_after_s(
                    resp.headers.get("Retry-After"), self._clock(), source.retry_after_cap_s
                )
            return verdict, hint

    async def _fetch_http(
        self,
        source: Source,
        parts: list[str],
        area: Area,
        name: str,
        want: str,
        expect_size: int | None,
        limit: int,
    ) -> Path | SealedPath:
        url = self.url_for(source, parts)
        shown = "/".join(parts)
        timeout = aiohttp.ClientTimeout(
            total=None, sock_connect=source.connect_timeout_s, sock_read=source.read_timeout_s
        )
        attempts = max(1, source.max_attempts)
        last_reason = "connect"
        hint: float | None = None
        # The fetch phase's span, handed on explicitly: a retry's sleep is no span.
        parent = self.calls.current()
        for attempt in range(1, attempts + 1):
            hint = None
            try:
                with self.calls.call("source.fetch", parent, {
                        "casesignd.call": "source", "casesignd.source": source.name,
                        "casesignd.try": attempt, "http.request.method": "GET",
                        **server_of(source.base_url)}) as call:
                    got = await self._get(source, url, shown, timeout, call,
                                          (area, name, want, expect_size, limit))
                if not isinstance(got, tuple):
                    return got
                last_reason, hint = got
            except CasesignError:
                raise
            except (TimeoutError, aiohttp.ServerTimeoutError):
                last_reason = "timeout"
            except (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError):
                last_reason = "connect"
            if attempt == attempts:
                break
            if self.on_retry is not None:
                self.on_retry(source.name, last_reason)
            delay = backoff_s(attempt, source.base_delay_s, source.max_delay_s, self._rand())
            await self._sleep(hint if hint is not None else delay)
        raise SourceUnavailable(
            f"source {source.name!r} unavailable after {attempts} tries ({last_reason})",
            delay_s=hint,
            detail={"source": source.name, "reason": last_reason, "path": shown},
        )
