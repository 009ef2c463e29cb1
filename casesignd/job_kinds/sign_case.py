"""The ``sign_case`` job kind: a contract and its evidence, validated, then signed once.

Admission is cheap and pure (shapes, sizes, references, policy). The run fetches
every item into the attempt's private directory with its digest checked, validates
deeply (PDF structure and active content, sniffed media types, malware scan), and
only then uses the signing key: one PAdES signature over the contract with every
evidence item embedded (or, in a contract that already carries signatures, bound by
its digest in the signature dictionary, so that the earlier signatures stay valid:
:mod:`casesignd.signing.attachments`). Each signature key (case, document digests, signer
identities, policy version) is signed at most once; a retry finds the recorded
signature and returns it.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime as dt
import re
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from casesignd.config import Config
from casesignd.core import audit, media
from casesignd.core.appearance import CERTIFY_P
from casesignd.core.errors import ActiveContent, TransientJobError, ValidationError
from casesignd.core.fields import integer, object_field, plain_text, refuse_unknown
from casesignd.core.hashing import OBJECT_REF_PREFIX, sha256_hex
from casesignd.core.outcomes import Artifact, Finish, Signature
from casesignd.core.policy import Policy
from casesignd.core.sealed import SealedPath, guarded
from casesignd.engine.jobs import check_case_id
from casesignd.engine.kinds import Admission, JobContext, JobServices, admit_policy
from casesignd.files.sources import parse_ref
from casesignd.job_kinds.signing import JobSteps, Logos, pdf_limits, signing_policy, stamp_logo
from casesignd.pdf import inspect as pdfcheck
from casesignd.pdf import rules as pdfrules
from casesignd.signing import pades, pipeline, placement
from casesignd.signing.ladder import Ladder, Stored, policy_in_force

if TYPE_CHECKING:
    from casesignd.files.temp import Area

_HEX64 = re.compile(r"[0-9a-f]{64}")
_SIGNER_ID = re.compile(r"[A-Za-z0-9._:@-]{1,128}")
_BODY_FIELDS = {"kind", "case_id", "policy_version", "items", "signers", "signature"}
_ITEM_FIELDS = {"role", "name", "media_type", "object_ref", "sha256", "size"}
_SIGNER_FIELDS = {"id", "name", "role"}
ROLES = ("contract", "evidence")


def admit_body(body: dict[str, Any], config: Config) -> Admission:
    """Validate and normalize a sign_case request; raise ValidationError naming the field."""
    refuse_unknown(body, _BODY_FIELDS)
    case_id = check_case_id(body.get("case_id"))
    policy = admit_policy(body, config)
    items_in = body.get("items")
    if not isinstance(items_in, list) or not items_in:
        raise ValidationError("items must be a non-empty list", code="invalid_field", field="items")
    if len(items_in) > policy.max_items:
        raise ValidationError(f"at most {policy.max_items} items", code="too_many_items",
                              field="items")
    sources = [s.name for s in config.sources]
    items = [_item(raw, i, policy, sources) for i, raw in enumerate(items_in)]
    contracts = [i for i, it in enumerate(items) if it["role"] == "contract"]
    if len(contracts) != 1:
        raise ValidationError("exactly one item must have the role 'contract'",
                              code="contract_count", field="items")
    # The parties are recorded with the service's signature; a packet may name none
    # (the kiosk's command line signs with the service key alone).
    signers_in = body.get("signers")
    if not isinstance(signers_in, list) or len(signers_in) > 20:
        raise ValidationError("signers must be a list of at most 20 signers", code="invalid_field",
                              field="signers")
    signers = [_signer(raw, i) for i, raw in enumerate(signers_in)]
    if len({s["id"] for s in signers}) != len(signers):
        raise ValidationError("signer ids must be unique", code="duplicate_signer", field="signers")
    total = sum(it["size"] for it in items)
    if total > policy.max_document_bytes:
        raise ValidationError(f"the items add up to more than {policy.max_document_bytes} bytes",
                              code="too_large", field="items")
    normalized: dict[str, Any] = {"case_id": case_id, "policy_version": policy.version,
                                  "items": items, "signers": signers}
    if "signature" in body and (signature := placement.admit(body["signature"], policy.appearance)):
        normalized["signature"] = signature  # empty: the policy's placement, as when left out
    material = signature_material(normalized)
    return Admission(normalized=normalized, version=policy.version, case_id=case_id,
                     declared_bytes=total, key_material=material,
                     sig_key=sha256_hex(audit.canonical(material)))


def _item(raw: Any, i: int, policy: Policy, sources: list[str]) -> dict[str, Any]:
    at = f"items[{i}]."
    item = object_field(raw, f"items[{i}]")
    refuse_unknown(item, _ITEM_FIELDS, f"items[{i}]")
    role = item.get("role")
    if role not in ROLES:
        raise ValidationError("role must be 'contract' or 'evidence'", code="invalid_field",
                              field=at + "role")
    name = plain_text(item.get("name"), at + "name", 255)
    if "/" in name or "\\" in name or name in (".", ".."):
        raise ValidationError("name must be a file name, not a path", code="invalid_field",
                              field=at + "name")
    if role == "evidence" and pdfrules.risky_file_name(name):
        # Embedded under this name, a viewer would hand it to the system to run.
        raise ActiveContent(f"an evidence file named {name[:100]!r} would run when opened",
                            field=at + "name")
    media_type = item.get("media_type")
    if not isinstance(media_type, str):
        raise ValidationError("media_type must be a string", code="invalid_field",
                              field=at + "media_type")
    media_type = media.normalize_media_type(media_type)
    if role == "contract" and media_type != "application/pdf":
        raise ValidationError("the contract must be application/pdf",
                              code="media_type_not_allowed", field=at + "media_type")
    if role == "evidence" and media_type not in policy.evidence_media_types:
        raise ValidationError(f"the policy does not allow {media_type} evidence",
                              code="media_type_not_allowed", field=at + "media_type")
    sha = item.get("sha256")
    if not isinstance(sha, str) or not _HEX64.fullmatch(sha.lower()):
        raise ValidationError("sha256 must be 64 hex digits", code="invalid_sha256",
                              field=at + "sha256")
    sha = sha.lower()
    size = integer(item.get("size"), at + "size", 0, policy.max_document_bytes, label="size")
    ref_text = item.get("object_ref")
    if not isinstance(ref_text, str):
        raise ValidationError("object_ref must be a string", code="invalid_object_ref",
                              field=at + "object_ref")
    ref = parse_ref(ref_text, sources, field=at + "object_ref")
    if ref.sha256 is not None and ref.sha256 != sha:
        raise ValidationError("object_ref names another digest than sha256",
                              code="digest_mismatch", field=at + "object_ref")
    return {"role": role, "name": name, "media_type": media_type, "object_ref": str(ref),
            "sha256": sha, "size": size}


def _signer(raw: Any, i: int) -> dict[str, str]:
    at = f"signers[{i}]."
    signer = object_field(raw, f"signers[{i}]")
    refuse_unknown(signer, _SIGNER_FIELDS, f"signers[{i}]")
    sid = signer.get("id")
    if not isinstance(sid, str) or not _SIGNER_ID.fullmatch(sid):
        raise ValidationError("id must be 1-128 characters of A-Z a-z 0-9 . _ : @ -",
                              code="invalid_field", field=at + "id")
    return {"id": sid, "name": plain_text(signer.get("name"), at + "name", 200),
            "role": plain_text(signer.get("role"), at + "role", 64)}


def signature_material(normalized: dict[str, Any]) -> dict[str, Any]:
    """What one signature is of: the case, the document digests, the signers, the policy,
    and where it goes when the request says (another field is another signature).
    Order of items and signers does not matter; names of files do not either."""
    material: dict[str, Any] = {
        "case_id": normalized["case_id"],
        "documents": sorted([it["role"], it["sha256"]] for it in normalized["items"]),
        "signers": sorted([s["id"], s["name"], s["role"]] for s in normalized["signers"]),
        "policy_version": normalized["policy_version"],
    }
    if "signature" in normalized:  # absent, the key stays what it was before placement
        material["signature"] = normalized["signature"]
    return material


def signature_key(normalized: dict[str, Any]) -> str:
    return sha256_hex(audit.canonical(signature_material(normalized)))


# --- the run -------------------------------------------------------------------------


def signing_meta(normalized: dict[str, Any], policy: Policy, signer_name: str,
                 subject: str = "", logo: bytes = b"") -> pades.SignatureMeta:
    """What the signature says, and where it goes (:mod:`casesignd.signing.placement`);
    ``subject`` the signing certificate's, which a visible stamp names, and ``logo`` the
    tenant's logo it shows (:func:`casesignd.job_kinds.signing.stamp_logo`)."""
    signing_time = dt.datetime.now(dt.UTC).replace(microsecond=0)
    parties = tuple(pades.Party(s["id"], s["name"], s["role"]) for s in normalized["signers"])
    into_field, place, visible = placement.placement(normalized.get("signature"), policy)
    stamp = placement.words(subject=subject, signer_name=signer_name, parties=parties,
                            signing_time=signing_time, policy_version=normalized["policy_version"],
                            reason=policy.reason, location=policy.location) if visible else ()
    return pades.SignatureMeta(
        signing_time=signing_time,
        name=signer_name,
        reason=policy.reason,
        location=policy.location,
        policy_version=normalized["policy_version"],
        case_id=normalized["case_id"],
        parties=parties,
        into_field=into_field,
        stamp=stamp,
        logo=logo if stamp else b"",
        place=place,
        certify=CERTIFY_P.get(policy.certify),
    )


