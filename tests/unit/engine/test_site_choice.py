"""Choosing a site (issue 51 part 2): one what-if per site, ranked by preference, then expected
start delay (wait + transfer), transfer, fragmentation, load. The rule "a job goes to a far site
only when the wait it saves is larger than the transfer" is tested on both sides of the
inequality and at equality."""

from __future__ import annotations

import pytest

from xpupool.engine import ClusterState, Engine
from xpupool.engine.fragmentation import TargetWorkload
from xpupool.engine.site_choice import (
    NO_HISTORY_RUNTIME_S,
    RunTimes,
    SiteChooser,
    expected_wait_s,
)
from xpupool.model import Node, Request
from xpupool.model.errors import RequestError
from xpupool.model.request_model import RequestModel
from xpupool.model.site_network import MIB, parse_network

from factories import T4, gpu_node

GBIT = 1e9


def t4(name: str, site: str, count: int) -> Node:
    return gpu_node(name, site=site, model=T4, memory_mib=15360, count=count, group_size=0)


def ask(text: str) -> Request:
    return RequestModel.model_validate(text).to_request()


def network(size: str = "400Gi", gbps: float = 25.0) -> object:
    return {
        "links": [{"sites": ["near", "far"], "bandwidth_gbps": gbps}],
        "datasets": {"imagenet": {"size": size, "sites": ["near"]}},
    }


def transfer_s(size_gib: int, gbps: float) -> float:
    return size_gib * 1024 * MIB * 8 / (gbps * GBIT)


def busy_near(engine: Engine) -> None:
    """Fill the near site's 4 cards so that a 1-card job waits there."""
    assert engine.place(ask("T4:4 site=near")).ok


def chooser(runtime_s: float, runs: int = 1, **kw: object) -> tuple[Engine, SiteChooser]:
    engine = Engine(ClusterState([t4("n-0", "near", 4), t4("f-0", "far", 4)]), "binpack")
    times = RunTimes()
    for _ in range(runs):
        times.record(ask("T4 data=imagenet"), runtime_s)
    net = parse_network(kw.get("net", network()))
    return engine, SiteChooser(engine, net, times)


def test_transfer_is_size_over_the_bottleneck_of_the_widest_path() -> None:
    net = parse_network(
        {
            "links": [
                {"sites": ["a", "b"], "bandwidth_gbps": 25},
                {"sites": ["b", "c"], "bandwidth_gbps": 10},
                {"sites": ["a", "c"], "bandwidth_gbps": 5},
            ],
            "datasets": {"imagenet": {"size": "400Gi", "sites": ["a"]}},
        }
    )
    assert net.transfer("imagenet", "a").seconds == 0.0
    assert net.transfer("imagenet", "b").seconds == pytest.approx(transfer_s(400, 25))
    via_b = net.transfer("imagenet", "c")  # a-b-c bottleneck 10 beats the direct 5
    assert via_b.bandwidth_gbps == 10
    assert via_b.seconds == pytest.approx(transfer_s(400, 10))
    assert net.transfer("imagenet", "nowhere").source is None


def test_the_job_goes_far_when_the_wait_it_saves_exceeds_the_transfer() -> None:
    t = transfer_s(400, 25)  # about 137 s
    engine, choose = chooser(runtime_s=t + 1)  # near: position 1 x (t + 1) s
    busy_near(engine)
    choice = choose.choose(ask("T4 data=imagenet"))
    assert choice is not None
    assert choice.chosen.site == "far"
    assert choice.chosen.transfer_s == pytest.approx(t)
    assert choice.runner_up is not None and choice.runner_up.site == "near"
    assert choice.runner_up.wait_s == pytest.approx(t + 1)
    assert engine.state.live and len(engine.state.live) == 1  # the what-ifs left nothing


def test_the_job_waits_near_its_data_when_the_transfer_exceeds_the_wait() -> None:
    t = transfer_s(400, 25)
    engine, choose = chooser(runtime_s=t - 1)
    busy_near(engine)
    choice = choose.choose(ask("T4 data=imagenet"))
    assert choice is not None and choice.chosen.site == "near"
    assert not choice.chosen.fits_now and choice.chosen.position == 1


def test_at_equal_wait_and_transfer_the_job_stays_near_its_data() -> None:
    """Equality is not "larger": the far site must save strictly more than the transfer."""
    gbps = 8 * 1024 * MIB / GBIT  # 1 GiB in exactly 1 s: whole seconds, no rounding
    engine, choose = chooser(runtime_s=400.0, net=network("400Gi", gbps))
    busy_near(engine)
    choice = choose.choose(ask("T4 data=imagenet"))
    assert choice is not None
    assert choice.chosen.transfer_s == 0.0 and choice.chosen.wait_s == 400.0
    assert choice.runner_up is not None and choice.runner_up.transfer_s == 400.0
    assert choice.chosen.site == "near"


