"""A small synchronous HTTP client of the casesignd API, for the command line.

Standard library only (``http.client``), so the CLI starts fast and needs nothing
beyond the package. Where the base URL and token come from, first match wins,
each setting on its own:

1. the environment: ``CASESIGND_URL``, ``CASESIGND_TOKEN``;
2. ``client.env`` next to the config file (``--config PATH`` → ``PATH``'s directory;
   without ``--config``, ``$CASESIGND_CONFIG``, else ``casesignd-state/config.toml``,
   the directory ``casesignd init`` writes by default);
3. for the URL only, ``http://127.0.0.1:8787``.

A server error (the contract's ``{"error": {"code", "message", "field",
"correlation_id"}}``) becomes a :class:`ClientError`; a server that cannot be
reached becomes :class:`ServerUnreachable`.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import secrets
import time
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from casesignd.core.errors import CasesignError
from casesignd.core.hashing import file_sha256, object_ref, sha256_hex

DEFAULT_URL = "http://127.0.0.1:8787"
DEFAULT_CONFIG = "casesignd-state/config.toml"
TERMINAL_STATES = frozenset({"ready", "failed", "canceled"})
_CHUNK_BYTES = 256 * 1024


class ClientError(CasesignError):
    """The server refused a request (or answered something that is not the API).

    ``status`` is the HTTP status, ``code``/``message``/``field`` come from the
    error body, ``correlation_id`` names the request in the server's log.
    """

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        field: str | None = None,
        correlation_id: str | None = None,
        retry_after_s: float | None = None,
        reason: str | None = None,
        where: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message, code=code, field=field, delay_s=retry_after_s,
                         reason=reason, where=where)
        self.answered_status = status
        self.correlation_id = correlation_id

    @property
    def status(self) -> int:
        """The HTTP status the server answered (0: no answer). The one error whose
        status is not its code's: it reports the other side of a call, whose codes may
        be newer than this table."""
        return self.answered_status

    @property
    def retry_after_s(self) -> float | None:
        return self.delay_s

    def line(self) -> str:
        """One line for a person: ``error: code: message (field ..., correlation id ...)``;
        a refused document's ``(reason ..., page ..., object ...)`` too."""
        extras = [refusal_text(self.reason, self.where)] if self.reason else []
        if self.field:
            extras.append(f"field {self.field}")
        if self.delay_s is not None:
            extras.append(f"retry after {self.delay_s:g} s")
        if self.correlation_id:
            extras.append(f"correlation id {self.correlation_id}")
        tail = f" ({', '.join(extras)})" if extras else ""
        return f"error: {self.code}: {self.message}{tail}"


def refusal_text(reason: str, where: Mapping[str, Any] | None) -> str:
    """``reason R, page P, object O, attachment 'A', field 'F'``: a refused document's
    reason and where, for one line (pure)."""
    parts = [f"reason {reason}"]
    for key in ("page", "object", "attachment", "field"):
        value = (where or {}).get(key)
        if value is not None:
            parts.append(f"{key} {value!r}" if isinstance(value, str) else f"{key} {value}")
    return ", ".join(parts)


class ServerUnreachable(ClientError):
    """No answer: connection refused, name not resolved, or timed out."""

    def __init__(self, message: str) -> None:
        super().__init__(0, "server_unreachable", message)


@dataclass(frozen=True)
class Settings:
    """Where the client talks to, and how it found out."""

    url: str
    token: str | None
    url_from: str
    token_from: str | None


# --- pure parts ---------------------------------------------------------------------


def parse_env_file(text: str) -> dict[str, str]:
    """``KEY=VALUE`` lines; blank lines and ``#`` comments skipped, quotes removed."""
    out: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, _, value = line.partition("=")
        key = key.strip().removeprefix("export ").strip()
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
            value = value[1:-1]
        out[key] = value
    return out


