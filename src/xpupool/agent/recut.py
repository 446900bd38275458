"""Carrying out a re-cut the server asked for (``HeartbeatReply.recut``; issue 53).

The agent compares the card's instances as its probes read them this pass with the wanted
layout (``catalog/partition_change.py``), refuses to destroy an instance one of its own replicas
was given (the server checked its books; this is the node's word), lists the card's instances
with the vendor tool to name the ones to destroy, and runs the commands
``agent/recut_commands.py`` builds. Nothing more: the next pass's probes read the new instances,
and the agent registers them as for any change of its cards, which is how the server learns the
re-cut is done. A failure (the tool's last line, or why it did not run) is reported in the next
heartbeat (``Heartbeat.recut_failed``). An order already tried is not run again while the
server keeps sending it (it drops it once it sees the new layout or the failure).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence

from xpupool.agent.recut_commands import (
    RecutImpossible,
    list_gpu_instances,
    list_vnpus,
    mig_commands,
    parse_gpu_instances,
    vnpu_commands,
)
from xpupool.catalog import load_accelerators, load_partitions
from xpupool.catalog.partition_cards import read_layout
from xpupool.catalog.partition_change import LayoutChange, layout_change
from xpupool.model.errors import RequestError
from xpupool.probes.base import DeviceInfo, Probe, ProbeError
from xpupool.probes.npu_smi_vnpu import parse_vnpu_info
from xpupool.probes.tool import run_tool
from xpupool.server.schemas.agent_protocol import CardRecut, RecutFailure

log = logging.getLogger("xpupool.agent")

RunTool = Callable[[str, Sequence[str]], str]
"""(vendor, argv) -> the tool's stdout; raises ProbeError (``probes/tool.py`` ``run_tool``)."""
ChipOf = Callable[[str], tuple[int, int] | None]
"""An Ascend card's UUID -> (NPU id, chip id), what ``npu-smi set -i -c`` take; None: unknown."""


def chip_locator(probes: Iterable[Probe]) -> ChipOf:
    """Asks each probe that can say (``chip_of``: the npu-smi probe, the fake probe) where an
    Ascend card is."""
    askers = [p.chip_of for p in probes if hasattr(p, "chip_of")]

    def locate(uuid: str) -> tuple[int, int] | None:
        for ask in askers:
            found: tuple[int, int] | None = ask(uuid)
            if found is not None:
                return found
        return None

    return locate


def recut_card(
    order: CardRecut,
    devices: Sequence[DeviceInfo],
    held: set[str],
    chip_of: ChipOf,
    run: RunTool = run_tool,
) -> str | None:
    """Cut card ``order.card`` as ``order.layout``; None when done (or nothing was to do), else
    why not. ``devices``: this pass's reading; ``held``: the UUIDs the node's replicas were
    given."""
    instances = [d for d in devices if d.partition_of == order.card]
    whole = [d for d in devices if d.uuid == order.card and d.partition is None]
    if not instances and not whole:
        return f"the node has no card {order.card}"
    card = (instances or whole)[0]
    try:
        wanted = read_layout("layout", order.layout)
    except RequestError as exc:
        return f"layout: {exc.reason}"
    current = tuple((d.partition or "", d.partition_start) for d in instances)
    change = layout_change(current, wanted)
    if change.empty:
        return None
    gone = [d.uuid for d in instances if (d.partition or "", d.partition_start) in change.destroy]
    if whole:
        gone = [card.uuid]
    busy = sorted(set(gone) & held)
    if busy:
        return f"replicas of this node run on {', '.join(busy)}"
    scheme = load_partitions().scheme_for(card.model, card.vendor, load_accelerators())
    if scheme is None:
        return f"{card.model} has no hardware partitions"
    try:
        if scheme.kind == "mig":
            _run_all(run, "nvidia", _mig(card.index, change, run))
        else:
            where = chip_of(order.card)
            if where is None:
                return f"no probe knows the NPU and chip of {order.card}"
            _run_all(run, "huawei", _vnpu(*where, change, run))
    except ProbeError as exc:
        return f"{exc.command}: {exc.detail}"
    except RecutImpossible as exc:
        return str(exc)
    log.info("card %s re-cut: %s", order.card, ", ".join(order.layout))
    return None


def _mig(gpu: int, change: LayoutChange, run: RunTool) -> list[list[str]]:
    listed = parse_gpu_instances(run("nvidia", list_gpu_instances(gpu))) if change.destroy else []
    return mig_commands(gpu, listed, change.destroy, change.create)


def _vnpu(npu: int, chip: int, change: LayoutChange, run: RunTool) -> list[list[str]]:
    listed = parse_vnpu_info(run("huawei", list_vnpus(npu, chip))) if change.destroy else []
    return vnpu_commands(npu, chip, listed, change.destroy, change.create)


def _run_all(run: RunTool, vendor: str, commands: list[list[str]]) -> None:
    for argv in commands:
        log.info("re-cut: %s", " ".join(argv))
        run(vendor, argv)


class Recuts:
    """One node's re-cut orders: what was tried (card -> layout), and the failures to report."""

    def __init__(self, chip_of: ChipOf, run: RunTool = run_tool) -> None:
        self.chip_of = chip_of
        self.run = run
        self.tried: dict[str, tuple[str, ...]] = {}
        self.failures: list[RecutFailure] = []

    def act(
        self, orders: Sequence[CardRecut], devices: Sequence[DeviceInfo], held: set[str]
    ) -> None:
        """Carry out the orders not tried yet; forget the tries of orders the server dropped."""
        asked = {o.card: tuple(o.layout) for o in orders}
        self.tried = {c: w for c, w in self.tried.items() if asked.get(c) == w}
        for order in orders:
            if self.tried.get(order.card) == tuple(order.layout):
                continue
            self.tried[order.card] = tuple(order.layout)
            why = recut_card(order, devices, held, self.chip_of, self.run)
            if why is not None:
                log.warning("re-cut of card %s failed: %s", order.card, why)
                self.failures.append(RecutFailure(card=order.card, reason=why[:500]))

    def sent(self, reported: Sequence[RecutFailure]) -> None:
        """The server answered a heartbeat carrying ``reported``."""
        self.failures = [f for f in self.failures if f not in reported]
