"""The upload gate: uploads at once (in all, per tenant) and their bytes in flight."""

from __future__ import annotations

import pytest

from casesignd import config
from casesignd.core.errors import TooManyUploads, UploadQuota
from casesignd.http.uploads import UploadGate


def test_uploads_at_once_are_bounded_in_all_and_per_tenant():
    gate = UploadGate(quota_bytes=100)
    a1 = gate.admit("a", 10, max_uploads=3, tenant_share=2)
    gate.admit("a", 10, max_uploads=3, tenant_share=2)
    with pytest.raises(TooManyUploads) as e:
        gate.admit("a", 10, max_uploads=3, tenant_share=2)
    assert e.value.detail["reason"] == "max_uploads_per_tenant" and e.value.headers["Retry-After"]
    gate.admit("b", 10, max_uploads=3, tenant_share=2)
    with pytest.raises(TooManyUploads) as e:
        gate.admit("b", 10, max_uploads=3, tenant_share=2)
    assert e.value.detail["reason"] == "max_uploads"
    gate.release(a1)
    assert (gate.count, gate.bytes) == (2, 20)
    gate.admit("a", 10, max_uploads=3, tenant_share=2)


def test_bytes_in_flight_are_bounded_declared_or_streamed():
    gate = UploadGate(quota_bytes=100)
    declared = gate.admit("a", 60, max_uploads=9, tenant_share=9)
    with pytest.raises(UploadQuota) as e:
        gate.admit("a", 41, max_uploads=9, tenant_share=9)
    assert e.value.detail["reason"] == "upload_quota_bytes" and e.value.headers["Retry-After"]
    chunked = gate.admit("a", None, max_uploads=9, tenant_share=9)
    declared.grow(60)  # within what it declared: nothing more charged
    chunked.grow(40)
    assert gate.bytes == 100
    with pytest.raises(UploadQuota):
        chunked.grow(41)
    gate.release(chunked)
    gate.release(declared)
    assert (gate.count, gate.bytes) == (0, 0)


@pytest.mark.parametrize("per_tenant,tenants,share", [
    (0, 1, 8), (0, 3, 4), (3, 3, 3), (20, 1, 8),
])
def test_a_tenants_share_of_the_uploads(per_tenant, tenants, share):
    server = config.Server(max_uploads=8, max_uploads_per_tenant=per_tenant)
    assert server.upload_share(tenants) == share


def test_the_upload_quota_holds_the_largest_object():
    with pytest.raises(config.ConfigError) as e:
        config.loads("[server]\nmax_object_bytes = 2000\n[storage]\nupload_quota_bytes = 1000\n")
    assert e.value.key == "storage.upload_quota_bytes"
