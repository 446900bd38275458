"""What ``UsageMeter.flush`` reads of a plane, for the meter's property tests: a clock the test
moves, the held jobs it sets, and each card's power from ``watts`` (one figure for every card by
default)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TypeVar

from sqlalchemy import Engine

from xpupool.catalog.power import PowerModel
from xpupool.server.plane import HeldJob
from xpupool.server.schemas.agent_protocol import DeviceMetrics

T = TypeVar("T")


class PlaneStandIn:
    def __init__(self, db: Engine, watts: Callable[[str], float]) -> None:
        self.db = db
        self.now = 0.0
        self.held: dict[int, HeldJob] = {}
        self.watts = watts

    def clock(self) -> float:
        return self.now

    def read(self, look: Callable[[], T]) -> T:
        return look()

    @property
    def held_jobs(self) -> Mapping[int, HeldJob]:
        return self.held

    def device_metrics(self, uuid: str) -> DeviceMetrics:
        return DeviceMetrics(uuid=uuid, power_w=self.watts(uuid))

    def idle_power_readings(self) -> list[tuple[str, float]]:
        """No card here is read idle: the sums are of held cards (``usage/idle_power.py``)."""
        return []

    def use_power(self, power: PowerModel) -> None:
        """The power model the meter counts with, handed on: no engine here to take it."""
