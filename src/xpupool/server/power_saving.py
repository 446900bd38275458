"""Which cards could sleep and which nodes could be powered down now (issue 55): reported, never
acted on.

A card *could sleep* when it is usable and holds nothing (no memory, compute or task slot of any
replica): what it draws idle (the one power model, ``catalog/power.py``) is what putting it in a
low-power state could save, where the vendor allows one without a reset and the operator enables it
(xpupool changes no card's power state). A node *could be powered down* once none of its cards
and none of its CPU has been held for ``power_down_after_s`` (Slurm's SuspendTime, 10 minutes by
default): the time is counted from when a look (``GET /v1/fleet/power`` or a ``/metrics``
scrape) first found it idle, so it is at most one look late, and a plane that starts again counts
from its first look.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from xpupool.catalog.power import PowerModel
from xpupool.engine.state import ClusterState

DEFAULT_POWER_DOWN_AFTER_S = 600.0


@dataclass(frozen=True, slots=True)
class SleepyCard:
    uuid: str
    node: str
    model: str
    idle_watts: float


@dataclass(frozen=True, slots=True)
class IdleNode:
    node: str
    idle_since: float  # the plane's clock (Unix time)


@dataclass(frozen=True, slots=True)
class PowerLook:
    """One look: the cards that could sleep, the nodes idle long enough to power down, and the
    watts the sleeping cards draw idle (0 for models without an idle figure)."""

    cards: tuple[SleepyCard, ...]
    nodes: tuple[IdleNode, ...]
    idle_watts: float


def held_cards(state: ClusterState) -> npt.NDArray[np.bool_]:
    """``[n_nodes, n_dev]``: the cards some replica holds memory, compute or a task slot of."""
    return (
        (state.dev_mem_free < state.dev_mem_commit)
        | (state.dev_core_free < state.dev_core_commit)
        | (state.dev_task_free < state.dev_task_total)
    )


class PowerSaving:
    """When each node was first seen idle. Not thread-safe: looked under the plane's lock."""

    def __init__(self, power_down_after_s: float = DEFAULT_POWER_DOWN_AFTER_S) -> None:
        self.power_down_after_s = power_down_after_s
        self._idle_since: dict[str, float] = {}

    def look(self, state: ClusterState, now: float, power: PowerModel) -> PowerLook:
        held = held_cards(state)
        asleep = state.dev_present & state.dev_usable & ~held
        node_idle = ~(held & state.dev_present).any(axis=1) & (
            state.node_cpu_free >= state.node_cpu_total
        )
        cards: list[SleepyCard] = []
        for n, col in zip(*np.nonzero(asleep), strict=True):
            dev = state.nodes[n].devices[col]
            watts = power.figures(dev.model).idle_watts
            cards.append(SleepyCard(dev.uuid, state.node_names[n], dev.model, watts))
        seen: dict[str, float] = {}
        nodes: list[IdleNode] = []
        for n in np.flatnonzero(node_idle):
            name = state.node_names[n]
            since = seen[name] = self._idle_since.get(name, now)
            if now - since >= self.power_down_after_s:
                nodes.append(IdleNode(name, since))
        self._idle_since = seen
        return PowerLook(tuple(cards), tuple(nodes), sum(c.idle_watts for c in cards))