# One job per signature key at a time, from its look at the recorded signature to
# the commit of its own. Jobs of one signature key under different idempotency keys
# (blind retries, a kiosk request beside a batch job) would otherwise each find none
# and each sign. In this process: a lock per key being worked on. Across the daemons
# of one store: the store's own lock (PostgreSQL's ``key_locks``); a store of one
# daemon (SQLite, its file locked) has none and needs none.
_SIGNING: dict[tuple[str, str], tuple[asyncio.Lock, int]] = {}


@contextlib.asynccontextmanager
async def signing_lock(services: JobServices, tenant: str, sig_key: str,
                       known: dict[str, Any] | None) -> AsyncIterator[dict[str, Any] | None]:
    """Lock ``sig_key`` of ``tenant``; yields the signature recorded for it as it stands
    once locked: ``known`` (read with the claim), unless another job came first and
    may have recorded one since. Keep it locked until the outcome is committed."""
    key = (tenant, sig_key)
    lock, users = _SIGNING.get(key, (None, 0))
    waited = users > 0
    lock = lock or asyncio.Lock()
    _SIGNING[key] = (lock, users + 1)
    try:
        async with lock:
            shared = services.store.key_locks
            if shared is not None:
                async with shared.signature(tenant, sig_key) as recorded:
                    yield recorded
            elif waited:
                yield await services.store.get_signature(tenant, sig_key)
            else:
                yield known
    finally:
        lock, users = _SIGNING[key]
        if users <= 1:
            del _SIGNING[key]
        else:
            _SIGNING[key] = (lock, users - 1)