def test_the_wait_is_the_queue_position_times_the_mean_run_time() -> None:
    engine, choose = chooser(runtime_s=10.0, runs=3)
    busy_near(engine)
    choice = choose.choose(ask("T4"), queued={"near": 2})
    assert choice is not None
    near = next(o for o in choice.options if o.site == "near")
    assert near.position == 3
    assert near.wait_s == expected_wait_s(3, 10.0) == 30.0
    assert near.runtime_from == "mean of 3 runs of its shape"
    assert choice.chosen.site == "far"  # fits now: no wait, no dataset


def test_without_history_max_runtime_then_the_default_is_counted() -> None:
    times = RunTimes()
    assert times.mean_s(ask("T4"), 120.0) == (120.0, "its max_runtime")
    assert times.mean_s(ask("T4")) == (NO_HISTORY_RUNTIME_S, "no history of its shape")
    times.record(ask("T4"), 50.0)
    times.record(ask("T4:2"), 500.0)  # another shape: not counted for T4
    assert times.mean_s(ask("T4"), 120.0) == (50.0, "mean of 1 runs of its shape")


def test_preference_wins_over_delay() -> None:
    engine, choose = chooser(runtime_s=1e6)
    busy_near(engine)
    choice = choose.choose(ask("T4 prefer-site=near"))
    assert choice is not None and choice.chosen.site == "near" and choice.chosen.preferred


def test_with_all_else_equal_the_less_loaded_site_wins() -> None:
    engine, choose = chooser(runtime_s=1.0)
    assert engine.place(ask("T4:2 site=near")).ok
    choice = choose.choose(ask("T4"))
    assert choice is not None and choice.chosen.site == "far"
    assert choice.runner_up is not None and choice.runner_up.load == pytest.approx(0.5)


def test_fragmentation_the_placement_leaves_is_weighed_before_load() -> None:
    """A 2-card job on a site with 2 free cards leaves nothing stranded for a 2-card workload; on
    a site with 3 free cards it strands one."""
    state = ClusterState([t4("a-0", "a", 4), t4("b-0", "b", 4)])
    engine = Engine(state, "binpack")
    assert engine.place(ask("T4:2 site=a")).ok
    assert engine.place(ask("T4 site=b")).ok
    workload = TargetWorkload.from_requests([ask("T4:2")])
    choice = SiteChooser(engine, workload=workload).choose(ask("T4:2"))
    assert choice is not None
    assert choice.chosen.site == "a"  # more loaded, but leaves no fragment
    assert choice.chosen.fragment_milli < choice.options[1].fragment_milli


def test_a_site_that_never_holds_it_or_the_data_cannot_reach_is_left_out() -> None:
    state = ClusterState([t4("n-0", "near", 4), t4("f-0", "far", 4), t4("x-0", "island", 8)])
    engine = Engine(state, "binpack")
    choose = SiteChooser(engine, parse_network(network()))
    choice = choose.choose(ask("T4 data=imagenet"))
    assert choice is not None
    assert [o.site for o in choice.options] == ["near", "far"]
    choice = choose.choose(ask("T4:8"))
    assert choice is not None and [o.site for o in choice.options] == ["island"]


def test_an_unknown_dataset_is_refused_naming_the_known_ones() -> None:
    _, choose = chooser(runtime_s=1.0)
    with pytest.raises(RequestError) as caught:
        choose.choose(ask("T4 data=cifar"))
    assert caught.value.field == "data"
    assert "imagenet" in caught.value.reason


def test_no_choice_when_one_site_is_open() -> None:
    _, choose = chooser(runtime_s=1.0)
    assert choose.choose(ask("T4 site=near")) is None
    assert not choose.applies(ask("T4 site=far"))


def test_the_events_give_the_choice_and_runner_up_with_numbers() -> None:
    engine, choose = chooser(runtime_s=1000.0)
    busy_near(engine)
    choice = choose.choose(ask("T4 data=imagenet"))
    assert choice is not None
    chosen, runner = choice.events()
    assert chosen.startswith("chose site far: fits on 1 node, data 137 s for 400 GiB at 25 Gbit/s")
    assert runner.startswith("runner-up site near: queued at 1 for its shape, wait 1000 s")


def test_a_gang_is_tried_within_each_site() -> None:
    state = ClusterState([t4("n-0", "near", 4), t4("f-0", "far", 4), t4("f-1", "far", 4)])
    engine = Engine(state, "binpack")
    choice = SiteChooser(engine).choose(ask("T4:2 replicas=4 gang"))
    assert choice is not None
    assert [o.site for o in choice.options] == ["far"]  # near holds 2 replicas, never 4
    assert choice.chosen.nodes == 2
