"""Cluster files: expansion, unique UUIDs, field-named errors; the shipped example loads."""

from __future__ import annotations

from pathlib import Path

import pytest

from xpupool.demo import demo_cluster_path
from xpupool.engine import ClusterState, Engine
from xpupool.model import RequestError
from xpupool.model.spec import parse_spec
from xpupool.probes.cluster_file import load_cluster, parse_cluster

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "cluster-mixed.yaml"


def test_shipped_example_is_two_sites_and_six_models() -> None:
    for path in (EXAMPLE, demo_cluster_path()):
        nodes = load_cluster(path)
        assert len(nodes) == 14 and sum(len(n.devices) for n in nodes) == 112
        assert {n.site for n in nodes} == {"beijing", "shanghai"}
        assert len({d.model for n in nodes for d in n.devices}) == 6
        uuids = [d.uuid for n in nodes for d in n.devices]
        assert len(set(uuids)) == len(uuids)


def test_count_expands_names_and_keeps_device_details() -> None:
    nodes = parse_cluster(
        {
            "nodes": [
                {
                    "name": "gpu",
                    "count": 2,
                    "cpu": "64",
                    "memory": "256Gi",
                    "site": "x",
                    "labels": {"rack": 1},
                    "devices": [
                        {
                            "vendor": "ascend",
                            "model": "910B3",
                            "count": 2,
                            "memory": "64Gi",
                            "driver": "24.1.rc2",
                            "link_group_size": 2,
                        }
                    ],
                }
            ]
        }
    )
    assert [n.name for n in nodes] == ["gpu-0", "gpu-1"]
    assert nodes[1].cpu_milli == 64_000 and nodes[1].memory_mib == 256 * 1024
    assert [d.uuid for d in nodes[1].devices] == ["gpu-1-0", "gpu-1-1"]
    assert nodes[0].devices[0].vendor == "huawei" and nodes[0].labels == {"rack": "1"}
    assert nodes[0].devices[0].link_group == nodes[0].devices[1].link_group is not None


@pytest.mark.parametrize(
    ("node", "field"),
    [
        ({"cpu": 1}, "nodes[0].name"),
        ({"name": "a", "cpu": "lots"}, "nodes[0].cpu"),
        ({"name": "a", "memory": "1Gx"}, "nodes[0].memory"),
        (
            {"name": "a", "devices": [{"vendor": "nvidia", "model": "x", "memory": "1Gx"}]},
            "nodes[0].devices[0].memory",
        ),
        ({"name": "a", "gpus": 8}, "nodes[0].gpus"),
    ],
)
def test_bad_nodes_name_the_field(node: dict[str, object], field: str) -> None:
    with pytest.raises(RequestError) as exc:
        parse_cluster({"nodes": [node]})
    assert exc.value.field == field


def test_duplicate_names_and_bad_yaml(tmp_path: Path) -> None:
    with pytest.raises(RequestError) as exc:
        parse_cluster({"nodes": [{"name": "a"}, {"name": "a"}]})
    assert exc.value.field == "nodes.name"
    broken = tmp_path / "c.yaml"
    broken.write_text("nodes: [\n")
    with pytest.raises(RequestError):
        load_cluster(broken)


def test_taints_are_read_as_text_or_objects() -> None:
    from xpupool.model.taint import Taint, TaintEffect

    nodes = parse_cluster(
        {
            "nodes": [
                {
                    "name": "a",
                    "count": 2,
                    "taints": [
                        "gpu=true:NoSchedule",
                        {"key": "spot", "effect": "PreferNoSchedule"},
                    ],
                }
            ]
        }
    )
    expected = (
        Taint("gpu", "true", TaintEffect.NO_SCHEDULE),
        Taint("spot", "", TaintEffect.PREFER_NO_SCHEDULE),
    )
    assert [n.taints for n in nodes] == [expected, expected]


