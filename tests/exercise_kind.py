"""A job kind for exercising the engine: told to succeed, fail or hang.

Not part of casesignd: the test suite plugs it into the daemons it starts
(tests/serve.py), as the daemon's own kinds are plugged in, and drives the engine's
retry, fencing and crash paths with it without a signer.

Body: ``{"kind": "test", "behavior": "succeed" | "fail_transient" | "fail_permanent" |
"hang", "fail_times": N, "sleep_ms": M, "hang_s": S, "tag": "..."}``. With
``fail_transient``, ``fail_times`` failures happen before success (default: always).
"""

from __future__ import annotations

import asyncio
from typing import Any

from casesignd.config import Config
from casesignd.core.errors import PermanentJobError, TransientJobError, ValidationError
from casesignd.core.fields import integer, refuse_unknown
from casesignd.engine.kinds import Admission, Finish, JobContext

BEHAVIORS = ("succeed", "fail_transient", "fail_permanent", "hang")
_FIELDS = {"kind", "behavior", "fail_times", "sleep_ms", "hang_s", "tag", "case_id", "size"}


def _int(body: dict[str, Any], name: str, default: int, hi: int) -> int:
    return integer(body.get(name, default), name, 0, hi)


class ExerciseKind:
    """The ``test`` job kind (the body above)."""

    name = "test"

    def admit(self, body: dict[str, Any], config: Config, tenant: str) -> Admission:
        refuse_unknown(body, _FIELDS)
        behavior = body.get("behavior", "succeed")
        if behavior not in BEHAVIORS:
            raise ValidationError("behavior must be one of " + ", ".join(BEHAVIORS),
                                  code="invalid_field", field="behavior")
        tag = body.get("tag", "")
        if not isinstance(tag, str) or len(tag) > 200:
            raise ValidationError("tag must be a string of at most 200 characters",
                                  code="invalid_field", field="tag")
        normalized = {
            "behavior": behavior,
            "fail_times": _int(body, "fail_times", 1_000_000, 1_000_000),
            "sleep_ms": _int(body, "sleep_ms", 0, 3_600_000),
            "hang_s": _int(body, "hang_s", 3600, 86_400),
            "tag": tag,
        }
        size = _int(body, "size", 0, 1 << 50)
        case_id = body.get("case_id")
        if case_id is not None:
            from casesignd.engine.jobs import check_case_id

            check_case_id(case_id)
        return Admission(normalized=normalized, version="test-v1", case_id=case_id,
                         declared_bytes=size, key_material=normalized | {"case_id": case_id})

    def needs_area(self, input: dict[str, Any], config: Config) -> bool:
        return True

    async def run(self, ctx: JobContext) -> Finish:
        spec = ctx.input
        if spec["sleep_ms"]:
            await asyncio.sleep(spec["sleep_ms"] / 1000)
        behavior = spec["behavior"]
        failures_so_far = getattr(ctx, "series_failures", 0)
        if behavior == "fail_transient" and failures_so_far < spec["fail_times"]:
            raise TransientJobError("the test kind failed on purpose", code="test_transient")
        if behavior == "fail_permanent":
            raise PermanentJobError("the test kind failed on purpose", code="test_permanent")
        if behavior == "hang":
            await asyncio.sleep(spec["hang_s"])
        return Finish(detail={"behavior": behavior, "attempt": ctx.attempt})
