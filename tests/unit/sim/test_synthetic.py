"""Held-out synthetic workloads: the mixes come out as asked, every task fits an empty fleet, and
the CSV reads back through the trace reader unchanged."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from xpupool.model import Device, Node, RequestError
from xpupool.sim.alibaba import read_nodes, read_tasks
from xpupool.sim.synthetic import (
    DESIGNED,
    MODERN_FLEET,
    Mix,
    generate,
    held_out,
    random_mix,
    write_fleet,
    write_tasks,
)


def fleet() -> list[Node]:
    def node(name: str, model: str, cards: int, cpu: int, mem: int) -> Node:
        devices = tuple(
            Device(f"{name}-{j}", "nvidia", model, 16384, index=j) for j in range(cards)
        )
        return Node(name, cpu * 1000, mem * 1024, devices)

    return [
        *(node(f"g{i}", "G2", 8, 96, 384) for i in range(4)),
        *(node(f"t{i}", "T4", 2, 104, 512) for i in range(4)),
        node("p0", "P100", 2, 16, 120),
    ]


def mix(**changes: object) -> Mix:
    base: dict[str, object] = {
        "name": "m",
        "shares": ((250, 1.0), (500, 3.0)),
        "shared": 0.5,
        "multi": ((2, 1.0), (8, 1.0)),
        "multi_card": 0.2,
        "cpu_only": 0.1,
        "typed": 0.3,
        "cpu_per_gpu": 0.5,
    }
    base.update(changes)
    return Mix(**base)  # type: ignore[arg-type]


@pytest.mark.slow
def test_the_mix_comes_out_in_its_proportions() -> None:
    tasks = generate(mix(), fleet(), 20_000, seed=3)
    gpu = [t for t in tasks if t.num_gpu]
    assert len(tasks) - len(gpu) == pytest.approx(0.1 * len(tasks), rel=0.1)
    shared = [t for t in gpu if t.gpu_milli < 1000]
    assert len(shared) == pytest.approx(0.5 * len(gpu), rel=0.05)
    assert {t.gpu_milli for t in shared} == {250, 500}
    # 500 is weighted 3 to 1 against 250
    halves = sum(t.gpu_milli == 500 for t in shared)
    assert halves / len(shared) == pytest.approx(0.75, abs=0.02)
    multi = [t for t in gpu if t.num_gpu > 1]
    assert len(multi) == pytest.approx(0.2 * len(gpu), rel=0.07)
    assert {t.num_gpu for t in multi} == {2, 8}
    assert all(t.gpu_milli == 1000 for t in multi)
    typed = [t for t in gpu if t.gpu_spec]
    assert len(typed) == pytest.approx(0.3 * len(gpu), rel=0.07)


@pytest.mark.slow
def test_every_task_fits_some_node_of_an_empty_fleet() -> None:
    nodes = fleet()
    for m in held_out(random_mixes=3):
        for t in generate(m, nodes, 3000, seed=1):
            able = [
                n
                for n in nodes
                if len(n.devices) >= t.num_gpu
                and (not t.gpu_spec or n.devices[0].model in t.gpu_spec)
                and n.cpu_milli >= t.cpu_milli
                and n.memory_mib >= t.memory_mib
            ]
            assert able, t
            assert t.cpu_milli >= 1000


def test_a_model_named_has_a_node_with_enough_of_its_cards() -> None:
    # P100 nodes have 2 cards: an 8-card typed task may only name G2
    tasks = generate(mix(typed=1.0, multi=((8, 1.0),), multi_card=1.0, shared=0.0), fleet(), 500, 1)
    assert {t.gpu_spec for t in tasks if t.num_gpu == 8} == {("G2",)}


@pytest.mark.slow
def test_cpu_follows_the_mix_ratio() -> None:
    nodes = fleet()
    per_gpu = sum(n.cpu_milli for n in nodes) / sum(len(n.devices) for n in nodes)

    def ratio(m: Mix) -> float:
        gpu = [t for t in generate(m, nodes, 5000, seed=2) if t.num_gpu and t.num_gpu < 8]
        return sum(t.cpu_milli for t in gpu) / sum(t.num_gpu * t.gpu_milli for t in gpu)

    light, heavy = ratio(mix(cpu_per_gpu=0.3)), ratio(mix(cpu_per_gpu=1.2))
    assert heavy > 2.5 * light
    assert heavy * 1000 == pytest.approx(1.2 * per_gpu * np.exp(0.5**2 / 2), rel=0.25)


def test_generation_is_seeded() -> None:
    a = generate(DESIGNED[0], fleet(), 500, seed=7)
    assert a == generate(DESIGNED[0], fleet(), 500, seed=7)
    assert a != generate(DESIGNED[0], fleet(), 500, seed=8)
    assert held_out(2) == held_out(2)
    assert random_mix("x", np.random.default_rng(1)) != random_mix("x", np.random.default_rng(2))


def test_csv_reads_back_through_the_trace_reader(tmp_path: Path) -> None:
    tasks = generate(DESIGNED[3], fleet(), 300, seed=1)  # "typed": model names in gpu_spec
    path = tmp_path / "openb_pod_list_typed.csv"
    write_tasks(tasks, path)
    back = read_tasks(path)
    assert [(t.name, t.shape, t.memory_mib) for t in back] == [
        (t.name, t.shape, t.memory_mib) for t in tasks
    ]


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"shared": 1.2}, "mix.shared"),
        ({"shared": 0.7, "multi_card": 0.5}, "mix.shared"),
        ({"shares": ((1000, 1.0),)}, "mix.shares"),
        ({"shares": ()}, "mix.shares"),
        ({"multi": ((1, 1.0),)}, "mix.multi"),
        ({"cpu_only": -0.1}, "mix.cpu_only"),
        ({"cpu_per_gpu": 0.0}, "mix.cpu_per_gpu"),
    ],
)
def test_a_bad_mix_names_its_field(changes: dict[str, object], field: str) -> None:
    with pytest.raises(RequestError) as err:
        mix(**changes)
    assert field in str(err.value)


def test_a_fleet_without_gpus_is_refused() -> None:
    with pytest.raises(RequestError, match="no GPU node"):
        generate(mix(), [Node("c", 8000, 16384, ())], 10, seed=1)


def test_the_generated_fleet_reads_back_through_the_node_reader(tmp_path: Path) -> None:
    path = tmp_path / "openb_node_list_gpu_node.csv"
    write_fleet(MODERN_FLEET, path)
    nodes = read_nodes(path)
    assert len(nodes) == sum(row[4] for row in MODERN_FLEET)
    by_model = {n.devices[0].model: n for n in nodes}
    for model, cards, cores, gib, _ in MODERN_FLEET:
        node = by_model[model]
        assert (len(node.devices), node.cpu_milli, node.memory_mib) == (
            cards,
            cores * 1000,
            gib * 1024,
        )
    assert len({n.name for n in nodes}) == len(nodes)