def resolve_settings(
    environ: Mapping[str, str], env_file: Mapping[str, str], env_file_name: str
) -> Settings:
    """Apply the precedence of the module docstring to already-read sources."""
    if environ.get("CASESIGND_URL"):
        url, url_from = environ["CASESIGND_URL"], "CASESIGND_URL"
    elif env_file.get("CASESIGND_URL"):
        url, url_from = env_file["CASESIGND_URL"], env_file_name
    else:
        url, url_from = DEFAULT_URL, "default"
    token: str | None = None
    token_from: str | None = None
    if environ.get("CASESIGND_TOKEN"):
        token, token_from = environ["CASESIGND_TOKEN"], "CASESIGND_TOKEN"
    elif env_file.get("CASESIGND_TOKEN"):
        token, token_from = env_file["CASESIGND_TOKEN"], env_file_name
    return Settings(url.rstrip("/"), token, url_from, token_from)


def error_from_response(
    status: int, reason: str, body: bytes, headers: Mapping[str, str]
) -> ClientError:
    """The :class:`ClientError` for an error answer, whatever its body looks like."""
    retry_after: float | None = None
    raw_retry = headers.get("Retry-After")
    if raw_retry is not None:
        try:
            retry_after = float(raw_retry)
        except ValueError:
            retry_after = None
    try:
        err = json.loads(body)["error"]
        return ClientError(
            status,
            str(err.get("code") or f"http_{status}"),
            str(err.get("message") or reason),
            err.get("field"),
            err.get("correlation_id"),
            retry_after,
            err.get("reason") if isinstance(err.get("reason"), str) else None,
            err.get("where") if isinstance(err.get("where"), dict) else None,
        )
    except (ValueError, KeyError, TypeError, AttributeError):
        snippet = body[:200].decode("utf-8", "replace").strip()
        message = f"HTTP {status} {reason}" + (f": {snippet}" if snippet else "")
        return ClientError(status, f"http_{status}", message, retry_after_s=retry_after)


def next_poll_delay(previous_s: float | None, *, first_s: float = 0.2, max_s: float = 2.0) -> float:
    """Backoff between polls of a job: 0.2 s, growing by half each time, at most 2 s."""
    if previous_s is None:
        return first_s
    return min(previous_s * 1.5, max_s)


def multipart_body(parts: list[tuple[str, str | None, str, bytes]]) -> tuple[bytes, str]:
    """A ``multipart/form-data`` body (RFC 7578) and its Content-Type.

    ``parts`` are ``(name, filename or None, content type, data)``.
    """
    boundary = "casesignd-" + secrets.token_hex(16)
    out: list[bytes] = []
    for name, filename, ctype, data in parts:
        disposition = f'form-data; name="{_quote_param(name)}"'
        if filename is not None:
            disposition += f'; filename="{_quote_param(filename)}"'
        out.append(
            f"--{boundary}\r\nContent-Disposition: {disposition}\r\n"
            f"Content-Type: {ctype}\r\n\r\n".encode()
        )
        out.append(data)
        out.append(b"\r\n")
    out.append(f"--{boundary}--\r\n".encode())
    return b"".join(out), f"multipart/form-data; boundary={boundary}"


def _quote_param(value: str) -> str:
    # RFC 7578 §4.2: percent-encode what would break the quoted-string.
    return value.replace("\\", "\\\\").replace('"', "%22").replace("\r", "%0D").replace("\n", "%0A")


def _seg(value: str) -> str:
    return urllib.parse.quote(value, safe=":")


# --- the client ---------------------------------------------------------------------


