"""The validator on a corpus of signed files the tests build (issue 41): each gets the
verdict it should, through ``verify_file`` and the command line, and no damage done to
them (truncation, bytes flipped in /Contents, the DSS, the cross-reference) makes an
exception escape. Plain pyHanko's verdicts are compared in scripts/bench_verify.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.serialization import Encoding
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from casesignd.cli import commands as cli
from casesignd.core.errors import EncryptedPdf, MalformedPdf
from casesignd.verify.validate import (
    INDETERMINATE,
    PASSED,
    VerifyOptions,
    verify_bytes,
    verify_file,
)
from tests.helpers_pki import Pki, pki
from tests.helpers_sigcorpus import build_corpus, damage, regions

__all__ = ["pki"]  # fixture


@pytest.fixture(scope="module")
def corpus(pki: Pki, tmp_path_factory: pytest.TempPathFactory) -> dict:
    return build_corpus(pki, tmp_path_factory.mktemp("sigcorpus"))


@pytest.fixture(scope="module")
def options(pki: Pki) -> VerifyOptions:
    return VerifyOptions((pki.ca.cert.public_bytes(Encoding.DER),), "never")


def _verdict(sig: dict) -> tuple:
    return (sig["indication"], sig["sub_indication"], sig["intact"], sig["valid"],
            sig["modification"])




def test_each_file_gets_its_verdict(corpus, options) -> None:
    wrong = {}
    for name, (path, expect) in corpus.items():
        got = _verdict(verify_file(path, options).to_json()["signatures"][0])  # type: ignore[index]
        want = (expect.indication, expect.sub_indication, expect.intact, expect.valid,
                expect.modification)
        if got != want:
            wrong[name] = (got, want)
    assert not wrong, wrong


def test_what_a_strict_reader_refuses_is_a_finding(corpus, options) -> None:
    findings = {name: verify_file(corpus[name][0], options).findings
                for name in ("hybrid_reference", "encrypt_null", "damaged_dss", "pyhanko_pades")}
    assert any("hybrid-reference" in f for f in findings["hybrid_reference"])
    assert any("/Encrypt is null" in f for f in findings["encrypt_null"])
    assert any("cannot be decoded" in f for f in findings["damaged_dss"])
    assert findings["pyhanko_pades"] == ()


def test_a_document_timestamp_is_checked_too(corpus, options) -> None:
    report = verify_file(corpus["doc_timestamp"][0], options)
    kinds = [(s.kind, s.indication) for s in report.signatures]
    assert kinds == [("signature", PASSED), ("document_timestamp", PASSED)], kinds
    assert report.passed


def test_sha1_is_reported_weak_not_skipped(corpus, options) -> None:
    for name in ("pkcs7_sha1", "pkcs7_detached_sha1"):
        (sig,) = verify_file(corpus[name][0], options).signatures
        assert sig.indication == INDETERMINATE and sig.intact, (name, sig)
        assert sig.sub_indication == "CRYPTO_CONSTRAINTS_FAILURE", (name, sig)


def test_unchecked_words_name_no_library_internals(corpus, options) -> None:
    for name in ("corrupt_cms", "no_signer_certificate", "byterange_gap"):
        (sig,) = verify_file(corpus[name][0], options).signatures
        text = " ".join(sig.problems)
        assert sig.problems and "Error" not in text and "Object" not in text, (name, text)


def test_the_command_line_answers_every_file(corpus, pki, capsys) -> None:
    for name, (path, expect) in corpus.items():
        rc = cli.main(["verify", str(path), "--json", "--fetch", "never",
                       "--trust", str(pki.ca_pem)])
        report = json.loads(capsys.readouterr().out)
        assert rc == (0 if expect.indication == PASSED else 1), name
        assert _verdict(report["signatures"][0])[0] == expect.indication, name


def _check(data: bytes, options: VerifyOptions) -> None:
    try:
        report = verify_bytes(data, options)
    except (MalformedPdf, EncryptedPdf) as e:
        assert e.reason and "Error" not in e.message, e.message
        return
    json.dumps(report.to_json())
    if report.signatures:
        from casesignd.verify.etsi import etsi_report
        from tests.helpers_etsi import assert_valid

        assert_valid(etsi_report(report))
    for sig in report.signatures:
        if sig.passed:
            assert sig.intact and sig.valid and sig.modification is not None, sig


FUZZ_BASES = ("pyhanko_pades", "dss_update", "doc_timestamp", "hybrid_reference",
              "pkcs7_sha1", "fieldmdp_fill_unlocked")


@settings(max_examples=60, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(base=st.sampled_from(FUZZ_BASES), region=st.sampled_from(("contents", "xref", "dss", "whole")),
       where=st.floats(0, 1), xor=st.integers(1, 255), cut=st.booleans())
def test_damage_never_escapes(corpus, options, base, region, where, xor, cut) -> None:
    data = Path(corpus[base][0]).read_bytes()
    start, end = regions(data).get(region, (0, len(data)))
    at = start + int((end - start - 1) * where)
    _check(data[:at] if cut else damage(data, at, xor), options)


@pytest.mark.slow
@settings(max_examples=400, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(base=st.sampled_from(FUZZ_BASES), flips=st.lists(st.tuples(st.floats(0, 1), st.integers(1, 255)),
                                                         min_size=1, max_size=8))
def test_many_flips_never_escape(corpus, options, base, flips) -> None:
    data = Path(corpus[base][0]).read_bytes()
    for where, xor in flips:
        data = damage(data, int(len(data) * where), xor)
    _check(data, options)


# --- the ETSI TS 119 102-2 report -----------------------------------------------------


def test_the_etsi_report_is_valid_for_every_file(corpus, options) -> None:
    from casesignd.verify.etsi import CS, VR, etsi_report
    from tests.helpers_etsi import assert_valid

    for name, (path, expect) in corpus.items():
        report = verify_file(path, options)
        root = assert_valid(etsi_report(report))
        first = root.find(f"{{{VR}}}SignatureValidationReport")
        main = first.findtext(f"{{{VR}}}SignatureValidationStatus/{{{VR}}}MainIndication")
        assert main.endswith(expect.indication.lower()), (name, main)
        sub = first.findtext(f"{{{VR}}}SignatureValidationStatus/{{{VR}}}SubIndication")
        assert sub == (f"urn:etsi:019102:subindication:{expect.sub_indication}"
                       if expect.sub_indication else None), (name, sub)
        assert first.find(f"{{{CS}}}Verdict/{{{CS}}}modification").text == expect.modification, name
        assert len(root.findall(f"{{{VR}}}SignatureValidationReport")) == len(report.signatures)


def test_the_etsi_report_from_the_command_line(corpus, pki, capsys) -> None:
    from tests.helpers_etsi import assert_valid

    rc = cli.main(["verify", str(corpus["doc_timestamp"][0]), "--report", "etsi",
                   "--fetch", "never", "--trust", str(pki.ca_pem)])
    out = capsys.readouterr().out
    assert rc == 0
    assert_valid(out.encode())
