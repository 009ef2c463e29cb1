"""The ``extend_signature`` job kind: a B-LTA artifact renewed before its timestamp ages.

A document timestamp proves that everything under it existed at its time, as long
as its own chain can still be validated (ETSI EN 319 142-1 §5.5). Before that
chain expires, a renewal adds fresh validation data for it and a new document
timestamp over the whole document (:meth:`casesignd.signing.longterm.LongTerm.extend`).
The result is a new artifact; the one renewed is kept as it was. The job's
``finished`` event names both.
"""

from __future__ import annotations

import asyncio
import dataclasses
import re
from pathlib import Path
from typing import Any

from casesignd.config import Config
from casesignd.core.errors import PermanentJobError, ValidationError
from casesignd.core.fields import refuse_unknown
from casesignd.core.outcomes import Finish
from casesignd.core.sealed import SealedPath, copy_into
from casesignd.engine.kinds import Admission, JobContext, admit_policy
from casesignd.files.envelope import SealedFile
from casesignd.job_kinds.signing import JobSteps, signing_policy
from casesignd.signing.ladder import Ladder, policy_in_force
from casesignd.signing.sealed_output import SealedSigned

KIND = "extend_signature"
_ARTIFACT_ID = re.compile(r"art_[0-9a-f]{32}")
_FIELDS = {"kind", "artifact_id", "policy_version"}


def admit_body(body: dict[str, Any], config: Config) -> Admission:
    """``{"kind": "extend_signature", "artifact_id": ..., "policy_version"?: ...}``; the
    policy (default: the default policy) must be B-LTA: its TSA makes the timestamp."""
    refuse_unknown(body, _FIELDS)
    artifact_id = body.get("artifact_id")
    if artifact_id is None:
        raise ValidationError("artifact_id is required", code="missing_field", field="artifact_id")
    if not isinstance(artifact_id, str) or not _ARTIFACT_ID.fullmatch(artifact_id):
        raise ValidationError("artifact_id must be an artifact's id (art_ and 32 hex digits)",
                              code="invalid_field", field="artifact_id")
    policy = admit_policy(body, config)
    if not policy.at_least("B-LTA"):
        raise ValidationError(f"policy {policy.version!r} is {policy.signature_level}: renewal needs "
                              "a B-LTA policy", code="invalid_field", field="policy_version")
    normalized = {"artifact_id": artifact_id, "policy_version": policy.version}
    return Admission(normalized=normalized, version=policy.version, key_material=normalized)


class ExtendSignatureKind:
    """``extend_signature``: a new B-LTA artifact, renewed on the signing ladder's last
    rung (:meth:`casesignd.signing.ladder.Ladder.extend`)."""

    name = KIND

    def __init__(self, ladder: Ladder) -> None:
        self._ladder = ladder

    def admit(self, body: dict[str, Any], config: Config, tenant: str) -> Admission:
        return admit_body(body, config)

    def needs_area(self, input: dict[str, Any], config: Config) -> bool:
        return True

    async def run(self, ctx: JobContext) -> Finish:
        s = ctx.services
        artifact_id = ctx.input["artifact_id"]
        policy = policy_in_force(ctx.config.policy(ctx.input["policy_version"]), "B-LTA")
        record = await s.store.get_artifact(artifact_id)
        source = await s.artifact_source(artifact_id) if record is not None else None
        if record is None or record["tenant"] != ctx.tenant or source is None:
            raise PermanentJobError(f"no artifact {artifact_id}", code="artifact_not_found")
        if record["media_type"] != "application/pdf":
            raise PermanentJobError("only a signed PDF can be renewed", code="invalid_input")
        assert ctx.area is not None
        # Sealed in the attempt's area; the renewal's updates follow it in memory.
        out = ctx.area.sealed("extended.pdf")
        async with ctx.phase("fetch"):
            await asyncio.to_thread(_copy, source, out)
        expires_at, tail = await self._ladder.extend(JobSteps(ctx), SealedSigned(out, b""),
                                                     signing_policy(policy))
        artifact = dataclasses.replace(await s.publish(ctx, out, "application/pdf", tail=tail),
                                       timestamp_expires_at=expires_at)
        return Finish(artifact=artifact, detail={"extended_from": artifact_id, "level": "B-LTA"},
                      renews=artifact_id)


def _copy(source: bytes | Path | SealedFile, out: SealedPath) -> None:
    with out.create() as sealed:
        if isinstance(source, SealedFile):
            with source.open() as f:
                copy_into(f, sealed)
        elif isinstance(source, Path):
            with open(source, "rb") as f:
                copy_into(f, sealed)
        else:
            sealed.write(source)
