"""The queue configuration file of a timed replay (``xpupool simulate --mode timed --queue-config``),
read into the simulator's :class:`~xpupool.sim.queue_config.QueueConfig`.

The file is YAML: ``queues`` in the server's own format (the body of
``xpupool queue put -f``: name, tenant, quotas, cohort, max_priority, preemption), ``tenants``
with their fair-share weights, and ``assign`` rules that send each task to a queue with a
priority; the first rule whose conditions all hold wins, and a task no rule matches is an error.
So a replay admits, orders and preempts exactly as a server holding those queues would::

    tenants: [{name: prod, weight: 2}, {name: research}]
    queues:
      - {name: prod, tenant: prod, max_priority: 10,
         quotas: [{flavor: "*", resource: devices, nominal: 600}], cohort: all}
      - {name: batch, tenant: research, preemption: never,
         quotas: [{flavor: "*", resource: devices, nominal: 400}], cohort: all}
    assign:
      - {qos: LS, queue: prod, priority: 10}
      - {queue: batch}

It is read here, at the command line, because its queues are the server's wire form (``QueueIn``,
checked exactly as ``xpupool queue put`` checks them, built into engine queues the way the server
builds them): the simulator takes the result and imports nothing of the server or the client.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from xpupool.client._cli_common import load_yaml, request_error
from xpupool.model.errors import RequestError
from xpupool.server.queue_spec import queue_spec_of
from xpupool.server.schemas.base import Name
from xpupool.server.schemas.queues import QueueIn
from xpupool.sim.queue_config import AssignRule, QueueConfig


class _TenantIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: Name
    weight: float = Field(1.0, gt=0, le=1e6, description="Fair-share weight.")


class _RuleIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    queue: Name
    priority: int = Field(0, ge=-(1 << 31), le=(1 << 31) - 1)
    qos: str | None = Field(None, description="The task's QoS class (LS, Burstable, BE).")
    gpu_spec: str | None = Field(None, description="A GPU model the task is limited to.")


class _FileIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    tenants: list[_TenantIn] = Field(default_factory=list)
    queues: list[QueueIn] = Field(min_length=1)
    assign: list[_RuleIn] = Field(min_length=1)


def load_queue_config(path: str | Path) -> QueueConfig:
    """Read and check a file; errors name the file and the field."""
    return queue_config_from_dict(load_yaml(str(path)), str(path))


def queue_config_from_dict(data: dict[str, Any], where: str = "") -> QueueConfig:
    """The queue configuration ``data`` holds (``where`` names its file in errors)."""
    try:
        parsed = _FileIn.model_validate(data)
    except ValidationError as exc:
        raise request_error(exc, where) from None
    weights = {t.name: t.weight for t in parsed.tenants}
    queues: dict[str, QueueIn] = {}
    for i, q in enumerate(parsed.queues):
        if q.name in queues:
            raise _error(where, f"queues[{i}].name", q.name, "a second queue of that name")
        queues[q.name] = q
    specs = tuple(queue_spec_of(q, weights.get(q.tenant, 1.0)) for q in queues.values())
    for i, rule in enumerate(parsed.assign):
        queue = queues.get(rule.queue)
        if queue is None:
            known = ", ".join(queues)
            raise _error(where, f"assign[{i}].queue", rule.queue, f"no such queue; known: {known}")
        if rule.priority > queue.max_priority:
            raise _error(
                where,
                f"assign[{i}].priority",
                rule.priority,
                f"above queue {queue.name}'s max_priority {queue.max_priority}",
            )
    rules = tuple(AssignRule(r.queue, r.priority, r.qos, r.gpu_spec) for r in parsed.assign)
    return QueueConfig(specs, rules)


def _error(where: str, field: str, value: object, reason: str) -> RequestError:
    return RequestError(f"{where}: {field}" if where else field, value, reason)
