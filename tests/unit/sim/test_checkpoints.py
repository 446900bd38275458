"""The timed replay's checkpoint model: a victim keeps what it saved, and the rest is counted lost."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from xpupool.client.queue_file import queue_config_from_dict
from xpupool.engine.fragmentation import TargetWorkload
from xpupool.model import Device, Node
from xpupool.sim.alibaba import TraceTask, to_request
from xpupool.sim.checkpoints import NEVER, CheckpointModel, saved_s
from xpupool.sim.timed_replay import timed_replay

CONFIG = {
    "queues": [{"name": "q", "tenant": "q", "max_priority": 10}],
    "assign": [{"qos": "LS", "queue": "q", "priority": 10}, {"queue": "q"}],
}


def node(gpus: int) -> Node:
    return Node(
        "n", 64000, 65536, tuple(Device(f"g{i}", "nvidia", "T4", 15360) for i in range(gpus))
    )


def job(name: str, arrive: int, run: int, qos: str = "BE", cards: int = 1) -> TraceTask:
    return TraceTask(name, 1000, 0, cards, 1000, (), arrive, arrive + run, arrive, qos)


def replay(gpus: int, tasks: list[TraceTask], model: CheckpointModel | None, **kw: Any) -> Any:
    workload = TargetWorkload.from_requests(to_request(t) for t in tasks)
    queues = queue_config_from_dict(CONFIG)
    return timed_replay(
        [node(gpus)], tasks, "bestfit", 0, workload, queues=queues, checkpoints=model, **kw
    )


def test_intervals_are_seeded_and_a_share_never_checkpoints() -> None:
    model = CheckpointModel(7)
    a, b = model.intervals_s(2000), model.intervals_s(2000)
    assert np.array_equal(a, b)
    never = np.isinf(a)
    assert 0.2 < never.mean() < 0.3
    assert a[~never].min() >= 300 and a[~never].max() <= 7200
    assert saved_s(250.0, 100.0) == 200.0 and saved_s(250.0, NEVER) == 0.0


def test_a_victim_resumes_from_its_checkpoint_and_only_the_rest_is_lost() -> None:
    tasks = [job("a", 0, 1000, cards=2), job("c", 250, 10, "LS", cards=2)]
    every_100 = CheckpointModel(
        0, never_share=0.0, min_interval_min=100 / 60, max_interval_min=100 / 60
    )
    result = replay(2, tasks, every_100)
    # a saved 200 s by 250; it runs again at 260 for the 800 s left: ends at 1060
    assert result.jct_s.tolist() == [1060.0, 10.0]
    assert math.isclose(result.gpu_hours_lost, 2 * 50 / 3600)
    none = replay(2, tasks, None)  # no checkpoints: everything a ran is lost, as before
    assert none.jct_s.tolist() == [1260.0, 10.0]
    assert math.isclose(none.gpu_hours_lost, 2 * 250 / 3600)
    assert none.summary()["gpu_hours_lost"] == round(2 * 250 / 3600, 3)


def test_the_aware_planner_takes_the_victim_that_loses_least() -> None:
    # a (never checkpoints) and b (every 240 s) hold a card each since 0; c needs one at 250
    tasks = [job("a", 0, 1000), job("b", 0, 1000), job("c", 250, 10, "LS")]
    every = {"a": NEVER, "b": 240.0, "c": NEVER}

    class Fixed(CheckpointModel):
        def intervals_s(self, n: int) -> np.ndarray:
            return np.array([every[t.name] for t in tasks])

    aware = replay(2, tasks, Fixed(), checkpoint_aware=True)
    assert math.isclose(aware.gpu_hours_lost, 10 / 3600)  # b: 10 s since its checkpoint
    assert aware.jct_s.tolist()[0] == 1000.0  # a kept running
