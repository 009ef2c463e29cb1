"""``[retention]``: how long each area's things are kept, and how the sweep paces
itself, as settings, with the pure decision of what is due.

The numbers are the configuration's; the sweep (:mod:`casesignd.engine.retention`)
reads this one struct and hands the store the cutoffs it decides, so the config
needs nothing of the engine's code.
"""

from __future__ import annotations

import msgspec


class Retention(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    # How long things live, in seconds; 0 keeps them for ever (casesignd.engine.retention).
    # Uploaded objects, counted from the end of the last job that uses them.
    objects_s: float = 0.0
    # Artifacts (signed results), counted from when they were made.
    artifacts_s: float = 0.0
    # Terminal job rows (ready, canceled, failed), counted from their end.
    jobs_s: float = 0.0
    # Jobs refused for their input (failed, permanent_input: the kiosk's refused
    # documents among them) and the documents only they used.
    rejected_s: float = 0.0
    # How often the daemon looks for what is due, and how much one transaction removes.
    sweep_interval_s: float = 60.0
    sweep_batch: int = 200

    def cutoffs(self, now: float) -> dict[str, float]:
        """Each area that expires, and the time before which its things are due."""
        return {area: now - keep for area, keep in (
            ("rejected", self.rejected_s), ("jobs", self.jobs_s),
            ("artifacts", self.artifacts_s), ("objects", self.objects_s)) if keep > 0}

    def problems(self) -> list[tuple[str, str]]:
        """(key, what is wrong) for each setting out of range."""
        out = [(key, "must be 0 (keep for ever) or positive")
               for key in ("objects_s", "artifacts_s", "jobs_s", "rejected_s")
               if getattr(self, key) < 0]
        if self.sweep_interval_s <= 0:
            out.append(("sweep_interval_s", "must be positive"))
        if self.sweep_batch < 1:
            out.append(("sweep_batch", "must be at least 1"))
        return out