def signed_detail(normalized: dict[str, Any], checked: pipeline.Checked,
                  level: str, meta: pades.SignatureMeta | None = None) -> dict[str, Any]:
    """The ``signed`` audit event's detail: who, under which policy and at which PAdES
    level, what was checked, and where the signature went (:func:`placement_detail`)."""
    return {"signers": [[x["id"], x["role"]] for x in normalized["signers"]],
            "policy_version": normalized["policy_version"], "level": level,
            "timestamped": level != "B-B", **checked.audit_detail(),
            **({"placement": placement_detail(meta)} if meta is not None else {})}


def placement_detail(meta: pades.SignatureMeta) -> dict[str, Any]:
    """Where a signature went, as its ``signed`` event records it (and the console
    shows it): the document's own field by name, or a new field's page (1 the first,
    -1 the last) and box in points; and whether it is seen."""
    if meta.into_field:
        where: dict[str, Any] = {"field": meta.into_field}
    elif meta.place is not None:
        where = {"page": meta.place[0], "box": list(meta.place[1])}
    else:
        where = {"page": 1}  # an invisible field on the first page
    return {**where, "visible": bool(meta.stamp)}


# Hashing this much on the event loop takes about as long as handing it to a thread
# (0.2 ms at 1.4 GB/s); a larger document is hashed in one, off the loop.
_HASH_ON_LOOP_MAX_BYTES = 256 * 1024


