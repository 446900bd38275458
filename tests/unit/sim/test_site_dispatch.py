"""Sites in a timed replay (``sim/site_dispatch.py``): two one-card sites and a dataset at one,
where every wait and every GiB moved can be worked out by hand."""

from __future__ import annotations

import pytest

from xpupool.engine import Engine
from xpupool.engine.fragmentation import TargetWorkload
from xpupool.model import Device, Node
from xpupool.model.errors import RequestError
from xpupool.sim.alibaba import TraceTask, to_request
from xpupool.sim.site_dispatch import Dispatch, SimSites, parse_sim_sites
from xpupool.sim.timed_replay import TimedResult, timed_replay

GIB_PER_S = 8 * 1024**3 / 1e9  # Gbit/s that move exactly 1 GiB a second

NODES = [Node(f"n{i}", 8000, 8192, (Device(f"g{i}", "nvidia", "T4", 15360),)) for i in (0, 1)]


def job(name: str, arrive: int, run: int) -> TraceTask:
    return TraceTask(name, 1000, 0, 1, 1000, (), arrive, arrive + run, arrive)


TASKS = [job("a", 0, 100), job("b", 1, 100)]
WORKLOAD = TargetWorkload.from_requests(to_request(t) for t in TASKS)


def sites(size_gib: int) -> SimSites:
    return parse_sim_sites(
        {
            "sites": [{"name": "near", "models": ["T4"]}, {"name": "far", "models": ["T4"]}],
            "links": [{"sites": ["near", "far"], "bandwidth_gbps": GIB_PER_S}],
            "datasets": {"imagenet": {"size": f"{size_gib}Gi", "sites": ["near"]}},
            "data": {"share": 1.0},
        }
    )


def replay(size_gib: int, rule: str) -> TimedResult:
    config = sites(size_gib)
    nodes = config.split(NODES)
    assert [n.site for n in nodes] == ["near", "far"]  # one T4 model dealt in turn

    def dispatch(engine: Engine) -> Dispatch:
        data = config.datasets_of(len(TASKS), 0)
        return Dispatch(engine, config, rule, WORKLOAD, 0, data)

    return timed_replay(nodes, TASKS, "bestfit", 0, WORKLOAD, dispatch=dispatch)


def test_the_second_task_goes_far_when_its_data_arrives_before_the_near_site_frees() -> None:
    """b at 1 s: near is busy until 100 s (no history of its shape: 1 h counted), far is free
    and its data takes 5 s: it starts at 6 s, a wait of 5 s, and 5 GiB move."""
    result = replay(5, "xpupool")
    assert result.wait_s.tolist() == [0.0, 5.0]
    assert result.summary()["gib_moved"] == 5.0


def test_the_second_task_waits_near_when_the_transfer_is_longer_than_the_wait() -> None:
    result = replay(5000, "xpupool")  # 5000 s of transfer against 3600 s of expected wait
    assert result.wait_s.tolist() == [0.0, 99.0]
    assert result.summary()["gib_moved"] == 0.0


def test_least_loaded_sends_it_far_whatever_the_transfer() -> None:
    result = replay(5000, "least-loaded")
    assert result.wait_s.tolist() == [0.0, 5000.0]
    assert result.summary()["gib_moved"] == 5000.0


def test_the_runs_are_the_same_for_each_rule_without_sites() -> None:
    plain = timed_replay(NODES, TASKS, "bestfit", 0, WORKLOAD)
    assert plain.wait_s.tolist() == [0.0, 0.0]
    assert "gib_moved" not in plain.summary()


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"sites": [{"name": "a"}]}, "sites"),
        ({"sites": [{"name": "a"}, {"name": "a"}]}, "sites[1].name"),
        (
            {
                "sites": [{"name": "a"}, {"name": "b"}],
                "datasets": {"x": {"size": "1Gi", "sites": ["c"]}},
            },
            "datasets.x.sites",
        ),
        ({"sites": [{"name": "a"}, {"name": "b"}], "data": {"share": 2}}, "data.share"),
    ],
)
def test_a_bad_sites_file_is_refused_naming_the_field(data: object, field: str) -> None:
    with pytest.raises(RequestError) as caught:
        parse_sim_sites(data)
    assert caught.value.field == field


def test_an_unknown_rule_is_refused() -> None:
    engine = Engine.__new__(Engine)  # the rule is checked before the engine is used
    with pytest.raises(RequestError) as caught:
        Dispatch(engine, sites(1), "nearest", None, 0)
    assert "least-loaded" in caught.value.reason
