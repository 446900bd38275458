"""HAMi's ``nvidia.com/use-gputype`` and ``nouse-gputype`` matched as HAMi matches them: each
comma-separated item, trimmed, as a case-insensitive substring of the type string the card was
registered under (HAMi v2.10.0 ``pkg/device/devices.go`` ``CheckType``, called by
``pkg/device/nvidia/device.go`` ``checkGPUtype`` with ``DeviceUsage.Type``; the device plugin
registers NVML's name, prefixed ``NVIDIA-`` when it lacks it, ``plugin/register.go``).

Each pod here is read by ``pod_demand`` and placed by the engine on one single-card node per type,
with the nodes decoded from HAMi's registration annotation as the extender decodes them. Before
the type strings were matched, the catalog turned ``Tesla`` into "any card", ``nouse: Tesla`` into a
refusal, and ``A10`` into the A10 only (issue 56, Medium).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from xpupool.engine import ClusterState, Engine
from xpupool.k8s.codec.pod_request import PodRequestError, pod_demand
from xpupool.k8s.informers.decoders import decode_node
from xpupool.model.device import Node

# node name -> the type string HAMi's NVIDIA device plugin registers for that card
TYPES = {
    "t4": "NVIDIA-Tesla T4",
    "h100": "NVIDIA H100 80GB HBM3",
    "a100": "NVIDIA A100-SXM4-80GB",
    "a10": "NVIDIA A10",
}


def hami_node(name: str, hami_type: str) -> Node:
    """A Node as HAMi's device plugin leaves it: one card in ``hami.io/node-nvidia-register``."""
    card = {
        "id": f"GPU-{name}",
        "count": 10,
        "devmem": 16384,
        "devcore": 100,
        "type": hami_type,
        "health": True,
    }
    obj: dict[str, Any] = {
        "metadata": {
            "name": name,
            "annotations": {"hami.io/node-nvidia-register": json.dumps([card])},
        },
        "status": {"allocatable": {"cpu": "8", "memory": "32Gi"}},
    }
    node = decode_node(obj)
    assert node is not None
    return node


def accepted(annotations: dict[str, str]) -> set[str]:
    """The nodes on which a one-card pod with ``annotations`` is placed, each tried alone."""
    limits = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1000"}
    obj = {
        "metadata": {"name": "p", "namespace": "ns", "uid": "u", "annotations": annotations},
        "spec": {"containers": [{"name": "c", "resources": {"limits": limits}}]},
    }
    req = pod_demand(obj).demands[0].request
    out = set()
    for name, hami_type in TYPES.items():
        engine = Engine(ClusterState([hami_node(name, hami_type)]), "binpack")
        if engine.place(req).ok:
            out.add(name)
    return out


@pytest.mark.parametrize(
    ("key", "value", "expected"),
    [
        # 'Tesla' is only in the T4's type string: HAMi places it on the T4, never an H100.
        ("nvidia.com/use-gputype", "Tesla", {"t4"}),
        ("nvidia.com/use-gputype", "Tesla,T4", {"t4"}),
        # excludes the T4 alone; the pod is not refused.
        ("nvidia.com/nouse-gputype", "Tesla", {"h100", "a100", "a10"}),
        # 'A10' is a substring of 'A100-SXM4-80GB': HAMi accepts the A100s too.
        ("nvidia.com/use-gputype", "A10", {"a100", "a10"}),
        ("nvidia.com/nouse-gputype", "A10,H100,T4", set()),
        # case-insensitive, items trimmed, empty items skipped
        ("nvidia.com/use-gputype", " sxm4 , ,hbm3", {"a100", "h100"}),
        # every NVIDIA card's type holds 'NVIDIA'
        ("nvidia.com/use-gputype", "nvidia", set(TYPES)),
        ("nvidia.com/nouse-gputype", "nvidia", set()),
        # blank: no constraint
        ("nvidia.com/use-gputype", "  ", set(TYPES)),
        ("nvidia.com/nouse-gputype", "", set(TYPES)),
    ],
)
def test_type_annotations_match_as_hami_does(key: str, value: str, expected: set[str]) -> None:
    assert accepted({key: value}) == expected


def test_use_and_nouse_together() -> None:
    """Both lists apply: a card must match the first and not the second."""
    both = {"nvidia.com/use-gputype": "A10", "nvidia.com/nouse-gputype": "SXM4"}
    assert accepted(both) == {"a10"}


def test_a_list_of_only_commas_matches_no_card() -> None:
    """HAMi tests a non-blank list item by item; ``,`` has no item that can match, so HAMi finds
    no card for the pod. It is refused here, naming the annotation, rather than left waiting."""
    with pytest.raises(PodRequestError) as info:
        accepted({"nvidia.com/use-gputype": " , "})
    assert info.value.field == 'metadata.annotations["nvidia.com/use-gputype"]'


def test_xpupool_request_keeps_catalog_matching() -> None:
    """xpupool's own request syntax matches through the catalog: ``A10`` is the A10 only."""
    assert accepted({"xpupool.io/request": "A10:1"}) == {"a10"}
