"""Metering's Prometheus counters: ``xpupool_device_seconds_total``,
``xpupool_device_memory_gib_seconds_total``, ``xpupool_compute_unit_seconds_total`` and
``xpupool_energy_joules_total``, labelled tenant, queue, site and model, and the jobs admitted
over their tenant's budget (``xpupool_budget_exceeded_jobs_total``, usage/billing.py). Read from the meter's
all-time totals, which are seeded from the store and grow only with what a flush committed, so
each counter is monotonic across a restart (``meter.py``)."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

from xpupool.server.plane import ControlPlane
from xpupool.server.storage.usage import LABELS

COUNTERS = (
    ("xpupool_device_seconds", "Card-seconds held by replica runs, weighted by share."),
    ("xpupool_device_memory_gib_seconds", "Device memory held by replica runs, GiB-seconds."),
    (
        "xpupool_compute_unit_seconds",
        "Card-seconds x share x the model's compute units (dense BF16 TFLOPS; docs/usage.md).",
    ),
    (
        "xpupool_energy_joules",
        "Energy of held cards split by share; tenant 'pool': the unheld remainder.",
    ),
)
"""(name without _total, help), in the order of ``storage/usage.SUMS``."""


class UsageCollector(Collector):
    def __init__(self, plane: ControlPlane) -> None:
        self.plane = plane

    def collect(self) -> Iterator[CounterMetricFamily]:
        totals = self.plane.meter.totals(self.plane)
        families = [CounterMetricFamily(n, h, labels=list(LABELS)) for n, h in COUNTERS]
        for labels, sums in sorted(totals.items()):
            for family, value in zip(families, sums, strict=True):
                family.add_metric(list(labels), value)
        yield from families
        over = CounterMetricFamily(
            "xpupool_budget_exceeded_jobs",
            "Jobs admitted while their tenant's budget was spent, by the budget's policy "
            "(warn, lower-priority; usage/billing.py). Since the server started.",
            labels=["tenant", "policy"],
        )
        for (tenant, policy), count in sorted(self.plane.billing.exceeded.items()):
            over.add_metric([tenant, policy], count)
        yield over