class Client:
    """Blocking calls of the casesignd API; one connection per call."""

    def __init__(self, url: str, token: str | None, *, timeout_s: float = 60.0) -> None:
        parsed = urllib.parse.urlsplit(url)
        if parsed.scheme not in ("http", "https") or not parsed.hostname:
            raise ClientError(0, "bad_url", f"not an http(s) URL: {url!r}")
        self.url = url.rstrip("/")
        self.token = token
        self.timeout_s = timeout_s
        self._parsed = parsed

    @classmethod
    def from_env(
        cls,
        config_path: str | os.PathLike[str] | None = None,
        environ: Mapping[str, str] | None = None,
        *,
        timeout_s: float = 60.0,
    ) -> Client:
        """A client configured as the module docstring says."""
        return cls(*_settings_tuple(config_path, environ), timeout_s=timeout_s)

    # -- transport --

    def _connection(self, parsed: urllib.parse.SplitResult) -> http.client.HTTPConnection:
        host = parsed.hostname
        if not host:  # an absolute target (a redirect) that names no host
            raise ClientError(0, "bad_url", f"no host in {parsed.geturl()!r}")
        if parsed.scheme == "https":
            return http.client.HTTPSConnection(
                host, parsed.port, timeout=self.timeout_s, blocksize=_CHUNK_BYTES
            )
        return http.client.HTTPConnection(
            host, parsed.port, timeout=self.timeout_s, blocksize=_CHUNK_BYTES
        )

    def request(
        self,
        method: str,
        target: str,
        *,
        body: bytes | BinaryIO | _Counting | None = None,
        headers: Mapping[str, str] | None = None,
        auth: bool = True,
        sink: Callable[[bytes], object] | None = None,
    ) -> tuple[int, dict[str, str], bytes]:
        """Send one request; answer ``(status, headers, body)`` for any 2xx/3xx.

        ``target`` is a path (joined to the base URL, whose own path is kept as a
        prefix) or an absolute URL; the token is sent only to the base URL's origin.
        With ``sink``, a 2xx/3xx body is handed to it in chunks (and answered empty),
        so a large download never sits in memory whole.
        """
        parsed = urllib.parse.urlsplit(target)
        if parsed.scheme:
            same_origin = (parsed.scheme, parsed.netloc) == (self._parsed.scheme,
                                                            self._parsed.netloc)
            path = urllib.parse.urlunsplit(("", "", parsed.path or "/", parsed.query, ""))
        else:
            same_origin = True
            parsed = self._parsed
            path = self._parsed.path.rstrip("/") + target
        hdrs = {"Accept": "application/json", "User-Agent": "casesignd-cli"}
        if auth and same_origin and self.token:
            hdrs["Authorization"] = f"Bearer {self.token}"
        hdrs.update(headers or {})
        conn = self._connection(parsed)
        try:
            # The server may refuse a body early (413) and close its side; its
            # answer is then still waiting to be read.
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                conn.request(method, path, body=body, headers=hdrs)
            resp = conn.getresponse()
            status, reason = resp.status, resp.reason
            if sink is not None and status < 400:
                while chunk := resp.read(_CHUNK_BYTES):
                    sink(chunk)
                data = b""
            else:
                data = resp.read()
            resp_headers = {k: v for k, v in resp.getheaders()}
        except OSError as e:  # refused, reset, unresolved, timed out
            raise ServerUnreachable(f"cannot reach {self.url}: {_reason(e)}") from None
        except http.client.HTTPException as e:
            raise ServerUnreachable(f"bad answer from {self.url}: {e!r}") from None
        finally:
            conn.close()
        if status >= 400:
            raise error_from_response(status, reason, data, _Caseless(resp_headers))
        return status, resp_headers, data

    def _json(self, method: str, target: str, payload: Any = None,
              headers: Mapping[str, str] | None = None) -> tuple[int, Any]:
        hdrs = dict(headers or {})
        body = None
        if payload is not None:
            body = json.dumps(payload).encode()
            hdrs["Content-Type"] = "application/json"
        status, resp_headers, data = self.request(method, target, body=body, headers=hdrs)
        try:
            return status, json.loads(data) if data else {}
        except ValueError:
            raise ClientError(status, "bad_response",
                              f"{method} {target} answered {status} without JSON") from None

    # -- the API --

    def upload(self, path: str | os.PathLike[str], case_id: str, *,
               digest: tuple[str, int] | None = None,
               progress: Callable[[int], None] | None = None) -> dict[str, Any]:
        """Upload a file to a case; answers the object's ``sha256``, ``size``,
        ``object_ref`` and ``created`` (False when it was already there).

        ``digest`` is the file's ``(sha256, size)`` when the caller has it already;
        ``progress`` is told the bytes sent so far as the body goes out."""
        path = Path(path)
        sha, size = digest or file_sha256(path)
        with open(path, "rb") as raw:
            f = raw if progress is None else _Counting(raw, progress)
            status, _, data = self.request(
                "PUT", f"/v1/cases/{_seg(case_id)}/objects/{sha}", body=f,
                headers={"Content-Type": "application/octet-stream",
                         "Content-Length": str(size)},
            )
        out: dict[str, Any] = {}
        try:
            parsed = json.loads(data) if data else {}
            if isinstance(parsed, dict):
                out.update(parsed)
        except ValueError:
            pass
        out.update({"case_id": case_id, "sha256": sha, "size": size,
                    "object_ref": object_ref(sha), "created": status == 201})
        return out

    def has_object(self, case_id: str, sha256: str) -> int | None:
        """The size of the case's object ``sha256``, or None when the case does not hold
        it (or the server cannot say: one without ``HEAD`` on objects answers 405)."""
        try:
            _, headers, _ = self.request("HEAD", f"/v1/cases/{_seg(case_id)}/objects/{sha256}")
        except ClientError as e:
            if e.status in (404, 405):
                return None
            raise
        length = _Caseless(headers).get("Content-Length")
        return int(length) if length is not None and length.isdigit() else None

    def submit(self, manifest: dict[str, Any], idempotency_key: str | None = None
               ) -> dict[str, Any]:
        """POST /v1/jobs; answers the job (a new one, or the original on a replay)."""
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else None
        return self._json("POST", "/v1/jobs", manifest, headers)[1]

    def get_job(self, job_id: str) -> dict[str, Any]:
        return self._json("GET", f"/v1/jobs/{_seg(job_id)}")[1]

    def list_jobs(self, state: str | None = None, limit: int | None = None,
                  cursor: str | None = None) -> dict[str, Any]:
        """One page of the tenant's jobs, newest first: ``{"jobs", "next_cursor"}``."""
        query = {k: v for k, v in (("state", state), ("limit", limit), ("cursor", cursor))
                 if v is not None}
        qs = f"?{urllib.parse.urlencode(query)}" if query else ""
        return self._json("GET", f"/v1/jobs{qs}")[1]

    def events(self, job_id: str) -> list[dict[str, Any]]:
        """The job's audit events, oldest first."""
        return self._json("GET", f"/v1/jobs/{_seg(job_id)}/events")[1].get("events", [])

    def retry(self, job_id: str) -> dict[str, Any]:
        return self._json("POST", f"/v1/jobs/{_seg(job_id)}/retry")[1]

    def cancel(self, job_id: str) -> dict[str, Any]:
        return self._json("POST", f"/v1/jobs/{_seg(job_id)}/cancel")[1]

    def hold(self, case_id: str, placed: bool = True) -> dict[str, Any]:
        """Place (or lift) a case's legal hold."""
        return self._json("POST" if placed else "DELETE", f"/v1/cases/{_seg(case_id)}/hold")[1]

    def erase(self, case_id: str) -> dict[str, Any]:
        """Erase a case's objects and artifacts now."""
        return self._json("DELETE", f"/v1/cases/{_seg(case_id)}")[1]

    def wait(
        self,
        job_id: str,
        timeout_s: float,
        *,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
        on_poll: Callable[[dict[str, Any]], None] | None = None,
    ) -> dict[str, Any]:
        """Poll the job until it is ready, failed or canceled, or ``timeout_s`` passes.

        Answers the last job seen; the caller compares its state. ``on_poll`` sees
        every job read.
        """
        deadline = clock() + timeout_s
        delay: float | None = None
        while True:
            job = self.get_job(job_id)
            if on_poll is not None:
                on_poll(job)
            if job.get("state") in TERMINAL_STATES:
                return job
            remaining = deadline - clock()
            if remaining <= 0:
                return job
            delay = next_poll_delay(delay)
            sleep(min(delay, remaining))

    def sign(self, path: str | os.PathLike[str], manifest: dict[str, Any],
             idempotency_key: str | None = None) -> tuple[bytes, dict[str, str]]:
        """POST /v1/sign: the signed PDF and the answer's headers (X-Job-Id, X-Artifact-SHA256).

        The signed bytes are checked against X-Artifact-SHA256 when the server sends it.
        """
        path = Path(path)
        document = path.read_bytes()
        body, ctype = multipart_body([
            ("manifest", None, "application/json", json.dumps(manifest).encode()),
            ("document", path.name, "application/pdf", document),
        ])
        headers = {"Content-Type": ctype, "Accept": "application/pdf"}
        if idempotency_key:
            headers["Idempotency-Key"] = idempotency_key
        _, resp_headers, data = self.request("POST", "/v1/sign", body=body, headers=headers)
        resp_headers = _Caseless(resp_headers)
        want = resp_headers.get("X-Artifact-SHA256")
        if want and sha256_hex(data) != want.lower():
            raise ClientError(0, "digest_mismatch",
                              "the signed document does not match X-Artifact-SHA256; "
                              "nothing written")
        return data, resp_headers

    def download(self, url_or_path: str,
                 sink: Callable[[bytes], object] | None = None) -> bytes:
        """GET an artifact by its signed link (absolute or a path under the base URL);
        with ``sink``, its bytes go there in chunks instead (see :meth:`request`)."""
        return self.request("GET", url_or_path, headers={"Accept": "*/*"}, sink=sink)[2]


