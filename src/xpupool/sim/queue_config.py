"""Which queue and priority each trace task gets in a timed replay, and the queues themselves.

The queues are the engine's own (:class:`~xpupool.engine.cycle.QueueSpec`), so a replay admits,
orders and preempts exactly as a server holding those queues would; the rules send each task to a
queue with a priority, and the first rule whose conditions all hold wins. The file an operator
writes them in uses the server's queue format and is read at the command line
(``client/queue_file.py``), which keeps the simulator below the server.
"""

from __future__ import annotations

from dataclasses import dataclass

from xpupool.engine.cycle import Preemption, QueueSpec
from xpupool.model.errors import RequestError
from xpupool.sim.alibaba import TraceTask

# Alibaba QoS classes, most important first (latency-sensitive, burstable, best effort).
QOS_PRIORITY: dict[str, int] = {"LS": 2, "Burstable": 1, "BE": 0}
DEFAULT_QUEUE = "default"


@dataclass(frozen=True, slots=True)
class AssignRule:
    """Send a task to ``queue`` with ``priority`` when its QoS and GPU model match (None: any)."""

    queue: str
    priority: int = 0
    qos: str | None = None
    gpu_spec: str | None = None

    def matches(self, task: TraceTask) -> bool:
        return (self.qos is None or task.qos == self.qos) and (
            self.gpu_spec is None or self.gpu_spec in task.gpu_spec
        )


@dataclass(frozen=True, slots=True)
class QueueConfig:
    queues: tuple[QueueSpec, ...]
    rules: tuple[AssignRule, ...]

    @classmethod
    def single(
        cls, priority_by_qos: bool, preemption: Preemption = Preemption.NEVER
    ) -> QueueConfig:
        """One queue without quota: a plain FIFO, or by QoS class when asked; without
        preemption unless asked (then a higher QoS class preempts a lower one)."""
        queue = QueueSpec(DEFAULT_QUEUE, DEFAULT_QUEUE, (), preemption=preemption)
        rules = [AssignRule(DEFAULT_QUEUE, p, qos) for qos, p in QOS_PRIORITY.items() if p]
        keep = rules if priority_by_qos else []
        return cls((queue,), (*keep, AssignRule(DEFAULT_QUEUE)))

    def assign(self, task: TraceTask) -> tuple[str, int]:
        """(queue, priority) of ``task``: the first matching rule's."""
        for rule in self.rules:
            if rule.matches(task):
                return rule.queue, rule.priority
        raise RequestError(
            "assign",
            task.name,
            f"no rule matches this task (qos {task.qos!r}, gpu {task.gpu_spec})",
        )
