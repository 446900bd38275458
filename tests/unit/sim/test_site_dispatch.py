"""Sites in a timed replay (``sim/site_dispatch.py``): two one-card sites and a dataset at one,
where every wait and every GiB moved can be worked out by hand; and a site split into link
domains, where an elastic task's gang stays in one."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from xpupool.engine import Engine
from xpupool.engine.fragmentation import TargetWorkload
from xpupool.model import Device, Node
from xpupool.model.allocation import Allocation
from xpupool.model.errors import RequestError
from xpupool.sim.alibaba import TraceTask, to_request
from xpupool.sim.elastic_tasks import ElasticTasks
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


def card(name: str, model: str) -> Node:
    return Node(name, 8000, 8192, (Device(f"{name}-g", "nvidia", model, 16384),))


# site "split": p0 (P100), t1, t2, t3 (T4) in domains d0 = {p0, t1}, d1 = {t2, t3}; "other": v0
ZONED = [card("p0", "P100"), *(card(f"t{i}", "T4") for i in (1, 2, 3)), card("v0", "V100M16")]


def zoned_replay(cards: int, per_domain: int | None) -> tuple[dict[str, list[str]], int | None]:
    """Task x (one P100, on p0 in d0) from 0 s, then an elastic task of ``cards`` T4s (its
    minimum half of them, a gang) at 1 s: the nodes of each task's first run, and how many
    replicas the elastic task grew by."""
    split: dict[str, object] = {"name": "split", "models": ["P100", "T4"]}
    if per_domain is not None:
        split["nodes_per_domain"] = per_domain
    config = parse_sim_sites({"sites": [split, {"name": "other"}]})
    nodes = config.split(ZONED)
    tasks = [
        TraceTask("x", 1000, 0, 1, 1000, ("P100",), 0, 1000, 0),
        TraceTask("y", 1000, 0, cards, 1000, ("T4",), 1, 101, 1),
    ]
    workload = TargetWorkload.from_requests(to_request(t) for t in tasks)
    runs: dict[str, list[str]] = {}

    def record(now: int, task: int, allocations: Sequence[Allocation] | None) -> None:
        if allocations is not None and tasks[task].name not in runs:
            runs[tasks[task].name] = sorted(a.node for a in allocations)

    def dispatch(engine: Engine) -> Dispatch:
        return Dispatch(engine, config, "xpupool", workload, 0)

    result = timed_replay(
        nodes, tasks, "bestfit", 0, workload, dispatch=dispatch, on_run=record,
        elastic=ElasticTasks(1.0),
    )  # fmt: skip
    return runs, result.grows


def test_a_site_of_nodes_per_domain_deals_its_nodes_into_domains_in_order() -> None:
    config = parse_sim_sites(
        {"sites": [{"name": "split", "models": ["P100", "T4"], "nodes_per_domain": 2}, {"name": "other"}]}
    )  # fmt: skip
    got = [(n.name, n.site, n.link_domain) for n in config.split(ZONED)]
    assert got == [
        ("p0", "split", "d0"), ("t1", "split", "d0"), ("t2", "split", "d1"),
        ("t3", "split", "d1"), ("v0", "other", None),
    ]  # fmt: skip


def test_an_elastic_tasks_gang_starts_and_grows_within_one_link_domain() -> None:
    """The free T4s are t1 (d0, beside x) and t2, t3 (d1): the gang of two goes to d1, and does
    not grow into t1 (without domains it does)."""
    runs, grows = zoned_replay(4, per_domain=2)
    assert runs["y"] == ["t2", "t3"] and grows == 0
    assert zoned_replay(4, per_domain=None)[1] == 1


def test_a_gang_no_domain_holds_does_not_start_though_the_site_has_the_cards() -> None:
    """Three T4s as one gang: the site has them free (and without domains it runs on them),
    no domain has three T4s."""
    assert zoned_replay(6, per_domain=None)[0]["y"] == ["t1", "t2", "t3"]
    assert "y" not in zoned_replay(6, per_domain=2)[0]


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
        (
            {"sites": [{"name": "a", "nodes_per_domain": 0}, {"name": "b"}]},
            "sites[0].nodes_per_domain",
        ),
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
