"""The loopback PKI of tests/helpers_ltv.py, checked with pyHanko and
pyhanko-certvalidator as the daemon's long-term signatures will be: a B-LTA
signature made against it validates offline, its revoked and expired signers are
found out, and its services can be taken down and counted."""

from __future__ import annotations

import contextlib
from io import BytesIO

import aiohttp
import pytest
from pyhanko.pdf_utils.incremental_writer import IncrementalPdfFileWriter
from pyhanko.pdf_utils.reader import PdfFileReader
from pyhanko.sign import PdfSignatureMetadata, PdfSigner, SimpleSigner
from pyhanko.sign.ades.report import AdESPassed, AdESStatus
from pyhanko.sign.fields import SigSeedSubFilter
from pyhanko.sign.timestamps import HTTPTimeStamper
from pyhanko.sign.validation.ades import ades_lta_validation
from pyhanko.sign.validation.policy_decl import (
    PdfSignatureValidationSpec,
    RevinfoOnlineFetchingRule,
    RevocationInfoGatheringSpec,
    SignatureValidationSpec,
)
from pyhanko_certvalidator import CertificateValidator, ValidationContext
from pyhanko_certvalidator.context import CertValidationPolicySpec
from pyhanko_certvalidator.errors import ExpiredError, InsufficientRevinfoError, RevokedError
from pyhanko_certvalidator.fetchers.aiohttp_fetchers import AIOHttpFetcherBackend
from pyhanko_certvalidator.path import ValidationPath
from pyhanko_certvalidator.policy_decl import REQUIRE_REVINFO, CertRevTrustPolicy
from pyhanko_certvalidator.registry import SimpleTrustManager

from casesignd import config
from casesignd.job_kinds.signing import key_settings
from casesignd.signing.keys import load_signer
from tests.daemon import to_toml
from tests.helpers_ltv import LtvPki, ltv_pki
from tests.helpers_pki import reportlab_pdf

__all__ = ["ltv_pki"]  # fixture

SIGNING = {"digital_signature", "non_repudiation"}


async def validate(pki: LtvPki, name: str, vc: ValidationContext | None = None) -> ValidationPath:
    """Validate ``name``'s certificate for signing, fetching as needed, revocation
    data required. No intermediate is given: the chain is completed through the
    caIssuers URL."""
    if vc is None:
        async with contextlib.aclosing(pki.validation_context()) as own:
            return await validate(pki, name, own)
    v = CertificateValidator(pki[name].cert_asn1, validation_context=vc)
    return await v.async_validate_usage(SIGNING)


async def sign_b_lta(pki: LtvPki, pdf: bytes) -> bytes:
    s = pki["signer"]
    signer = SimpleSigner.load_pkcs12(str(s.pkcs12), passphrase=s.password)
    assert signer is not None
    async with (contextlib.aclosing(pki.validation_context()) as vc,
                aiohttp.ClientSession() as session):
        meta = PdfSignatureMetadata(
            field_name="Signature1", subfilter=SigSeedSubFilter.PADES,
            embed_validation_info=True, use_pades_lta=True, validation_context=vc,
        )
        pdf_signer = PdfSigner(meta, signer, timestamper=HTTPTimeStamper(pki.tsa_url, session=session))
        out = await pdf_signer.async_sign_pdf(IncrementalPdfFileWriter(BytesIO(pdf)), output=BytesIO())
    return out.getvalue()


async def test_b_lta_signature_validates_offline(ltv_pki: LtvPki, tmp_path) -> None:
    pdf = reportlab_pdf(tmp_path / "doc.pdf").read_bytes()
    before = ltv_pki.requests.copy()
    signed = await sign_b_lta(ltv_pki, pdf)
    # pyHanko asks the TSA once to size the signature's placeholder, then for the
    # signature time stamp and the document time stamp; one OCSP response each for
    # the signer, the TSA and the intermediate (the chains come with the signer's
    # PKCS#12 and the TSA's token, so no caIssuers fetch, and no CRL).
    assert ltv_pki.requests - before == {"tsa": 3, "ocsp": 3}
    dss = PdfFileReader(BytesIO(signed)).root["/DSS"]
    assert len(dss["/OCSPs"]) == 3 and "/CRLs" not in dss

    spec = PdfSignatureValidationSpec(SignatureValidationSpec(
        cert_validation_policy=CertValidationPolicySpec(
            trust_manager=SimpleTrustManager.build(trust_roots=[ltv_pki.root_asn1]),
            revinfo_policy=CertRevTrustPolicy(REQUIRE_REVINFO),
        ),
        revinfo_gathering_policy=RevocationInfoGatheringSpec(
            online_fetching_rule=RevinfoOnlineFetchingRule.LOCAL_ONLY),
    ))
    before = ltv_pki.requests.copy()
    with ltv_pki.down("ocsp", "crl", "certs", "tsa"):
        sig = PdfFileReader(BytesIO(signed)).embedded_signatures[0]
        result = await ades_lta_validation(sig, spec)
    assert result.ades_subindic == AdESPassed.OK, result.failure_msg
    assert result.ades_subindic.status is AdESStatus.PASSED
    assert ltv_pki.requests == before  # everything came from the document's /DSS