@pytest.mark.parametrize(
    ("taints", "field", "words"),
    [
        (["gpu:NoExecute"], "nodes[0].taints[0].effect", "never evicts"),
        (["gpu=true"], "nodes[0].taints[0]", "effect is required"),
        ("gpu:NoSchedule", "nodes[0].taints", "expected a list"),
        ([{"key": "gpu", "effect": "NoSchedule", "x": 1}], "nodes[0].taints[0].x", "unknown key"),
        (["a:NoSchedule", "a=b:NoSchedule"], "nodes[0].taints[1]", "one per key and effect"),
    ],
)
def test_bad_taints_name_the_entry(taints: object, field: str, words: str) -> None:
    with pytest.raises(RequestError) as caught:
        parse_cluster({"nodes": [{"name": "a", "taints": taints}]})
    assert caught.value.field == field and words in caught.value.reason, caught.value


def test_cards_cut_into_partitions_are_their_instances() -> None:
    nodes = parse_cluster(
        {
            "nodes": [
                {
                    "name": "a",
                    "cpu": 64,
                    "memory": "256Gi",
                    "devices": [
                        {
                            "vendor": "nvidia",
                            "model": "NVIDIA A100-SXM4-80GB",
                            "count": 2,
                            "memory": "80Gi",
                            "partitions": ["3g.40gb@0", "3g.40gb@4"],
                        },
                        {
                            "vendor": "huawei",
                            "model": "910B3",
                            "memory": "64Gi",
                            "partitions": ["vir05_1c_16g", "vir10_3c_32g"],
                        },
                    ],
                }
            ]
        }
    )
    devices = nodes[0].devices
    assert [(d.uuid, d.partition, d.partition_of, d.partition_start) for d in devices] == [
        ("MIG-a-0-0", "3g.40gb", "a-0", 0),
        ("MIG-a-0-4", "3g.40gb", "a-0", 4),
        ("MIG-a-1-0", "3g.40gb", "a-1", 0),
        ("MIG-a-1-4", "3g.40gb", "a-1", 4),
        ("a-2-vnpu4", "vir05_1c_16g", "a-2", None),
        ("a-2-vnpu5", "vir10_3c_32g", "a-2", None),
    ]
    assert devices[0].memory_mib == 40 * 1024 and devices[0].index == 0
    assert devices[4].index == 2 and devices[5].memory_mib == 32 * 1024


@pytest.mark.parametrize(
    ("model", "partitions", "field"),
    [
        ("NVIDIA A100-SXM4-80GB", ["3g.40gb@0", "4g.40gb@0"], "nodes[0].devices[0].partitions"),
        ("NVIDIA A100-SXM4-80GB", ["3g.20gb@0"], "nodes[0].devices[0].partitions"),
        ("NVIDIA A100-SXM4-80GB", ["3g.40gb@x"], "nodes[0].devices[0].partitions[0]"),
        ("Tesla T4", ["1g.5gb@0"], "nodes[0].devices[0].partitions"),
    ],
)
def test_a_layout_the_card_cannot_hold_is_refused(
    model: str, partitions: list[str], field: str
) -> None:
    entry = {"vendor": "nvidia", "model": model, "memory": "80Gi", "partitions": partitions}
    with pytest.raises(RequestError) as info:
        parse_cluster({"nodes": [{"name": "a", "devices": [entry]}]})
    assert info.value.field == field


def test_the_partitions_example_loads_and_places_by_profile() -> None:
    path = Path(__file__).resolve().parents[3] / "examples" / "cluster-partitions.yaml"
    nodes = load_cluster(path)
    cut = [d for n in nodes for d in n.devices if d.partition is not None]
    assert len(cut) == 2 * 2 + 3 + 2 * 3
    engine = Engine(ClusterState(nodes))
    placed = engine.place(parse_spec("A100 mig=4g.40gb")).allocations
    assert [d.uuid for a in placed for d in a.devices] == ["MIG-mig-a100-2-0"]
    placed = engine.place(parse_spec("910B3 vnpu=vir10_3c_32g")).allocations
    assert placed and placed[0].node == "vnpu-910b"
