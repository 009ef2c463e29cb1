"""Pure parts of signing: PDF dates, xref runs, names, RFC 3161 checks."""

from __future__ import annotations

import datetime as dt
import hashlib

import pytest
from asn1crypto import tsp

from casesignd.core.errors import CertifiedPdf, TsaUnavailable
from casesignd.ops import devpki
from casesignd.pdf.syntax import pdf_date, unique_name, xref_runs
from casesignd.signing import tsa
from casesignd.signing.attachments import Bound, evidence_binding, evidence_entries
from casesignd.signing.pades import Party, SignatureMeta, check_docmdp, reason_text
from tests.helpers_tsa import make_response

UTC = dt.UTC


@pytest.mark.parametrize(
    ("when", "text"),
    [
        (dt.datetime(2026, 3, 4, 5, 6, 7, tzinfo=UTC), "D:20260304050607+00'00'"),
        (dt.datetime(2026, 3, 4, 5, 6, 7), "D:20260304050607+00'00'"),
        (
            dt.datetime(2026, 3, 4, 5, 6, 7, tzinfo=dt.timezone(dt.timedelta(hours=-5, minutes=-30))),
            "D:20260304050607-05'30'",
        ),
    ],
)
def test_pdf_date(when: dt.datetime, text: str) -> None:
    # What we write is what the validator (pyHanko, PDF 32000-1 §7.9.4) reads back.
    from pyhanko.pdf_utils.generic import parse_pdf_date

    assert pdf_date(when) == text
    assert parse_pdf_date(text) == (when if when.tzinfo else when.replace(tzinfo=UTC))


@pytest.mark.parametrize(
    ("numbers", "runs"),
    [([], []), ([5], [(5, 1)]), ([7, 5, 6], [(5, 3)]), ([1, 3, 4, 9], [(1, 1), (3, 2), (9, 1)])],
)
def test_xref_runs(numbers: list[int], runs: list[tuple[int, int]]) -> None:
    assert xref_runs(numbers) == runs


@pytest.mark.parametrize(
    ("wanted", "taken", "got"),
    [
        ("a.pdf", set(), "a.pdf"),
        ("a.pdf", {"a.pdf"}, "a (2).pdf"),
        ("a.pdf", {"a.pdf", "a (2).pdf"}, "a (3).pdf"),
        ("README", {"README"}, "README (2)"),
    ],
)
def test_unique_name(wanted: str, taken: set[str], got: str) -> None:
    assert unique_name(wanted, taken) == got


def test_reason_names_policy_case_and_signers() -> None:
    meta = SignatureMeta(
        signing_time=dt.datetime.now(UTC),
        reason="contract",
        policy_version="contract-v1",
        case_id="C-1",
        parties=(Party("s-1", "Acme", "seller"), Party("b-2", "Doe", "buyer")),
    )
    assert reason_text(meta) == (
        "contract; policy contract-v1; case C-1; signers: Acme (seller, s-1), Doe (buyer, b-2)"
    )


# --- RFC 3161 -------------------------------------------------------------------


@pytest.fixture(scope="module")
def tsa_ident() -> devpki.Identity:
    return devpki.make_tsa(devpki.make_ca("unit TSA CA"))


def test_request_is_a_timestampreq() -> None:
    imprint = hashlib.sha256(b"sig").digest()
    req = tsp.TimeStampReq.load(tsa.build_request(imprint, 42))
    assert req["message_imprint"]["hashed_message"].native == imprint
    assert req["message_imprint"]["hash_algorithm"]["algorithm"].native == "sha256"
    assert req["nonce"].native == 42
    assert req["cert_req"].native is True


def test_granted_response_yields_the_token(tsa_ident: devpki.Identity) -> None:
    imprint = hashlib.sha256(b"sig").digest()
    resp = make_response(tsa_ident, tsa.build_request(imprint, 7), serial=1)
    token = tsa.check_response(resp, imprint, 7)
    assert tsp.TimeStampResp.load(resp)["time_stamp_token"].dump() == token


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda resp, imprint, nonce: (resp, hashlib.sha256(b"other").digest(), nonce), "imprint"),
        (lambda resp, imprint, nonce: (resp, imprint, nonce + 1), "nonce"),
        (lambda resp, imprint, nonce: (b"\x30\x03abc", imprint, nonce), "not a valid"),
        (
            # TimeStampResp { PKIStatusInfo { rejection } } (RFC 3161 §2.4.2)
            lambda resp, imprint, nonce: (bytes.fromhex("30053003020102"), imprint, nonce),
            "refused",
        ),
    ],
)
def test_bad_responses_are_tsa_unavailable(tsa_ident: devpki.Identity, mutate, message: str) -> None:
    imprint = hashlib.sha256(b"sig").digest()
    resp = make_response(tsa_ident, tsa.build_request(imprint, 9), serial=2)
    der, want_imprint, want_nonce = mutate(resp, imprint, 9)
    with pytest.raises(TsaUnavailable, match=message) as info:
        tsa.check_response(der, want_imprint, want_nonce)
    assert info.value.retryable


@pytest.mark.parametrize(("level", "refused"), [(None, False), (1, True), (2, False), (3, False)])
def test_docmdp_decision(level: int | None, refused: bool) -> None:
    # P=2 and P=3 allow a further signature; the evidence is then bound by digest.
    if refused:
        with pytest.raises(CertifiedPdf) as info:
            check_docmdp(level)
        assert info.value.code == "certified_no_changes"
    else:
        check_docmdp(level)


@pytest.mark.parametrize(
    ("signed", "count", "binding"),
    [(False, 0, ""), (True, 0, ""), (False, 2, "embedded"), (True, 1, "digest")],
)
def test_evidence_is_embedded_unless_the_document_carries_a_signature(
    signed: bool, count: int, binding: str
) -> None:
    assert evidence_binding(signed, count) == binding


def test_evidence_entries_read_back() -> None:
    import io

    from pypdf.generic import read_object

    bound = [Bound("фото (1).jpg", "image/jpeg", 5, hashlib.sha256(b"photo").digest()),
             Bound("note.txt", "text/plain", 0, hashlib.sha256(b"").digest())]
    assert evidence_entries([], "digest") == b""
    case = read_object(io.BytesIO(b"<<" + evidence_entries(bound, "digest") + b">>"), None)
    assert case["/EvidenceBinding"] == "/Digest"
    assert [(e["/Name"], e["/MediaType"], e["/Size"], e["/SHA256"]) for e in case["/Evidence"]] == [
        (b.name, b.media_type, b.size, b.sha256.hex()) for b in bound]


@pytest.mark.parametrize("text", ["", "plain", "a (b) c\\d", "Zoë Ünal", "日本語", "tab\there",
                                  "))((", "emoji 🙂", "back\\slash)"])
def test_pdf_text_reads_back_as_the_same_string(text: str) -> None:
    import io

    from pypdf.generic import read_object

    from casesignd.pdf.syntax import pdf_text

    assert str(read_object(io.BytesIO(pdf_text(text) + b" "), None)) == text