class _Counting:
    """A file to send as a request body that tells ``progress`` the bytes read so far
    (http.client reads a body that has ``read`` in blocks)."""

    def __init__(self, f: BinaryIO, progress: Callable[[int], None]) -> None:
        self._f = f
        self._progress = progress
        self.sent = 0

    def read(self, n: int = -1) -> bytes:
        data = self._f.read(n)
        if data:  # the read at the end finds nothing: nothing more to tell
            self.sent += len(data)
            self._progress(self.sent)
        return data


class _Caseless(dict):
    """Response headers with case-insensitive ``get``."""

    def __init__(self, headers: Mapping[str, str]) -> None:
        super().__init__(headers)
        self._lower = {k.lower(): v for k, v in headers.items()}

    def get(self, key: str, default: Any = None) -> Any:  # type: ignore[override]
        return self._lower.get(key.lower(), default)


def _reason(e: BaseException) -> str:
    if isinstance(e, ConnectionRefusedError):
        return "connection refused (is `casesignd serve` running?)"
    if isinstance(e, TimeoutError):
        return "timed out"
    return getattr(e, "strerror", None) or str(e) or type(e).__name__


def config_path_from(config_path: str | os.PathLike[str] | None,
                     environ: Mapping[str, str]) -> Path:
    """The config file a command uses: ``--config``, else $CASESIGND_CONFIG, else the default."""
    return Path(config_path or environ.get("CASESIGND_CONFIG") or DEFAULT_CONFIG)


def load_settings(config_path: str | os.PathLike[str] | None = None,
                  environ: Mapping[str, str] | None = None) -> Settings:
    """Read the environment and ``client.env`` next to the config; see the module docstring."""
    environ = os.environ if environ is None else environ
    env_path = config_path_from(config_path, environ).parent / "client.env"
    try:
        env_file = parse_env_file(env_path.read_text(encoding="utf-8"))
    except OSError:
        env_file = {}
    return resolve_settings(environ, env_file, str(env_path))


def _settings_tuple(config_path: str | os.PathLike[str] | None,
                    environ: Mapping[str, str] | None) -> tuple[str, str | None]:
    s = load_settings(config_path, environ)
    return s.url, s.token