async def document_sha256(data: bytes) -> str:
    if len(data) <= _HASH_ON_LOOP_MAX_BYTES:
        return sha256_hex(data)
    return await asyncio.to_thread(sha256_hex, data)


async def keep_signed(services: JobServices, config: Config, tenant: str, sig_key: str,
                      base: bytes, update: bytes, digest: str | None,
                      timestamp_expires_at: float | None = None
                      ) -> tuple[Artifact, bytes | None, bool]:
    """A signed document held in memory (``base`` then ``update``) as its signature
    key's artifact: kept in the store (its bytes returned, to commit with the record)
    up to ``kiosk.inline_artifact_max_bytes``, else published as a file. Also says
    whether these bytes are the artifact's (False: an earlier file under the same id,
    left by a crash before its record, is kept)."""
    assert services.artifacts is not None
    artifact_id = services.artifacts.artifact_id(tenant, f"sig:{sig_key}")
    size = len(base) + len(update)
    if size <= config.kiosk.inline_artifact_max_bytes:
        # A file left under this id by a crash before its record is never read: the
        # store is read first.
        signed = base + update
        return (Artifact(artifact_id, digest or await document_sha256(signed), size,
                         timestamp_expires_at=timestamp_expires_at), signed, True)
    key = await services.artifacts.key_for(artifact_id)
    artifact, ours = await asyncio.to_thread(services.artifacts.publish_bytes, (base, update),
                                             artifact_id, "application/pdf", key)
    return dataclasses.replace(artifact, timestamp_expires_at=timestamp_expires_at), None, ours


