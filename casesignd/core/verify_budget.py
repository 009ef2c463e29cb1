"""``[validation.budget]``: what one document's validation may spend, as settings.

The numbers are the configuration's and :mod:`casesignd.verify.budget` enforces them;
both read this one struct, so the config needs nothing of verify's code.
"""

from __future__ import annotations

import msgspec

MiB = 1024 * 1024


class VerifyBudget(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    # Signature fields (and document timestamps) one document may carry.
    max_signatures: int = 100
    # CPU seconds one document's validation may take, and one signature's of them.
    max_cpu_s: float = 10.0
    max_cpu_per_signature_s: float = 2.0
    # Bytes all of one document's streams may decode to.
    max_decoded_bytes: int = 256 * MiB
    # Decoded /Contents of one signature (a CMS with its certificates and revocation data).
    max_contents_bytes: int = 1 * MiB
    # Address space of one verify process.
    max_memory_bytes: int = 1024 * MiB
    # Worker processes for verify requests alone.
    processes: int = 2
    # Of those, how many one tenant's requests may use at once. 0: all of them with one
    # tenant, half (at least 1) with several.
    process_share: int = 0
    # Verify requests one tenant may have in flight; past it, 503 busy for it alone.
    max_inflight_per_tenant: int = 4

    def share(self, tenants: int) -> int:
        """Verify processes one tenant may use at once, with ``tenants`` configured."""
        if self.process_share:
            return min(self.process_share, self.processes)
        return self.processes if tenants <= 1 else max(1, self.processes // 2)

    def problems(self) -> list[tuple[str, str]]:
        """(key, what is wrong) for each setting out of range."""
        out = []
        for key in ("max_signatures", "max_decoded_bytes", "max_contents_bytes",
                    "max_memory_bytes", "processes", "max_inflight_per_tenant"):
            if getattr(self, key) < 1:
                out.append((key, "must be at least 1"))
        for key in ("max_cpu_s", "max_cpu_per_signature_s"):
            if getattr(self, key) <= 0:
                out.append((key, "must be positive"))
        if self.process_share < 0:
            out.append(("process_share", "must be 0 (half of processes) or positive"))
        return out
