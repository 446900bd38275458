"""The embedded demo: a two-site mixed fleet from a cluster file, a stream of requests in the
compact syntax, and what the engine decided for each (or why not). It is what ``make run`` starts
until the server exists.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from rich.console import Console
from rich.table import Table

from xpupool.engine import ClusterState, Engine
from xpupool.engine.profile import DEFAULT_PROFILE
from xpupool.model.quantity import format_mib
from xpupool.model.request_model import request_from_dict
from xpupool.probes.cluster_file import load_cluster

DEMO_REQUESTS: tuple[str, ...] = (
    "nvidia:A100,H100:2 mem=40Gi cores=50% name=finetune-llama",
    "ascend:910B mem=50% name=qwen-serve",
    "any:48GB..:1 name=eval",
    "nvidia:!T4 cuda>=12.4 name=vllm",
    "H100:8 nvlink replicas=2 gang name=pretrain",
    "L20 cores=25% replicas=6 name=yolo-infer",
    "mlu:MLU370:4 same-link-group name=resnet",
    "dcu:K100 mem=16Gi replicas=3 name=bert",
    "A100:80GB:4 nvlink name=sft",
    "nvidia:A100:8 cuda>=12.4 nvlink name=too-big",
    "any cuda>=13.0 name=too-new",
    "ascend:910B:16 name=wrong-shape",
)


def demo_cluster_path() -> Path:
    """The packaged two-site mixed pool (also at examples/cluster-mixed.yaml in the repository)."""
    return Path(str(resources.files("xpupool") / "data" / "cluster-mixed.yaml"))


def run_demo(
    console: Console, policy: str = DEFAULT_PROFILE, cluster: str | Path | None = None
) -> None:
    state = ClusterState(load_cluster(cluster or demo_cluster_path()), seed=0)
    engine = Engine(state, policy)
    console.print(
        f"[bold]xpupool demo[/]: {state.n_nodes} nodes, {state.n_devices} devices, "
        f"sites {', '.join(state.sites)}, policy {policy}"
    )
    table = Table(title="placements")
    for column in ("request", "replica", "node", "cards", "per card"):
        table.add_column(column)
    refusals: list[str] = []
    for text in DEMO_REQUESTS:
        req = request_from_dict(text)
        placement = engine.place(req)
        for alloc in placement.allocations:
            cards = ",".join(
                str(state.nodes[alloc.node_index].devices[s.slot % state.width].index)
                for s in alloc.devices
            )
            share = alloc.devices[0] if alloc.devices else None
            per_card = (
                f"{format_mib(share.memory_mib)} {share.core_permille / 10:g}%" if share else "-"
            )
            table.add_row(req.name, str(alloc.replica), alloc.node, cards or "-", per_card)
        refusals.extend(f"[red]{req.name}[/] ({text}): {f.message}" for f in placement.failures)
    console.print(table)
    console.print("[bold]unschedulable[/]")
    for line in refusals:
        console.print(f"  {line}")
    used = 1 - state.dev_mem_free.sum() / state.dev_mem_total.sum()
    console.print(f"device memory allocated: {100 * used:.1f}%")
