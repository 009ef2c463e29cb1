"""A case as a whole, over HTTP: its legal hold and its erasure (CONTRACT.md, "Data
lifecycle").

- ``POST /v1/cases/{case_id}/hold`` places a hold (201; 200 when one holds already):
  nothing of the case is removed while it holds, by retention or by an erasure;
- ``DELETE /v1/cases/{case_id}/hold`` lifts it (200; 404 ``hold_not_found``);
- ``GET /v1/cases/{case_id}/hold`` says whether one holds (200; 404);
- ``DELETE /v1/cases/{case_id}`` erases the case's objects and artifacts now and
  cancels its waiting jobs (200 with what went; 409 ``on_hold`` under a hold, 409
  ``case_busy`` while one of its jobs runs; 404 ``case_not_found``, recording
  nothing, for a case the tenant does not have).

Each change is an audit event, under the tenant's name; a case is the tenant's own,
so another tenant's hold or erasure never touches it.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from casesignd.core import audit
from casesignd.core.errors import NotFound
from casesignd.engine.retention import erase
from casesignd.files.objects import check_case_id
from casesignd.http.common import authenticate, json_response, services_of


def _hold_resource(case_id: str, hold: dict[str, Any]) -> dict[str, Any]:
    return {"case_id": case_id, "hold": True, "placed_at": audit.rfc3339(hold["placed_at"])}


def _case(request: web.Request) -> tuple[str, str]:
    tenant = authenticate(request)
    return tenant, check_case_id(request.match_info["case_id"])


async def get_hold(request: web.Request) -> web.Response:
    tenant, case_id = _case(request)
    hold = await services_of(request).store.get_hold(tenant, case_id)
    if hold is None:
        raise NotFound("the case has no legal hold", code="hold_not_found")
    return json_response(_hold_resource(case_id, hold))


async def place_hold(request: web.Request) -> web.Response:
    tenant, case_id = _case(request)
    store = services_of(request).store
    before = await store.get_hold(tenant, case_id)
    hold = await store.set_hold(tenant, case_id, f"api:{tenant}", placed=True)
    assert hold is not None
    return json_response(_hold_resource(case_id, hold), status=200 if before else 201)


async def lift_hold(request: web.Request) -> web.Response:
    tenant, case_id = _case(request)
    store = services_of(request).store
    if await store.get_hold(tenant, case_id) is None:
        raise NotFound("the case has no legal hold", code="hold_not_found")
    await store.set_hold(tenant, case_id, f"api:{tenant}", placed=False)
    return json_response({"case_id": case_id, "hold": False})


async def erase_case(request: web.Request) -> web.Response:
    tenant, case_id = _case(request)
    s = services_of(request)
    erased = await erase(s, tenant, case_id, f"api:{tenant}")
    for job in erased.canceled:
        s.metrics.job_finished(job.kind, "canceled")
    return json_response({
        "case_id": case_id,
        "objects_removed": sum(r.what == "object" for r in erased.removed),
        "artifacts_removed": sum(r.what == "artifact" for r in erased.removed),
        "jobs_canceled": [j.job_id for j in erased.canceled],
    })


def add_routes(app: web.Application) -> None:
    r = app.router
    r.add_get("/v1/cases/{case_id}/hold", get_hold)
    r.add_post("/v1/cases/{case_id}/hold", place_hold)
    r.add_delete("/v1/cases/{case_id}/hold", lift_hold)
    r.add_delete("/v1/cases/{case_id}", erase_case)
