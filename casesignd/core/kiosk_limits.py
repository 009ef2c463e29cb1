"""``[kiosk]``: what the kiosk path (``POST /v1/sign``) may spend and how many of its
requests run at once, as settings, and the pure decisions about each tenant's share.

The numbers are the configuration's; the kiosk handler (:mod:`casesignd.http.kiosk`),
the daemon's lanes and the job kinds read this one struct, so the config needs
nothing of their code.
"""

from __future__ import annotations

import msgspec

MiB = 1024 * 1024


class Kiosk(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    deadline_ms: int = 2000
    max_document_bytes: int = 10 * MiB
    reserved_key_slots: int = 1
    max_concurrent: int = 16
    # Kiosk requests in flight from one tenant (its share of max_concurrent); beyond
    # it that tenant gets 503 busy while the others are served. 0: all of
    # max_concurrent with one tenant, half of it (at least 1) with several.
    max_concurrent_per_tenant: int = 0
    # Worker processes kept for kiosk requests alone (batch jobs never use them).
    cpu_processes: int = 2
    # Of those, how many one tenant's documents may take at once, so that another
    # tenant's kiosk always finds one free. 0: all of them with one tenant, half of
    # them (at least 1) with several.
    cpu_processes_per_tenant: int = 0
    # Signed documents up to this size are kept in the store, committed with their
    # record (no file, no fsync of their own); larger ones are files. 0: always files.
    inline_artifact_max_bytes: int = 1 * MiB
    # A kiosk document's checks stop at the deadline's worth of CPU time, and at this
    # many bytes they inflate in all (images are never inflated): a decompression
    # bomb is refused (limit_exceeded) before it can hold a process.
    max_inflated_bytes: int = 64 * MiB

    def process_share(self, tenants: int) -> int:
        """Kiosk processes one tenant may use at once, with ``tenants`` configured."""
        if self.cpu_processes_per_tenant:
            return min(self.cpu_processes_per_tenant, self.cpu_processes)
        return self.cpu_processes if tenants <= 1 else max(1, self.cpu_processes // 2)

    def tenant_share(self, tenants: int) -> int:
        """Kiosk requests one tenant may have in flight at once, with ``tenants``
        configured: the setting, or else all of them for a daemon of one tenant and
        half of them (at least 1) when tenants share it."""
        if self.max_concurrent_per_tenant:
            return self.max_concurrent_per_tenant
        return self.max_concurrent if tenants <= 1 else max(1, self.max_concurrent // 2)

    def problems(self) -> list[tuple[str, str]]:
        """(key, what is wrong) for each of its own settings out of range that the
        config's table of positive numbers (``deadline_ms`` among them) leaves."""
        if self.max_concurrent_per_tenant < 0:
            return [("max_concurrent_per_tenant", f"must be 0 (half of kiosk.max_concurrent) "
                     f"or positive, got {self.max_concurrent_per_tenant}")]
        return []