def in_memory(normalized: dict[str, Any], inline_max_bytes: int) -> bool:
    """Whether a job is signed in memory, without a temp area: one contract and no
    evidence, a stored object (read in place by the worker process), and a result
    small enough to be kept in the store."""
    items = normalized["items"]
    return (len(items) == 1 and items[0]["object_ref"].startswith(OBJECT_REF_PREFIX)
            and 0 < items[0]["size"] <= inline_max_bytes // 2)


class SignCaseKind:
    """``sign_case``: fetch, check and scan the items, then sign the contract with the
    evidence on the signing ladder (:mod:`casesignd.signing.ladder`). Built without a
    ladder, a kind admits requests but cannot run them (the kiosk's admission)."""

    name = "sign_case"

    def __init__(self, ladder: Ladder | None = None,
                 branding: Callable[[], Logos] | None = None) -> None:
        self._ladder = ladder
        # The daemon's invoice branding as it stands (a reload replaces it): the logos.
        self._branding = branding

    def admit(self, body: dict[str, Any], config: Config, tenant: str) -> Admission:
        return admit_body(body, config)

    def needs_area(self, input: dict[str, Any], config: Config) -> bool:
        return not in_memory(input, config.kiosk.inline_artifact_max_bytes)

    async def run(self, ctx: JobContext) -> Finish:
        sig_key = ctx.job.sig_key or signature_key(ctx.input)
        # Read with the claim; a job admitted before the store kept signature keys
        # looks it up.
        known = ctx.recorded_signature if ctx.job.sig_key is not None \
            else await ctx.services.store.get_signature(ctx.tenant, sig_key)
        # Locked until the outcome (with the signature) is committed, not only while
        # this runs: the next job of the key must find the signature recorded.
        recorded = await ctx.keep_until_recorded(signing_lock(ctx.services, ctx.tenant, sig_key, known))
        try:
            return await self._run(ctx, sig_key, recorded)
        except TransientJobError as e:
            if e.code == "io_error":
                ctx.services.fetcher.forget_keys(
                    [it["sha256"] for it in ctx.input["items"]
                     if it["object_ref"].startswith(OBJECT_REF_PREFIX)])
            raise

    async def _run(self, ctx: JobContext, sig_key: str, recorded: dict[str, Any] | None) -> Finish:
        s = ctx.services
        normalized = ctx.input
        if recorded is not None and await s.artifact_source(recorded["artifact_id"]) is not None:
            # Signed before (a crash after signing, or a replay): never sign twice.
            return Finish(artifact=Artifact(recorded["artifact_id"], recorded["sha256"],
                                            recorded["size"]), detail={"reused": True})
        if self._ladder is None:
            raise RuntimeError("sign_case runs with the daemon's signing ladder")
        ladder = self._ladder
        policy = policy_in_force(ctx.config.policy(normalized["policy_version"]))
        logo = await stamp_logo(self._branding() if self._branding else None, ctx.tenant, policy)
        meta = signing_meta(normalized, policy, ctx.config.signing.signer_name,
                            ladder.signer_subject(), logo)
        if ctx.area is None:
            return await self._sign_in_memory(ctx, ladder, normalized, policy, meta, sig_key)
        paths = await self._fetch(ctx, normalized, ctx.area)
        # What the attempt writes and reads in its area is sealed under the area's key.
        texts = await self._validate(ctx, normalized, policy, paths)
        await self._scan(ctx, normalized, paths)
        contract_i = next(i for i, it in enumerate(normalized["items"]) if it["role"] == "contract")
        # A sealed item (a stored object sealed at rest under its own data key, or a
        # download this attempt sealed after checking its digest) reads back as the
        # bytes of its digest or fails (io_error): the embedding need not hash it
        # again. A plain stored file is read in place and hashed as it is embedded,
        # and refused if it no longer has its digest.
        attachments = [
            pades.Attachment(paths[i], it["name"], it["media_type"],
                             description=f"sha256:{it['sha256']}",
                             sha256=bytes.fromhex(it["sha256"]),
                             verified=isinstance(paths[i], SealedPath), text=texts.get(i))
            for i, it in enumerate(normalized["items"]) if i != contract_i]
        out = ctx.area.sealed("signed.pdf")
        # Signed in the CPU process (B-B), the document goes straight into its
        # artifact's file in flight, and is published by a link rather than a copy;
        # a timestamped one is finished here, after the TSA, and published by a copy.
        target = None if policy.tsa_url else await s.in_flight(ctx, sig_key)
        try:
            # A stored contract is read as it is stored: the digest its signature's
            # hash gives on the way is checked before the key is used.
            signed = await ladder.sign_file(
                JobSteps(ctx), paths[contract_i], out, meta=meta, attachments=attachments,
                policy=signing_policy(policy), publish_to=target,
                expect_sha256=normalized["items"][contract_i]["sha256"])
            if signed.published is not None and target is not None:
                published = await s.publish_written(ctx, target, signed.published)
            else:
                published = await s.publish(ctx, out, "application/pdf", sig_key=sig_key,
                                             tail=signed.appended.tail)
        finally:
            if target is not None:  # not published: nothing of it stays
                target.path.unlink(missing_ok=True)
        artifact = dataclasses.replace(
            published, timestamp_expires_at=signed.appended.timestamp_expires_at)
        # The signature, its signed event and the finish are one transaction.
        return Finish(artifact=artifact, detail={"documents": len(normalized["items"])},
                      signature=Signature(sig_key, artifact,
                                          signed_detail(normalized, signed.checked,
                                                        signed.appended.level, meta)))

    async def _sign_in_memory(self, ctx: JobContext, ladder: Ladder, normalized: dict[str, Any],
                              policy: Policy, meta: pades.SignatureMeta, sig_key: str) -> Finish:
        """One contract, no evidence: the worker process reads the stored object, checks
        it, prepares and signs it in one call; the signed document is kept in the
        store, committed with its signature record, its signed event and the finish."""
        s = ctx.services
        item = normalized["items"][0]
        path = s.fetcher.stored_path(parse_ref(item["object_ref"], []), ctx.tenant, ctx.case_id,
                                     item["sha256"], item["size"])
        # Sealed at rest (storage encryption), the worker process opens it in place
        # with its data key, which crosses the process's pipe; nothing here reads it.
        key = await s.fetcher.stored_key(item["sha256"])
        document = Stored(str(path), item["sha256"], item["size"], key)
        if s.scanner is not None:
            async with ctx.phase("scan"):
                await s.scanner.scan(await s.fetcher.scannable(path, item["sha256"]),
                                     item["name"])
        signed = await ladder.sign_bytes(JobSteps(ctx), document,
                                         meta=meta, policy=signing_policy(policy))
        async with ctx.phase("publish"):
            artifact, inline, _ours = await keep_signed(
                s, ctx.config, ctx.tenant, sig_key, signed.base, signed.appended.tail,
                signed.sha256, signed.appended.timestamp_expires_at)
        return Finish(artifact=artifact, detail={"documents": 1},
                      signature=Signature(sig_key, artifact,
                                          signed_detail(normalized, signed.checked,
                                                        signed.appended.level, meta), inline))

    async def _fetch(self, ctx: JobContext, normalized: dict[str, Any], area: Area
                     ) -> list[Path | SealedPath]:
        s = ctx.services
        out = []
        async with ctx.phase("fetch"):
            for i, it in enumerate(normalized["items"]):
                ref = parse_ref(it["object_ref"], [x.name for x in ctx.config.sources],
                                field=f"items[{i}].object_ref")
                out.append(await s.fetcher.fetch(ref, ctx.tenant, ctx.case_id, area,
                                                 f"item-{i}", it["sha256"], it["size"]))
        return out

    async def _validate(self, ctx: JobContext, normalized: dict[str, Any], policy: Policy,
                        paths: list[Path | SealedPath]) -> dict[int, media.PendingText]:
        """Check the evidence; what only a whole file can tell (whether it is plain
        text), by item: the signing worker reads every evidence file whole as it
        embeds or hashes it, and finishes those checks on the way, before the key
        is used, rather than this reading it whole once more."""
        limits = pdf_limits(policy)
        texts: dict[int, media.PendingText] = {}
        async with ctx.phase("validate"):
            for i, (it, path) in enumerate(zip(normalized["items"], paths, strict=True)):
                if it["role"] == "evidence":
                    text = await asyncio.to_thread(
                        guarded, media.check_evidence_head, it["media_type"], path,
                        policy.evidence_media_types, f"items[{i}].media_type")
                    if text is not None:
                        texts[i] = text
                if it["role"] == "evidence" and it["media_type"] == "application/pdf":
                    # Evidence is embedded (or bound by digest) as it was received: it
                    # is never rewritten, so it must be unambiguous as it is. The
                    # contract is checked by the signing pipeline.
                    await ctx.cpu(guarded, pdfcheck.inspect_pdf, path, limits)
        return texts

    async def _scan(self, ctx: JobContext, normalized: dict[str, Any],
                    paths: list[Path | SealedPath]) -> None:
        scanner = ctx.services.scanner
        if scanner is None:
            return
        async with ctx.phase("scan"):
            for path in paths:
                await scanner.scan(path, path.name)
