"""Chain building in verify.py: anchors, intermediates, validity, CA flags."""

from __future__ import annotations

import datetime as dt

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.x509.oid import NameOID

from casesignd import devpki
from casesignd.verify import chain_trusted

NOW = dt.datetime.now(dt.UTC)


def _sub_ca(parent: devpki.Identity, cn: str) -> devpki.Identity:
    key = devpki.new_key("ec")
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)]))
        .issuer_name(parent.cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(NOW - dt.timedelta(days=1))
        .not_valid_after(NOW + dt.timedelta(days=30))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(parent.key, hashes.SHA256())
    )
    return devpki.Identity(key, cert, [parent.cert])


@pytest.fixture(scope="module")
def pki() -> dict[str, devpki.Identity]:
    root = devpki.make_ca("chain root", kind="ec")
    inter = _sub_ca(root, "chain intermediate")
    leaf = devpki.issue(inter, "chain leaf", kind="ec")
    # A certificate "issued" by an end-entity key: a leaf must not act as a CA.
    rogue = devpki.issue(devpki.Identity(leaf.key, leaf.cert, []), "rogue", kind="ec")
    return {"root": root, "inter": inter, "leaf": leaf, "rogue": rogue}


def test_through_an_intermediate(pki: dict[str, devpki.Identity]) -> None:
    problems: list[str] = []
    assert chain_trusted(pki["leaf"].cert, [pki["inter"].cert], [pki["root"].cert], dt.datetime.now(dt.UTC), problems)
    assert not problems


def test_missing_intermediate(pki: dict[str, devpki.Identity]) -> None:
    problems: list[str] = []
    assert not chain_trusted(pki["leaf"].cert, [], [pki["root"].cert], dt.datetime.now(dt.UTC), problems)
    assert problems and problems[0].startswith("no trusted issuer")


def test_end_entity_cannot_issue(pki: dict[str, devpki.Identity]) -> None:
    problems: list[str] = []
    pool = [pki["leaf"].cert, pki["inter"].cert]
    assert not chain_trusted(pki["rogue"].cert, pool, [pki["root"].cert], dt.datetime.now(dt.UTC), problems)


@pytest.mark.parametrize("days", [-30, 3650])
def test_outside_validity(pki: dict[str, devpki.Identity], days: int) -> None:
    problems: list[str] = []
    at = NOW + dt.timedelta(days=days)
    assert not chain_trusted(pki["leaf"].cert, [pki["inter"].cert], [pki["root"].cert], at, problems)
    assert "not valid at" in problems[0]


def test_anchor_itself(pki: dict[str, devpki.Identity]) -> None:
    assert chain_trusted(pki["inter"].cert, [], [pki["inter"].cert], NOW, [])
