"""The embedded demo: a two-site mixed fleet, a stream of requests in the compact syntax, and what the
engine decided for each (or why not). It is what ``make run`` starts until the server exists.
"""

from __future__ import annotations

from dataclasses import dataclass

from rich.console import Console
from rich.table import Table

from xpupool.engine import ClusterState, Engine
from xpupool.model import Device, Node
from xpupool.model.quantity import format_mib
from xpupool.model.spec import parse_spec


@dataclass(frozen=True)
class _Rack:
    prefix: str
    site: str
    nodes: int
    vendor: str
    model: str
    memory_mib: int
    driver: str
    group_size: int
    cards: int = 8


DEMO_RACKS: tuple[_Rack, ...] = (
    _Rack("bj-a100", "beijing", 3, "nvidia", "NVIDIA A100-SXM4-80GB", 81920, "550.54.15", 4),
    _Rack("bj-h100", "beijing", 2, "nvidia", "NVIDIA H100 80GB HBM3", 81559, "560.35.03", 8),
    _Rack("bj-910b", "beijing", 2, "huawei", "910B3", 65536, "24.1.rc2", 8),
    _Rack("sh-l20", "shanghai", 3, "nvidia", "NVIDIA L20", 46068, "535.104.05", 0),
    _Rack("sh-mlu", "shanghai", 2, "cambricon", "MLU370-X8", 49152, "5.10.22", 4),
    _Rack("sh-k100", "shanghai", 2, "hygon", "K100_AI", 65536, "6.3.8", 0),
)

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


def demo_nodes() -> list[Node]:
    nodes = []
    for rack in DEMO_RACKS:
        for i in range(rack.nodes):
            name = f"{rack.prefix}-{i}"
            devices = tuple(
                Device(
                    uuid=f"{name}-{j}",
                    vendor=rack.vendor,
                    model=rack.model,
                    memory_mib=rack.memory_mib,
                    index=j,
                    driver_version=rack.driver,
                    link_group=None if rack.group_size == 0 else f"link{j // rack.group_size}",
                )
                for j in range(rack.cards)
            )
            nodes.append(Node(name, 128_000, 1024 * 1024, devices, site=rack.site))
    return nodes


def run_demo(console: Console, policy: str = "binpack") -> None:
    state = ClusterState(demo_nodes(), seed=0)
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
        req = parse_spec(text)
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
