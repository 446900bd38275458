"""The energy scorer: a job goes where it adds least power at its best speed; onto cards and
nodes already awake, so that whole cards and nodes stay idle."""

from __future__ import annotations

from xpupool.catalog.power import Override, PowerModel
from xpupool.engine import ClusterState, Engine
from xpupool.engine.profile import make_profile
from xpupool.engine.scorers.energy import EnergyArgs
from xpupool.model import Device, Node, Request
from xpupool.model.request_model import request_from_dict

FIGURES = (Override("HOT", idle_watts=50.0, busy_watts=400.0), Override("COOL", 10.0, 70.0))


def _fleet(models: tuple[str, ...] = ("HOT", "COOL"), per_model: int = 2) -> list[Node]:
    return [
        Node(
            f"{m}-{i}",
            64_000,
            256 * 1024,
            tuple(Device(f"{m}-{i}-g{j}", "nvidia", m, 16_384, index=j) for j in range(4)),
        )
        for m in models
        for i in range(per_model)
    ]


def _engine(nodes: list[Node], sleep_fraction: float = 0.3) -> Engine:
    args = EnergyArgs(overrides=FIGURES, sleep_fraction=sleep_fraction)
    weights = {"energy": 10.0, "binpack": 1.0, "topology": 1.0}
    profile = make_profile("energy", weights, "binpack", args={"energy": args})
    return Engine(ClusterState(nodes, seed=0), profile, seed=0)


def _node_of(engine: Engine, req: Request) -> str:
    placement = engine.place(req)
    assert placement.ok
    return placement.allocations[0].node


def test_a_job_that_runs_as_fast_anywhere_takes_the_low_power_card() -> None:
    engine = _engine(_fleet())
    assert _node_of(engine, request_from_dict("any")).startswith("COOL")


def test_at_equal_or_better_completion_only() -> None:
    """A job four times as fast on the power-hungry card goes there: it would finish later on the
    cool one (and use more energy there too)."""
    engine = _engine(_fleet())
    assert _node_of(engine, request_from_dict("any speed=HOT:4,COOL:1")).startswith("HOT")
    # equal speeds: the cool card
    assert _node_of(engine, request_from_dict("any speed=HOT:1,COOL:1")).startswith("COOL")


def test_work_consolidates_on_cards_and_nodes_already_awake() -> None:
    """Shares go to the card already holding one, and whole cards to the node already awake:
    the other node and the other cards stay idle (could sleep, or be powered down)."""
    engine = _engine(_fleet(("COOL",), per_model=3))
    first = engine.place(request_from_dict("any cores=30%"))
    assert first.ok
    card = first.allocations[0].devices[0].uuid
    second = engine.place(request_from_dict("any cores=30%"))
    assert second.ok and second.allocations[0].devices[0].uuid == card
    whole = _node_of(engine, request_from_dict("any"))
    assert whole == first.allocations[0].node


def test_with_sleep_equal_to_idle_a_node_still_prefers_an_awake_node() -> None:
    """Without a low-power state an idle card costs its idle power wherever it is; a powered-down
    node costs nothing, so waking one is still avoided."""
    engine = _engine(_fleet(("COOL",), per_model=3), sleep_fraction=1.0)
    first = _node_of(engine, request_from_dict("any"))
    assert _node_of(engine, request_from_dict("any")) == first


def test_the_builtin_profile_reads_the_catalogs_figures() -> None:
    """``policy=energy`` as shipped: a T4 (70 W board power) over an A100 (400 W) for a job that
    names no speeds; the catalog's figures, no operator's."""
    nodes = [
        Node(f"{m}-0", 64_000, 256 * 1024, (Device(f"{m}-g0", "nvidia", m, 16_384, index=0),))
        for m in ("NVIDIA A100-SXM4-80GB", "NVIDIA T4")
    ]
    engine = Engine(ClusterState(nodes, seed=0), "energy", seed=0)
    assert _node_of(engine, request_from_dict("any")) == "NVIDIA T4-0"


def test_the_fronts_power_model_and_its_measured_idle_watts_move_the_choice() -> None:
    """The engine's power model (``Engine.power``, the plane's) is read in its order. Whole cards
    on empty four-card nodes: waking one adds busy - idle + 4 x idle (no low-power state). With
    no idle figure the 250 W COOL card adds less than the 300 W HOT one; measured idling at 30 W,
    COOL adds 250 + 3 x 30 = 340 W, and the job goes to HOT; an operator's idle figure for COOL
    comes before the measured one."""
    nodes = _fleet(per_model=1)
    profile = make_profile("energy-only", {"energy": 1.0}, "binpack")
    busy = (Override("HOT", busy_watts=300.0), Override("COOL", busy_watts=250.0))
    power = PowerModel(overrides=busy)
    engine = Engine(ClusterState(nodes, seed=0), profile, seed=0, power=power)

    def node_of_one() -> str:
        placement = engine.place(request_from_dict("any"))
        assert placement.ok
        engine.release(placement.allocations[0])
        return placement.allocations[0].node

    assert node_of_one() == "COOL-0"
    measured = power.with_overrides()
    measured.learn_idle({"COOL": 30.0})
    engine.power = measured  # the front hands over a new model as it learns
    assert node_of_one() == "HOT-0"
    operator = PowerModel(overrides=(*busy, Override("COOL", idle_watts=0.0)))
    operator.learn_idle({"COOL": 30.0})
    engine.power = operator
    assert node_of_one() == "COOL-0"
