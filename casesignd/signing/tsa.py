"""RFC 3161 time stamps for PAdES B-T: pure request/response handling, thin transport.

The time stamp covers the signature value (RFC 3161 Appendix A; ETSI EN 319 122-1
§5.3): the message imprint is SHA-256 over the SignerInfo's signature octets.
Every failure (network, HTTP status, an answer that is not a granted token for
our imprint and nonce) raises :class:`casesignd.core.errors.TsaUnavailable`, which is
retryable: a signature is never returned untimestamped when B-T was asked for.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import secrets

import aiohttp
from asn1crypto import algos, cms, core, tsp, x509

from casesignd.core.calls import NO_CALLS, Calls, server_of, trace_headers
from casesignd.core.errors import TsaUnavailable

QUERY_TYPE = "application/timestamp-query"
REPLY_TYPE = "application/timestamp-reply"
MAX_REPLY_BYTES = 64 * 1024


class _TimeStampResp(core.Sequence):
    # RFC 3161 §2.4.2: the token is absent when the request is refused; asn1crypto's
    # own TimeStampResp makes it mandatory and so cannot read a rejection.
    _fields = [
        ("status", tsp.PKIStatusInfo),
        ("time_stamp_token", cms.ContentInfo, {"optional": True}),
    ]


def new_nonce() -> int:
    """A random 63-bit nonce (RFC 3161 §2.4.1: large enough to be unique)."""
    return secrets.randbits(63)


def build_request(imprint: bytes, nonce: int) -> bytes:
    """A DER TimeStampReq (RFC 3161 §2.4.1) for a SHA-256 ``imprint``, asking for the TSA cert."""
    if len(imprint) != 32:
        raise ValueError("expected a SHA-256 imprint")
    req = tsp.TimeStampReq(
        {
            "version": "v1",
            "message_imprint": {
                "hash_algorithm": algos.DigestAlgorithm({"algorithm": "sha256"}),
                "hashed_message": imprint,
            },
            "nonce": nonce,
            "cert_req": True,
        }
    )
    return req.dump()


def check_response(der: bytes, imprint: bytes, nonce: int) -> bytes:
    """The TimeStampToken (DER ContentInfo) from a TimeStampResp, after checking it.

    Checks (RFC 3161 §2.4.2): status granted or grantedWithMods, a SignedData token
    whose TSTInfo carries our imprint (SHA-256) and our nonce. The TSA's signature
    is checked by :mod:`casesignd.verify.validate` along with the document.
    """
    try:
        resp = _TimeStampResp.load(der)
        status = resp["status"]["status"].native
        if status not in ("granted", "granted_with_mods"):
            text = resp["status"]["status_string"].native
            raise TsaUnavailable(f"TSA refused the request: {status} {text or ''}".strip())
        token = resp["time_stamp_token"]
        if not token or token["content_type"].native != "signed_data":
            raise TsaUnavailable("TSA token is not SignedData")
        tst = token["content"]["encap_content_info"]["content"].parsed
        mi = tst["message_imprint"]
        if mi["hash_algorithm"]["algorithm"].native != "sha256":
            raise TsaUnavailable("TSA answered with another hash algorithm")
        if mi["hashed_message"].native != imprint:
            raise TsaUnavailable("TSA token covers another imprint")
        if tst["nonce"].native != nonce:
            raise TsaUnavailable("TSA token nonce does not match the request")
        return token.dump(force=False)
    except TsaUnavailable:
        raise
    except (ValueError, TypeError, KeyError, AttributeError) as e:
        raise TsaUnavailable(f"TSA answer is not a valid TimeStampResp: {e}") from e


def token_signer(token: bytes) -> tuple[x509.Certificate, list[x509.Certificate]]:
    """The TSA's certificate of a TimeStampToken, and the other certificates it carries
    (``cert_req`` asks for them; RFC 3161 §2.4.1)."""
    signed = cms.ContentInfo.load(token)["content"]
    certs = [c.chosen for c in signed["certificates"] if c.name == "certificate"]
    sid = signed["signer_infos"][0]["sid"]
    for cert in certs:
        if sid.name == "issuer_and_serial_number":
            if (cert.issuer == sid.chosen["issuer"]
                    and cert.serial_number == sid.chosen["serial_number"].native):
                return cert, [c for c in certs if c is not cert]
        elif cert.key_identifier == sid.chosen.native:
            return cert, [c for c in certs if c is not cert]
    raise TsaUnavailable("the TSA's token does not carry the TSA's certificate")


def token_time(token: bytes) -> dt.datetime:
    """genTime of a TimeStampToken (a timezone-aware datetime)."""
    ci = cms.ContentInfo.load(token)
    return ci["content"]["encap_content_info"]["content"].parsed["gen_time"].native


async def timestamp(
    session: aiohttp.ClientSession, url: str, data: bytes, timeout_s: float
) -> bytes:
    """Time-stamp ``data`` (a signature value) at ``url``; the TimeStampToken DER."""
    imprint = hashlib.sha256(data).digest()
    nonce = new_nonce()
    body = build_request(imprint, nonce)
    try:
        async with session.post(
            url,
            data=body,
            headers={"Content-Type": QUERY_TYPE, "Accept": REPLY_TYPE},
            timeout=aiohttp.ClientTimeout(total=timeout_s),
        ) as resp:
            if resp.status != 200:
                raise TsaUnavailable(f"TSA answered HTTP {resp.status}")
            answer = bytearray()
            async for chunk in resp.content.iter_chunked(16384):
                answer += chunk
                if len(answer) > MAX_REPLY_BYTES:
                    break
    except (TimeoutError, aiohttp.ClientError, OSError) as e:
        raise TsaUnavailable(f"TSA unreachable: {type(e).__name__}: {e}") from e
    if len(answer) > MAX_REPLY_BYTES:
        raise TsaUnavailable("TSA answer too large")
    return check_response(bytes(answer), imprint, nonce)


def timestamp_blocking(url: str, data: bytes, timeout_s: float, calls: Calls = NO_CALLS,
                       parent: str | None = None) -> bytes:
    """A synchronous :func:`timestamp` (urllib, no event loop), run in a thread."""
    return timestamp_imprint_blocking(url, hashlib.sha256(data).digest(), timeout_s,
                                      calls, parent)


def timestamp_imprint_blocking(url: str, imprint: bytes, timeout_s: float,
                               calls: Calls = NO_CALLS, parent: str | None = None) -> bytes:
    """A TimeStampToken over a SHA-256 ``imprint`` computed elsewhere (a document
    timestamp's digest of its byte ranges, ETSI EN 319 142-1 §5.4). The request is a
    ``tsa.timestamp`` span of ``calls`` under ``parent`` (a ``traceparent``: this runs
    in a thread, where no span is current), and sends that span's ``traceparent``."""
    import urllib.error
    import urllib.request

    nonce = new_nonce()
    body = build_request(imprint, nonce)
    with calls.call("tsa.timestamp", parent, {
            "casesignd.call": "tsa", "http.request.method": "POST",
            "http.request.body.size": len(body), **server_of(url)}) as call:
        req = urllib.request.Request(
            url, data=body, headers={"Content-Type": QUERY_TYPE, **trace_headers(call)})
        try:
            with urllib.request.urlopen(req, timeout=timeout_s) as resp:  # noqa: S310 - configured URL
                call.note("http.response.status_code", resp.status)
                answer = resp.read(MAX_REPLY_BYTES + 1)
        except urllib.error.HTTPError as e:
            call.note("http.response.status_code", e.code)
            raise TsaUnavailable(f"TSA answered HTTP {e.code}") from e
        except (urllib.error.URLError, OSError, TimeoutError) as e:
            raise TsaUnavailable(f"TSA unreachable: {e}") from e
        call.note("http.response.body.size", len(answer))
        return check_response(answer, imprint, nonce)
