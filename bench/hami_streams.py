"""The three pod streams of the HAMi comparison (issue 24), as :class:`k8s_harness.PodAsk` lists
that every stack renders its own way.

- ``hami-mix``: :func:`k8s_harness.pod_stream`, HAMi-style asks (whole cards, ``gpumem`` and
  ``gpumem-percentage`` shares with ``gpucores``, ``use-gputype`` on a third).
- ``alibaba``: the GPU tasks of the Alibaba trace's default mix (``openb_pod_list_default.csv`` of
  cluster-trace-gpu-v2023, read by :func:`xpupool.sim.alibaba.read_tasks`) in file order,
  converted to HAMi's resource names as the issue says: ``num_gpu`` 1 with ``gpu_milli`` m < 1000
  asks ``nvidia.com/gpu: 1``, ``nvidia.com/gpumem-percentage: m/10`` and
  ``nvidia.com/gpucores: m/10``; a whole-card task asks ``nvidia.com/gpu: num_gpu`` alone;
  ``gpu_spec`` (``|``-separated model codes) becomes ``nvidia.com/use-gputype`` (HAMi's
  comma-separated list). Tasks without a GPU are left out. Every m of the default mix is a
  multiple of 10; another trace's m/10 is rounded up, so no task asks less than it did.
- ``burst200``: 200 asks of the ``hami-mix`` generator (another seed), all POSTed at once.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from k8s_harness import PodAsk, pod_stream
from xpupool.sim.alibaba import GPU_MILLI, TraceTask, read_tasks
from xpupool.sim.trace_files import DEFAULT_PODS, default_nodes

STREAMS = ("hami-mix", "alibaba", "burst200")
BURST = 200
BURST_CONCURRENCY = 200  # every POST in flight at once (the API client holds 100 connections)


@dataclass(frozen=True, slots=True)
class Stream:
    """One stream: its asks and how many POSTs are in flight while they are created."""

    name: str
    asks: tuple[PodAsk, ...]
    concurrency: int = 16


def alibaba_ask(task: TraceTask, name: str) -> PodAsk | None:
    """The HAMi ask of one trace task (see the module docstring), None for a CPU-only task."""
    if task.num_gpu <= 0:
        return None
    model = ",".join(task.gpu_spec) or None
    if task.gpu_milli >= GPU_MILLI:
        return PodAsk(name, task.num_gpu, model=model, count_only=True)
    if task.num_gpu != 1:
        raise ValueError(f"{task.name}: gpu_milli {task.gpu_milli} on {task.num_gpu} GPUs")
    pct = -(-task.gpu_milli // 10)
    return PodAsk(name, 1, memory_pct=pct, cores_pct=pct, model=model)


def alibaba_stream(n: int, path: Path | None = None) -> list[PodAsk]:
    """The first ``n`` GPU tasks of ``path`` (the default mix of the trace beside the checkout,
    see :mod:`xpupool.sim.trace_files`) as asks named ``p-00000``...; fewer if it has fewer."""
    if path is None:
        path = default_nodes().parent / DEFAULT_PODS
    out: list[PodAsk] = []
    for task in read_tasks(path):
        ask = alibaba_ask(task, f"p-{len(out):05d}")
        if ask is not None:
            out.append(ask)
            if len(out) == n:
                break
    return out


def burst_stream(n: int, seed: int) -> list[PodAsk]:
    """``n`` asks of the ``hami-mix`` generator on its own seed."""
    return pod_stream(n, seed + 1000)


def make_streams(
    names: Sequence[str], pods: int, seed: int, burst: int = BURST, trace: Path | None = None
) -> list[Stream]:
    """The named streams: ``pods`` asks for ``hami-mix`` and ``alibaba``, ``burst`` for
    ``burst200``."""
    out = []
    for name in names:
        if name == "hami-mix":
            out.append(Stream(name, tuple(pod_stream(pods, seed))))
        elif name == "alibaba":
            out.append(Stream(name, tuple(alibaba_stream(pods, trace))))
        elif name == "burst200":
            out.append(Stream(name, tuple(burst_stream(burst, seed)), BURST_CONCURRENCY))
        else:
            raise ValueError(f"stream {name!r} is not one of {STREAMS}")
    return out
