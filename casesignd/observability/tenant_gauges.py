"""Per-tenant gauges: each configured tenant's oldest queued job's age.

A tenant's name becomes a label here, and only here: the names are the ones the
operator wrote in the config (never a person's), and only the configured ones are
ever named (:meth:`TenantQueueAges.configure`, at start and on reload), so the series
are as many as the config's tenants. A tenant that is no longer configured, however
many jobs it left behind, has no series.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping

from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector


class TenantQueueAges(Collector):
    """``casesignd_tenant_oldest_queued_job_age_seconds{tenant}``, read at scrape time
    from what the engine's maintenance last saw (no scrape waits on the store)."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._tenants: tuple[str, ...] = ()
        self._oldest: dict[str, float] = {}

    def configure(self, tenants: Iterable[str]) -> None:
        """The tenants the gauge names: the config's."""
        with self._lock:
            self._tenants = tuple(sorted(set(tenants)))

    def update(self, oldest_queued: Mapping[str, float]) -> None:
        """Each tenant's oldest queued job's time of queueing (Unix seconds)."""
        with self._lock:
            self._oldest = dict(oldest_queued)

    def collect(self) -> Iterable[Metric]:
        family = GaugeMetricFamily(
            "casesignd_tenant_oldest_queued_job_age_seconds",
            "Age of each configured tenant's oldest queued job; 0 when it has none queued.",
            labels=["tenant"])
        now = self._clock()
        with self._lock:
            for tenant in self._tenants:
                at = self._oldest.get(tenant)
                family.add_metric([tenant], max(0.0, now - at) if at is not None else 0.0)
        return [family]
