"""The hand-built CMS: it parses as the structure PAdES B-B/B-T requires."""

from __future__ import annotations

import hashlib

import pytest
from asn1crypto import cms as acms
from asn1crypto import core
from asn1crypto import tsp as _tsp  # noqa: F401 - registers the ESS attribute types
from cryptography.hazmat.primitives import serialization
from hypothesis import given, settings
from hypothesis import strategies as st

from casesignd.ops import devpki
from casesignd.signing import cms


@pytest.fixture(scope="module")
def identities() -> dict[str, devpki.Identity]:
    ca = devpki.make_ca("unit CA")
    return {"rsa": devpki.issue(ca, "unit RSA", "rsa"), "ec": devpki.issue(ca, "unit EC", "ec")}


@pytest.mark.parametrize("n", [0, 1, 127, 128, 255, 256, 2**63, 2**159 + 12345, -1, -128, -129, -256, 127])
def test_integer_matches_asn1crypto(n: int) -> None:
    assert cms.integer(n) == core.Integer(n).dump()


@pytest.mark.parametrize(
    "dotted", [cms.ID_SHA256, cms.ID_SIGNING_CERTIFICATE_V2, "2.999.3", "1.2.840.113549.1.9.52"]
)
def test_oid_matches_asn1crypto(dotted: str) -> None:
    assert cms.oid(dotted) == core.ObjectIdentifier(dotted).dump()


@pytest.mark.parametrize("size", [0, 5, 127, 128, 255, 256, 65535, 70000])
def test_length_encoding_roundtrips(size: int) -> None:
    der = cms.octets(b"x" * size)
    assert core.OctetString.load(der).native == b"x" * size


@pytest.mark.parametrize("kind", ["rsa", "ec"])
def test_signed_attrs_are_pades_baseline(identities: dict[str, devpki.Identity], kind: str) -> None:
    ident = identities[kind]
    tmpl = cms.template_for(ident.cert, tuple(ident.chain))
    digest = hashlib.sha256(b"document").digest()
    der = cms.build_signed_attrs(digest, tmpl)
    attrs = acms.CMSAttributes.load(der)
    assert attrs.dump(force=True) == der  # canonical DER (sorted SET OF)
    by_type = {a["type"].native: a["values"][0] for a in attrs}
    assert by_type["content_type"].native == "data"
    assert by_type["message_digest"].native == digest
    # EN 319 122-1 §5.2.1: no signing-time in PAdES, the time is in /M.
    assert "signing_time" not in by_type
    ess = by_type["signing_certificate_v2"]["certs"][0]
    cert_der = ident.cert.public_bytes(serialization.Encoding.DER)
    assert ess["cert_hash"].native == hashlib.sha256(cert_der).digest()
    assert ess["hash_algorithm"]["algorithm"].native == "sha256"
    serial = ess["issuer_serial"]["serial_number"].native
    assert serial == ident.cert.serial_number
    protection = by_type["cms_algorithm_protection"]
    assert protection["digest_algorithm"]["algorithm"].native == "sha256"


@pytest.mark.parametrize(
    ("kind", "algo"), [("rsa", "sha256_rsa"), ("ec", "sha256_ecdsa")]
)
def test_assembled_signed_data(identities: dict[str, devpki.Identity], kind: str, algo: str) -> None:
    ident = identities[kind]
    tmpl = cms.template_for(ident.cert, tuple(ident.chain))
    attrs = cms.build_signed_attrs(b"\x01" * 32, tmpl)
    der = cms.assemble(tmpl, attrs, b"\x02" * 64)
    ci = acms.ContentInfo.load(der)
    assert ci.dump(force=True) == der
    assert ci["content_type"].native == "signed_data"
    sd = ci["content"]
    assert sd["version"].native == "v1"
    assert sd["encap_content_info"]["content"].native is None  # detached
    assert len(sd["certificates"]) == 2
    si = sd["signer_infos"][0]
    assert si["sid"].name == "issuer_and_serial_number"
    assert si["sid"].chosen["serial_number"].native == ident.cert.serial_number
    assert si["digest_algorithm"]["algorithm"].native == "sha256"
    # The identifier endesive gets wrong for EC keys.
    assert si["signature_algorithm"]["algorithm"].native == algo
    assert b"\x31" + si["signed_attrs"].dump()[1:] == attrs
    assert si["signature"].native == b"\x02" * 64
    assert not si["unsigned_attrs"]


def test_timestamp_token_goes_in_unsigned_attrs(identities: dict[str, devpki.Identity]) -> None:
    ident = identities["rsa"]
    tmpl = cms.template_for(ident.cert, tuple(ident.chain))
    token = acms.ContentInfo({"content_type": "data", "content": b"tok"}).dump()
    der = cms.assemble(tmpl, cms.build_signed_attrs(b"\x00" * 32, tmpl), b"sig", token)
    si = acms.ContentInfo.load(der)["content"]["signer_infos"][0]
    attr = si["unsigned_attrs"][0]
    assert attr["type"].dotted == cms.ID_SIGNATURE_TIME_STAMP_TOKEN
    assert attr["values"][0].dump() == token


def test_template_is_cached(identities: dict[str, devpki.Identity]) -> None:
    ident = identities["ec"]
    assert cms.template_for(ident.cert, tuple(ident.chain)) is cms.template_for(
        ident.cert, tuple(ident.chain)
    )


@pytest.mark.parametrize("bad", [b"", b"\x00" * 31, b"\x00" * 48])
def test_signed_attrs_refuse_other_digests(identities: dict[str, devpki.Identity], bad: bytes) -> None:
    tmpl = cms.template_for(identities["rsa"].cert, ())
    with pytest.raises(ValueError):
        cms.build_signed_attrs(bad, tmpl)


@given(st.integers(min_value=-(2**200), max_value=2**200))
def test_integer_property(n: int) -> None:
    assert cms.integer(n) == core.Integer(n).dump()


@given(st.binary(min_size=32, max_size=32), st.binary(min_size=1, max_size=600))
@settings(max_examples=50)
def test_assemble_roundtrips(digest: bytes, signature: bytes) -> None:
    ca = _PROPERTY_IDENTITY
    tmpl = cms.template_for(ca.cert, ())
    attrs = cms.build_signed_attrs(digest, tmpl)
    ci = acms.ContentInfo.load(cms.assemble(tmpl, attrs, signature))
    si = ci["content"]["signer_infos"][0]
    assert si["signature"].native == signature
    by_type = {a["type"].native: a["values"][0].native for a in si["signed_attrs"]}
    assert by_type["message_digest"] == digest


_PROPERTY_IDENTITY = devpki.make_ca("property CA", kind="ec")
