"""The revocation cache against a real PKI on loopback: one fetch per chain while its
data is good, a refresh in the background once it is due (the cached data still
answers meanwhile, even with the responders down), and a refusal only once the data
is past its nextUpdate and cannot be fetched again."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt

import pytest

from casesignd.core.errors import CertificateExpired, CertificateRevoked, RevocationUnavailable
from casesignd.signing.revocation import Revocation
from tests.helpers_ltv import LtvPki, ltv_pki

__all__ = ["ltv_pki"]  # fixture

PAST = dt.datetime(2000, 1, 1, tzinfo=dt.UTC)


def cache(pki: LtvPki) -> Revocation:
    return Revocation([pki.root_asn1], fetch_timeout_s=2.0, refresh_ahead_s=3600)


def age(rev: Revocation, pki: LtvPki, **fields: dt.datetime) -> None:
    """Pretend the signer's cached data is older than it is."""
    cert = pki["signer"].cert_asn1
    rev._cache[cert.sha256] = dataclasses.replace(rev._cache[cert.sha256], **fields)


async def test_one_fetch_while_good_then_a_background_refresh(ltv_pki: LtvPki) -> None:
    rev, signer = cache(ltv_pki), ltv_pki["signer"]
    first = await rev.evidence(signer.cert_asn1, [ltv_pki.intermediate_asn1])
    assert first.ocsps and first.good_until > dt.datetime.now(dt.UTC) > first.checked_at
    assert len(first.certs) >= 3  # signer, intermediate, root (and the OCSP responders')
    before = ltv_pki.requests.copy()
    for _ in range(5):
        assert await rev.evidence(signer.cert_asn1, [ltv_pki.intermediate_asn1]) is first
    assert ltv_pki.requests == before and rev.fetches == 1
    # Due for a refresh: the cached data answers at once, even with the responders
    # down, and the failed refresh leaves it in place.
    age(rev, ltv_pki, refresh_at=PAST)
    with ltv_pki.down("ocsp", "crl"):
        assert await rev.evidence(signer.cert_asn1, [ltv_pki.intermediate_asn1]) is not None
        await asyncio.gather(*rev._refreshing.values())
    assert rev.cached(signer.cert_asn1) is not None and rev.fetches == 2
    # With the responders back, the refresh replaces it.
    age(rev, ltv_pki, refresh_at=PAST)
    stale = rev.cached(signer.cert_asn1)
    await rev.evidence(signer.cert_asn1, [ltv_pki.intermediate_asn1])
    await asyncio.gather(*rev._refreshing.values())
    fresh = rev.cached(signer.cert_asn1)
    assert fresh is not stale and fresh.refresh_at > dt.datetime.now(dt.UTC)
    await rev.close()


async def test_past_its_next_update_the_data_must_be_fetched(ltv_pki: LtvPki) -> None:
    rev, signer = cache(ltv_pki), ltv_pki["signer"]
    await rev.evidence(signer.cert_asn1, [ltv_pki.intermediate_asn1])
    age(rev, ltv_pki, good_until=PAST, refresh_at=PAST)
    with ltv_pki.down("ocsp", "crl"), pytest.raises(RevocationUnavailable):
        await rev.evidence(signer.cert_asn1, [ltv_pki.intermediate_asn1])
    found = await rev.evidence(signer.cert_asn1, [ltv_pki.intermediate_asn1])
    assert found.good_at(dt.datetime.now(dt.UTC))
    await rev.close()


async def test_the_periodic_refresh_checks_what_is_due(ltv_pki: LtvPki) -> None:
    rev, signer = cache(ltv_pki), ltv_pki["signer"]
    await rev.evidence(signer.cert_asn1, [ltv_pki.intermediate_asn1])
    await rev.refresh_due()
    assert rev.fetches == 1
    age(rev, ltv_pki, refresh_at=PAST)
    await rev.refresh_due()
    assert rev.fetches == 2 and rev.cached(signer.cert_asn1).refresh_at > PAST
    await rev.close()


@pytest.mark.parametrize(("name", "error"), [("revoked", CertificateRevoked),
                                             ("expired", CertificateExpired)])
async def test_a_certificate_that_must_not_sign_is_refused(ltv_pki: LtvPki, name, error) -> None:
    rev = cache(ltv_pki)
    with pytest.raises(error):
        await rev.evidence(ltv_pki[name].cert_asn1, [ltv_pki.intermediate_asn1])
    assert rev.cached(ltv_pki[name].cert_asn1) is None
    await rev.close()


async def test_a_tsa_chain_is_checked_for_time_stamping(ltv_pki: LtvPki) -> None:
    rev = cache(ltv_pki)
    found = await rev.evidence(ltv_pki["tsa"].cert_asn1, [ltv_pki.intermediate_asn1],
                               timestamping=True)
    assert found.timestamping and found.ocsps
    # The signer's certificate has no timeStamping EKU.
    with pytest.raises(CertificateExpired):
        await rev.evidence(ltv_pki["signer"].cert_asn1, [ltv_pki.intermediate_asn1],
                           timestamping=True)
    await rev.close()
