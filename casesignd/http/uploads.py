"""Object uploads in flight, bounded: how many at once (in all and per tenant) and
how many bytes together.

An upload's file grows under ``state_dir/objects/tmp`` on the state volume while its
body arrives; without a bound, a few dozen slow clients could fill that volume.
:class:`UploadGate` admits an upload before its body is read, charging its declared
size (``Content-Length``) against ``storage.upload_quota_bytes``; a chunked body is
charged as it streams (:meth:`Upload.grow`). Every refusal is an error a client can
act on: 429 ``too_many_uploads`` or 503 ``upload_quota``, with ``Retry-After``. The
quota holds at least one object of ``server.max_object_bytes`` (config checks it), so
an upload refused for bytes fits once others are done.

Each refusal carries ``detail["reason"]``, the setting that bounded it: the label of
``casesignd_upload_refusals_total`` (:data:`casesignd.observability.metrics.UPLOAD_REASONS`).

The gate is event-loop state only: its checks and counts are plain arithmetic, with
no await between a check and the count it guards.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from casesignd.core.errors import TooManyUploads, UploadQuota

# Seconds a refused client should wait: an upload in flight ends or moves on by then.
RETRY_AFTER_S = 5


@dataclass
class Upload:
    """One admitted upload: the bytes it is charged, until :meth:`UploadGate.release`."""

    tenant: str
    charged: int
    declared: int | None
    _gate: UploadGate = field(repr=False)

    def grow(self, streamed: int) -> None:
        """The body has streamed ``streamed`` bytes in all: charge what passes the
        declared size (a chunked body declares none); UploadQuota past the quota."""
        if streamed > self.charged:
            self._gate._charge(self, streamed - self.charged)


class UploadGate:
    """Counts uploads in flight and their bytes; see the module docstring."""

    def __init__(self, quota_bytes: int) -> None:
        self.quota_bytes = quota_bytes
        self.count = 0
        self.bytes = 0
        self._by_tenant: dict[str, int] = {}

    def admit(self, tenant: str, declared: int | None, *, max_uploads: int,
              tenant_share: int) -> Upload:
        """Admit an upload of ``declared`` bytes (None: unknown, chunked), or raise
        TooManyUploads or UploadQuota. The caller releases what it was given, however
        the upload ends."""
        self.check(tenant, declared, max_uploads=max_uploads, tenant_share=tenant_share)
        want = declared or 0
        self.count += 1
        self.bytes += want
        self._by_tenant[tenant] = self._by_tenant.get(tenant, 0) + 1
        return Upload(tenant, want, declared, self)

    def check(self, tenant: str, declared: int | None, *, max_uploads: int,
              tenant_share: int) -> None:
        """Raise what :meth:`admit` would raise now, counting nothing."""
        retry = {"Retry-After": str(RETRY_AFTER_S)}
        if self.count >= max_uploads:
            raise TooManyUploads(f"{max_uploads} uploads are in flight; retry later",
                                 headers=retry, detail={"reason": "max_uploads"})
        if self._by_tenant.get(tenant, 0) >= tenant_share:
            raise TooManyUploads(f"this tenant has {tenant_share} uploads in flight; retry later",
                                 headers=retry, detail={"reason": "max_uploads_per_tenant"})
        if self.bytes + (declared or 0) > self.quota_bytes:
            raise UploadQuota("the uploads in flight fill the upload quota; retry later",
                              headers=retry, detail={"reason": "upload_quota_bytes"})

    def _charge(self, upload: Upload, more: int) -> None:
        if self.bytes + more > self.quota_bytes:
            raise UploadQuota("the uploads in flight fill the upload quota; retry later",
                              headers={"Retry-After": str(RETRY_AFTER_S)},
                              detail={"reason": "upload_quota_bytes"})
        self.bytes += more
        upload.charged += more

    def release(self, upload: Upload) -> None:
        """The upload ended (stored, refused or abandoned): free its count and bytes."""
        self.count -= 1
        self.bytes -= upload.charged
        upload.charged = 0
        left = self._by_tenant[upload.tenant] - 1
        if left:
            self._by_tenant[upload.tenant] = left
        else:
            del self._by_tenant[upload.tenant]  # no entry for a tenant with none in flight
