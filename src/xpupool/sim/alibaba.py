"""Read the Alibaba GPU cluster trace (cluster-trace-gpu-v2023, the FGD paper's data).

The node list gives each node's CPU (millicores), memory (MiB), GPU count and GPU model code; the pod
lists give each task's CPU, memory, GPU count, GPU share in thousandths of one GPU (``gpu_milli``,
below 1000 only for one-GPU tasks), allowed GPU models (``|``-separated, empty = any) and its times.

A task becomes an ordinary engine :class:`~xpupool.model.Request`: ``gpu_milli < 1000`` is a slice
(that share of compute and the same share of memory), 1000 is a whole card. With slices on integer
MiB, a card's memory never binds before its compute does, so the engine's feasibility is exactly the
paper's "one GPU with free milli >= gpu_milli; k idle GPUs for a k-GPU task".
"""

from __future__ import annotations

import csv
import functools
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path

from xpupool.model import Device, Node, Request, RequestError
from xpupool.model.request_model import request_from_dict

GPU_MILLI = 1000
# Card memory per model code, GiB. Codes G1..G3 are undisclosed; memory never binds under the
# slice mapping (see module docstring), so any positive size gives the same placements.
_CARD_GIB: dict[str, int] = {"P100": 16, "T4": 16, "V100M16": 16, "V100M32": 32, "A10": 24}
_DEFAULT_CARD_GIB = 16


@dataclass(frozen=True, slots=True)
class TraceTask:
    """One row of an ``openb_pod_list_*.csv``. Times are seconds from the trace start."""

    name: str
    cpu_milli: int
    memory_mib: int
    num_gpu: int
    gpu_milli: int
    gpu_spec: tuple[str, ...]
    creation_time: int = 0
    deletion_time: int = 0
    scheduled_time: int | None = None
    qos: str = ""

    @property
    def gpu_request_milli(self) -> int:
        """GPU demand in thousandths of a GPU: what 'arrived workload' adds up."""
        return self.num_gpu * self.gpu_milli

    @property
    def duration_s(self) -> int:
        """How long the task ran once placed: deletion - scheduled (or - creation if never
        scheduled in the trace)."""
        start = self.scheduled_time if self.scheduled_time is not None else self.creation_time
        return max(self.deletion_time - start, 0)

    @property
    def shape(self) -> tuple[int, int, int, tuple[str, ...]]:
        """FGD's task shape: (cpu, number of GPUs, per-GPU share, allowed models)."""
        return (self.cpu_milli, self.num_gpu, self.gpu_milli, self.gpu_spec)


def _int(row: dict[str, str], key: str, where: str, default: int | None = None) -> int:
    text = (row.get(key) or "").strip()
    if text == "" and default is not None:
        return default
    try:
        return int(float(text))
    except ValueError:
        raise RequestError(f"{where}.{key}", text, "expected a number") from None


def _spec(text: str | None) -> tuple[str, ...]:
    text = (text or "").strip()
    if text.lower() in ("", "nan", "none"):
        return ()
    return tuple(part.strip() for part in text.split("|") if part.strip())


def read_nodes(path: str | Path) -> list[Node]:
    """Nodes of a ``openb_node_list_*.csv``; GPUs are NVIDIA cards named by the trace's model code."""
    nodes = []
    with open(path, newline="") as f:
        for i, row in enumerate(csv.DictReader(f)):
            where = f"{Path(path).name}[{i}]"
            name = (row.get("sn") or "").strip()
            if not name:
                raise RequestError(f"{where}.sn", name, "node name is empty")
            count = _int(row, "gpu", where, 0)
            model = (row.get("model") or "").strip()
            if count and model.lower() in ("", "nan"):
                raise RequestError(f"{where}.model", model, "a node with GPUs needs a model")
            card_mib = _CARD_GIB.get(model, _DEFAULT_CARD_GIB) * 1024
            devices = tuple(
                Device(f"{name}-gpu{j}", "nvidia", model, card_mib, index=j) for j in range(count)
            )
            nodes.append(
                Node(name, _int(row, "cpu_milli", where), _int(row, "memory_mib", where), devices)
            )
    return nodes


def read_tasks(path: str | Path) -> list[TraceTask]:
    """Tasks of a ``openb_pod_list_*.csv`` in file order. A missing memory column reads as 0."""
    tasks = []
    with open(path, newline="") as f:
        for i, row in enumerate(csv.DictReader(f)):
            where = f"{Path(path).name}[{i}]"
            task = TraceTask(
                name=(row.get("name") or f"task-{i}").strip(),
                cpu_milli=_int(row, "cpu_milli", where),
                memory_mib=_int(row, "memory_mib", where, 0),
                num_gpu=_int(row, "num_gpu", where, 0),
                gpu_milli=_int(row, "gpu_milli", where, 0),
                gpu_spec=_spec(row.get("gpu_spec")),
                creation_time=_int(row, "creation_time", where, 0),
                deletion_time=_int(row, "deletion_time", where, 0),
                scheduled_time=_int(row, "scheduled_time", where, -1),
                qos=(row.get("qos") or "").strip(),
            )
            if task.scheduled_time is not None and task.scheduled_time < 0:
                task = replace(task, scheduled_time=None)
            if task.num_gpu and not 0 < task.gpu_milli <= GPU_MILLI:
                raise RequestError(f"{where}.gpu_milli", task.gpu_milli, "must be in 1..1000")
            if task.num_gpu > 1 and task.gpu_milli != GPU_MILLI:
                raise RequestError(
                    f"{where}.gpu_milli", task.gpu_milli, "a multi-GPU task must take whole GPUs"
                )
            tasks.append(task)
    return tasks


def to_request(task: TraceTask) -> Request:
    """The engine request for one task (see the module docstring for the share mapping).

    Built through the request model, as every front builds its requests, once per task shape:
    validating each of a replay's ten thousand or so tasks would be a visible part of a replay,
    while a trace has only a few hundred distinct shapes at most.
    """
    shape = _shape_request(
        task.cpu_milli, task.memory_mib, task.num_gpu, task.gpu_milli, task.gpu_spec
    )
    return replace(shape, name=task.name)


@functools.lru_cache(maxsize=4096)
def _shape_request(
    cpu_milli: int, memory_mib: int, num_gpu: int, gpu_milli: int, gpu_spec: tuple[str, ...]
) -> Request:
    devices: dict[str, object] | None = None
    if num_gpu and gpu_milli >= GPU_MILLI:
        devices = {"count": num_gpu, "models": list(gpu_spec)}
    elif num_gpu:
        devices = {"count": 1, "cores": f"{gpu_milli / 10:g}%", "models": list(gpu_spec)}
    form = {"cpu": f"{cpu_milli}m", "memory": memory_mib, "devices": devices}
    return request_from_dict(form)


def capacity_milli(nodes: Iterable[Node]) -> int:
    """Cluster GPU capacity in thousandths of a GPU."""
    return sum(len(n.devices) for n in nodes) * GPU_MILLI