@pytest.mark.parametrize("without", [None, "ocsp", "crl"])
async def test_good_signer_validates_from_either_source(ltv_pki: LtvPki, without: str | None) -> None:
    with ltv_pki.down(without) if without else contextlib.nullcontext():
        path = await validate(ltv_pki, "signer")
    assert path.leaf.subject == ltv_pki["signer"].cert_asn1.subject
    assert len(path) == 3


@pytest.mark.parametrize("without", ["ocsp", "crl"])
async def test_revoked_signer_is_revoked(ltv_pki: LtvPki, without: str) -> None:
    with ltv_pki.down(without), pytest.raises(RevokedError):
        await validate(ltv_pki, "revoked")


async def test_expired_signer_is_expired(ltv_pki: LtvPki) -> None:
    with pytest.raises(ExpiredError):
        await validate(ltv_pki, "expired")


@pytest.mark.parametrize("how", ["503", "drop"])
async def test_no_revocation_data_when_both_sources_are_down(ltv_pki: LtvPki, how: str) -> None:
    before = ltv_pki.requests.copy()
    with ltv_pki.down("ocsp", "crl", how=how), pytest.raises(InsufficientRevinfoError):
        await validate(ltv_pki, "signer")
    tried = ltv_pki.requests - before
    assert tried["ocsp"] >= 1 and tried["crl"] >= 1
    # Back up, the same signer validates again.
    await validate(ltv_pki, "signer")


async def test_a_hanging_responder_ends_the_validation(ltv_pki: LtvPki) -> None:
    # pyhanko-certvalidator 0.33's aiohttp fetchers turn aiohttp.ClientError into a
    # fetch error and move on, but aiohttp's total timeout is a bare TimeoutError:
    # it ends the whole validation, with the CRL still there to fall back on (and in
    # soft-fail mode too). A caller has to take it for "no revocation data".
    backend = AIOHttpFetcherBackend(per_request_timeout=0.3)
    vc = ltv_pki.validation_context(fetcher_backend=backend)
    try:
        with ltv_pki.down("ocsp", how="hang"), pytest.raises(TimeoutError):
            await validate(ltv_pki, "signer", vc)
    finally:
        await backend.close()


async def test_one_context_fetches_once(ltv_pki: LtvPki) -> None:
    async with contextlib.aclosing(ltv_pki.validation_context()) as vc:
        before = ltv_pki.requests.copy()
        await validate(ltv_pki, "signer", vc)
        first = ltv_pki.requests - before
        # The signer's status from interm's responder, the intermediate's from
        # root's, the intermediate itself from the signer's caIssuers URL.
        assert first == {"ocsp": 2, "certs": 1}, first

        before = ltv_pki.requests.copy()
        await validate(ltv_pki, "signer", vc)
        assert ltv_pki.requests == before  # kept by the context

    before = ltv_pki.requests.copy()
    await validate(ltv_pki, "signer")
    assert ltv_pki.requests - before == first  # a new context asks again


def test_casesignd_config_loads(ltv_pki: LtvPki, tmp_path) -> None:
    cfg = config.loads(to_toml(ltv_pki.casesignd_config()), base_dir=str(tmp_path))
    assert cfg.policy(None).signature_level == "B-LTA"
    assert cfg.policy(None).tsa_url == ltv_pki.tsa_url
    assert cfg.validation.trust_roots == [str(ltv_pki.root_pem)]
    signer = load_signer(key_settings(cfg))
    assert signer.cert == ltv_pki["signer"].cert
    assert signer.chain == [ltv_pki.intermediate]
