"""The simulator's energy meter: a card holding work draws idle + (busy - idle) x share, an idle
one its sleep power, and a node idle long enough is powered down (nothing drawn)."""

from __future__ import annotations

import pytest

from xpupool.catalog.power import Override, PowerModel
from xpupool.model import Allocation, Device, Node
from xpupool.model.allocation import DeviceShare
from xpupool.sim.energy import EnergyMeter

POWER = PowerModel(overrides=(Override("CARD", idle_watts=50.0, busy_watts=250.0),))
NODE = Node(
    "n", 8000, 8192, tuple(Device(f"g{j}", "nvidia", "CARD", 1024, index=j) for j in (0, 1))
)


def _alloc(uuid: str, permille: int) -> Allocation:
    return Allocation(1, "t", 0, "n", 0, 0, 0, (DeviceShare(uuid, 0, 0, permille),))


def test_busy_then_idle_then_powered_down() -> None:
    meter = EnergyMeter()
    meter(0, 0, [_alloc("g0", 1000)])  # card 0 whole, 0..100 s
    meter(20, 1, [_alloc("g1", 500)])  # half of card 1, 20..60 s
    meter(60, 1, None)
    meter(100, 0, None)
    got = meter.energy([NODE], POWER, sleep_fraction=0.2, node_off_after_s=50.0, end=300)
    busy = 250.0 * 100 + (50.0 + 200.0 * 0.5) * 40
    idle_awake = 10.0 * (20 + 40)  # card 1 asleep (20 % of 50 W) around its run
    idle_node = 2 * 10.0 * 50  # both asleep for 50 s, then the node is powered down
    assert got.busy_j == pytest.approx(busy)
    assert got.idle_j == pytest.approx(idle_awake + idle_node)
    assert got.off_card_s == pytest.approx(2 * 150)
