"""HAMi's card policies read as HAMi v2.10.0 reads them (pkg/device/nvidia/device.go), decoded
from the Node and Pod objects and judged by the engine, as the extender does (issue 56, "HAMi's
policies are silently ignored"): ``hami.io/device-cordon`` (``cordonedDevices``),
``nvidia.com/vgpu-mode`` against each card's registered ``mode`` (``checkType``) and
``nvidia.com/numa-bind`` against each card's ``numa`` (``Fit``'s NumaNotFit)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from xpupool.engine import ClusterState, Engine, Reason
from xpupool.k8s.codec.hami import (
    DEVICE_CORDON,
    MAX_ANNOTATION_CHARS,
    MAX_ENTRIES,
    HamiAnnotationError,
    cordoned_cards,
    go_bool,
)
from xpupool.k8s.codec.pod_request import pod_demand
from xpupool.k8s.informers.decoders import decode_node
from xpupool.model.device import Node
from xpupool.model.request import Request


def hami_node(
    name: str, cards: list[dict[str, Any]], annotations: dict[str, str] | None = None
) -> Node:
    """A Node as HAMi's device plugin registers it: ``cards`` (numa, mode, ...) in
    ``hami.io/node-nvidia-register``, plus ``annotations``."""
    register = [
        {
            "id": f"GPU-{name}-{i}",
            "index": i,
            "count": 10,
            "devmem": 81920,
            "devcore": 100,
            "type": "NVIDIA A100-SXM4-80GB",
            "health": True,
            **card,
        }
        for i, card in enumerate(cards)
    ]
    obj: dict[str, Any] = {
        "metadata": {
            "name": name,
            "annotations": {"hami.io/node-nvidia-register": json.dumps(register)}
            | (annotations or {}),
        },
        "status": {"allocatable": {"cpu": "64", "memory": "512Gi"}},
    }
    node = decode_node(obj)
    assert node is not None
    return node


def request(limits: dict[str, str], annotations: dict[str, str] | None = None) -> Request:
    obj = {
        "metadata": {"name": "p", "namespace": "ns", "uid": "u", "annotations": annotations or {}},
        "spec": {"containers": [{"name": "c", "resources": {"limits": limits}}]},
    }
    return pod_demand(obj).demands[0].request


ONE = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "8000"}


def test_device_cordon_is_read_as_hami_reads_it() -> None:
    assert cordoned_cards({}) == frozenset()
    assert cordoned_cards({DEVICE_CORDON: " , "}) == frozenset()
    assert cordoned_cards({DEVICE_CORDON: "GPU-a, GPU-b,,GPU-a "}) == {"GPU-a", "GPU-b"}
    with pytest.raises(HamiAnnotationError) as exc:
        cordoned_cards({DEVICE_CORDON: "x" * (MAX_ANNOTATION_CHARS + 1)})
    assert exc.value.field == DEVICE_CORDON
    with pytest.raises(HamiAnnotationError):
        cordoned_cards({DEVICE_CORDON: ",".join(f"G{i}" for i in range(MAX_ENTRIES + 1))})


def test_cordoned_cards_of_a_node_take_no_pod() -> None:
    both = {DEVICE_CORDON: "GPU-a-0,GPU-a-1"}
    node = hami_node("a", [{}, {}], both)
    assert node.cordoned_devices == {"GPU-a-0", "GPU-a-1"}
    engine = Engine(ClusterState([node]), "binpack")
    failure = engine.explain(request(ONE))
    assert failure is not None and failure.reasons[0].reason is Reason.DEVICE_UNHEALTHY
    one = Engine(ClusterState([hami_node("a", [{}, {}], {DEVICE_CORDON: "GPU-a-0"})]), "binpack")
    assert one.place(request(ONE)).allocations[0].devices[0].uuid == "GPU-a-1"


def test_vgpu_mode_against_the_registered_mode() -> None:
    """Cards registered hami-core, mps and mig: a pod takes only a mode its annotation names;
    without one, HAMi-core or MPS, never a MIG card (MIG instances are not modelled yet)."""
    node = hami_node("m", [{"mode": "hami-core"}, {"mode": "mps"}, {"mode": "mig"}])
    assert [d.share_mode for d in node.devices] == ["hami-core", "mps", "mig"]
    cases = {
        "hami-core": {"GPU-m-0"},
        "mps": {"GPU-m-1"},
        "hami-core,mps": {"GPU-m-0", "GPU-m-1"},
        None: {"GPU-m-0", "GPU-m-1"},
    }
    for mode, cards in cases.items():
        annotations = {} if mode is None else {"nvidia.com/vgpu-mode": mode}
        engine = Engine(ClusterState([node]), "binpack")
        got = set()
        while (placed := engine.place(request({"nvidia.com/gpu": "1"}, annotations))).ok:
            got.add(placed.allocations[0].devices[0].uuid)
        assert got == cards, mode


def test_a_card_registered_without_a_mode_takes_any_mode() -> None:
    """The JSON registration leaves ``mode`` out when empty (omitempty); HAMi's substring test of
    an empty mode passes for every pod."""
    node = hami_node("n", [{}])
    assert node.devices[0].share_mode is None
    engine = Engine(ClusterState([node]), "binpack")
    assert engine.place(request(ONE, {"nvidia.com/vgpu-mode": "mps"})).ok


def test_numa_bind_keeps_a_containers_cards_on_one_numa_node() -> None:
    """HAMi's numa-bind: 4 cards a NUMA node; 5 cards never fit, 4 land on one NUMA node."""
    node = hami_node("n", [{"numa": 0}] * 4 + [{"numa": 1}] * 4)
    assert [d.numa_node for d in node.devices] == [0] * 4 + [1] * 4
    bind = {"nvidia.com/numa-bind": "true"}
    engine = Engine(ClusterState([node]), "spread")
    failure = engine.explain(request({"nvidia.com/gpu": "5"}, bind))
    assert failure is not None and failure.reasons[0].reason is Reason.NUMA
    assert engine.place(request({"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1000"})).ok
    placed = engine.place(request({"nvidia.com/gpu": "4"}, bind))
    numas = {
        node.devices[int(d.uuid.rsplit("-", 1)[1])].numa_node for d in placed.allocations[0].devices
    }
    assert len(numas) == 1


def test_go_bool_is_strconv_parse_bool() -> None:
    assert [go_bool(t) for t in ("1", "t", "TRUE", "True", "0", "f", "False")] == [
        True,
        True,
        True,
        True,
        False,
        False,
        False,
    ]
    assert go_bool("yes") is None and go_bool("tRUE") is None and go_bool("") is None
