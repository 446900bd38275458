"""Timed replay through the server's scheduling cycle: quotas, fair share and preemption, by hand.

Every task is one whole GPU; waits and completion times can be worked out on paper.
"""

from __future__ import annotations

from typing import Any

import pytest

from xpupool.client.queue_file import queue_config_from_dict
from xpupool.engine.fragmentation import TargetWorkload
from xpupool.model import Device, Node, RequestError
from xpupool.sim.alibaba import TraceTask, to_request
from xpupool.sim.timed_replay import timed_replay


def node(gpus: int) -> Node:
    devices = tuple(Device(f"g{i}", "nvidia", "T4", 15360) for i in range(gpus))
    return Node("n", 64000, 65536, devices)


def job(name: str, arrive: int, run: int, qos: str = "BE") -> TraceTask:
    return TraceTask(name, 1000, 0, 1, 1000, (), arrive, arrive + run, arrive, qos)


def replay(gpus: int, tasks: list[TraceTask], config: dict[str, Any]) -> Any:
    workload = TargetWorkload.from_requests(to_request(t) for t in tasks)
    queues = queue_config_from_dict(config)
    return timed_replay([node(gpus)], tasks, "bestfit", 0, workload, queues=queues)


def queue(name: str, tenant: str | None = None, **extra: Any) -> dict[str, Any]:
    return {"name": name, "tenant": tenant or name, **extra}


def test_a_higher_priority_task_preempts_and_the_victim_runs_again_from_the_start() -> None:
    config = {
        "queues": [queue("prod", max_priority=10), queue("batch")],
        "assign": [{"qos": "LS", "queue": "prod", "priority": 10}, {"queue": "batch"}],
    }
    result = replay(1, [job("a", 0, 10), job("c", 2, 5, "LS")], config)
    # c takes the card at 2 and runs to 7; a, stopped at 2, starts again at 7 and ends at 17
    assert result.wait_s.tolist() == [7.0, 0.0]
    assert result.jct_s.tolist() == [17.0, 5.0]
    assert result.summary()["preemptions"] == 1
    assert result.wait_by_queue() == {"batch": 7.0, "prod": 0.0}


def test_a_queue_that_never_preempts_waits_its_turn() -> None:
    config = {
        "queues": [queue("prod", max_priority=10, preemption="never"), queue("batch")],
        "assign": [{"qos": "LS", "queue": "prod", "priority": 10}, {"queue": "batch"}],
    }
    result = replay(1, [job("a", 0, 10), job("c", 2, 5, "LS")], config)
    assert result.wait_s.tolist() == [0.0, 8.0]
    assert result.summary()["preemptions"] == 0


def test_quota_holds_work_back_while_cards_are_free() -> None:
    quota = [{"flavor": "*", "resource": "devices", "nominal": 1}]
    config = {"queues": [queue("q", quotas=quota)], "assign": [{"queue": "q"}]}
    result = replay(2, [job("a", 0, 10), job("b", 1, 10)], config)
    assert result.wait_s.tolist() == [0.0, 9.0]  # the second card stays idle: quota 1


def test_fair_share_serves_the_tenant_holding_less_first() -> None:
    config = {
        "queues": [queue("x"), queue("y")],
        "assign": [{"qos": "LS", "queue": "y"}, {"queue": "x"}],
    }
    # x holds one card to 20, x's b arrives at 1, y's c at 2; at 10 the other card frees:
    # arrival order says b, fair share says c (y holds nothing, x holds half the cluster)
    tasks = [job("a", 0, 20), job("w", 0, 10, "LS"), job("b", 1, 5), job("c", 2, 5, "LS")]
    result = replay(2, tasks, config)
    assert result.wait_s.tolist() == [0.0, 0.0, 14.0, 8.0]


@pytest.mark.parametrize(
    ("config", "field", "reason"),
    [
        ({"queues": [queue("q")], "assign": [{"queue": "p"}]}, "assign[0].queue", "no such queue"),
        (
            {"queues": [queue("q")], "assign": [{"queue": "q", "priority": 5}]},
            "assign[0].priority",
            "above queue q's max_priority 0",
        ),
        (
            {"queues": [queue("q", quotas=[{"flavor": "*", "resource": "gpus", "nominal": 1}])]},
            "queues[0].quotas[0].resource",
            "",
        ),
        ({"queues": [queue("q"), queue("q")], "assign": [{"queue": "q"}]}, "queues[1].name", ""),
        ({"queues": [queue("q")], "assign": [{"queue": "q", "tier": 1}]}, "assign[0].tier", ""),
    ],
)
def test_bad_configurations_name_the_field(config: dict[str, Any], field: str, reason: str) -> None:
    with pytest.raises(RequestError) as caught:
        queue_config_from_dict(config, "queues.yaml")
    assert caught.value.field == f"queues.yaml: {field}"
    assert reason in caught.value.reason


def test_a_task_no_rule_matches_is_an_error() -> None:
    config = {"queues": [queue("q")], "assign": [{"qos": "LS", "queue": "q"}]}
    with pytest.raises(RequestError, match="no rule matches"):
        replay(1, [job("a", 0, 10)], config)


def test_the_room_a_preemptor_freed_is_its_own_not_a_lower_task_waiting_behind_it() -> None:
    """The victim stops at once in the replay, so a lower-priority task tried later in the same
    pass (b, new at that instant) could take the freed card; the preemptor then preempted it in
    the next pass, the victim took the card again, and so on at one instant for ever."""
    config = {
        "queues": [queue("q", max_priority=10)],
        "assign": [{"qos": "LS", "queue": "q", "priority": 10}, {"queue": "q"}],
    }
    tasks = [job("a", 0, 100), job("b", 5, 100), job("c", 5, 10, "LS")]
    passes: dict[int, int] = {}

    def bounded(now: int, tried: list[int]) -> None:
        passes[now] = passes.get(now, 0) + 1
        assert passes[now] < 50, f"{passes[now]} passes at {now}: tried {tried}"

    workload = TargetWorkload.from_requests(to_request(t) for t in tasks)
    queues = queue_config_from_dict(config)
    result = timed_replay([node(1)], tasks, "bestfit", 0, workload, queues=queues, on_pass=bounded)
    # c takes the card at 5 and runs to 15; a (stopped, first in line) runs 15..115, b 115..215
    assert result.wait_s.tolist() == [15.0, 110.0, 0.0]
    assert result.summary()["preemptions"] == 1
