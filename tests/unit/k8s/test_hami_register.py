"""``--hami-register``: the HAMi registration annotations the node agent writes for probed cards,
read back with HAMi's decoder (``hami.node_devices``), and the admission policy's list of keys."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from xpupool.catalog import load_accelerators
from xpupool.k8s.codec.hami import decode_device_infos, node_devices
from xpupool.k8s.node_agent.hami_register import (
    REGISTER_KEYS,
    hami_register_annotations,
    register_kind,
)
from xpupool.model.device import Device
from xpupool.probes.base import DeviceInfo, Health

ROOT = Path(__file__).parents[3]
POLICY_FILES = (
    ROOT / "deploy" / "policies" / "node-agent-vap.yaml",
    ROOT / "deploy" / "helm" / "xpupool" / "templates" / "node-agent-vap.yaml",
)


def card(vendor: str, model: str, uuid: str, index: int, mib: int, **kw: object) -> DeviceInfo:
    return DeviceInfo(
        vendor=vendor, model=model, uuid=uuid, index=index, memory_total_mib=mib, **kw
    )  # type: ignore[arg-type]


PROBED = (
    # listed out of index order: the annotation is in index order
    card("nvidia", "NVIDIA A100-SXM4-80GB", "GPU-a100-1", 1, 81920, numa_node=1),
    card("nvidia", "NVIDIA A100-SXM4-80GB", "GPU-a100-0", 0, 81920, compute_units=108),
    card("nvidia", "NVIDIA H100 80GB HBM3", "GPU-h100-2", 2, 81559, health=Health.UNHEALTHY),
    card("huawei", "910B3", "NPU-0", 0, 65536),
    card("hygon", "Z100L", "DCU-0", 0, 32768),
    card("kunlunxin", "P800", "XPU-0", 0, 98304),  # whole cards or vXPU: not ours to say
    card("cambricon", "MLU370-X8", "MLU-0", 0, 49152),  # HAMi reads node capacity
    card("nvidia", "NVIDIA A100-SXM4-80GB", "GPU-no-memory", 3, 0),  # the inventory drops it
)


def canonical(d: Device) -> tuple[object, ...]:
    """What HAMi's format carries of a card, the model as the catalog names it."""
    found = load_accelerators().lookup(d.model, d.vendor)
    model = found.name if found is not None else d.model
    return (d.uuid, d.vendor, model, d.memory_mib, d.index, d.numa_node or 0, d.healthy)


def test_probed_cards_are_registered_per_hami_device_type_and_decode_to_the_same_cards() -> None:
    annotations = hami_register_annotations(PROBED)
    assert set(annotations) == {
        "hami.io/node-nvidia-register",
        "hami.io/node-register-Ascend910B3",
        "hami.io/node-dcu-register",
    }
    nvidia = json.loads(annotations["hami.io/node-nvidia-register"])
    assert [e["id"] for e in nvidia] == ["GPU-a100-0", "GPU-a100-1", "GPU-h100-2"]
    # HAMi's device plugin: devcore 100 (a percentage, not SMs), count = deviceSplitCount 10,
    # type the NVML name (it starts with NVIDIA), mode hami-core, health only when true.
    assert nvidia[0] == {
        "id": "GPU-a100-0",
        "count": 10,
        "devmem": 81920,
        "devcore": 100,
        "type": "NVIDIA A100-SXM4-80GB",
        "mode": "hami-core",
        "health": True,
    }
    assert "health" not in nvidia[2]
    ascend = json.loads(annotations["hami.io/node-register-Ascend910B3"])
    assert ascend == [
        {
            "id": "NPU-0",
            "count": 10,
            "devmem": 65536,
            "devcore": 100,
            "type": "Ascend910B3",
            "health": True,
        }
    ]
    assert annotations["hami.io/node-dcu-register"] == "DCU-0,10,32768,100,DCU-Z100L,0,true,0,:"
    assert decode_device_infos(
        "hami.io/node-dcu-register", annotations["hami.io/node-dcu-register"]
    )

    back = node_devices(annotations)
    want = [
        d.to_device()
        for d in PROBED
        if d.vendor in ("nvidia", "huawei", "hygon") and d.memory_total_mib > 0
    ]
    assert sorted(map(canonical, back)) == sorted(map(canonical, want))
    assert {d.max_tasks for d in back} == {10}


def test_no_card_of_a_registered_type_writes_nothing() -> None:
    assert hami_register_annotations([]) == {}
    assert hami_register_annotations(PROBED[5:7]) == {}


@pytest.mark.parametrize(
    ("vendor", "model", "key"),
    [
        ("nvidia", "Tesla T4", "hami.io/node-nvidia-register"),
        ("amd", "MI300X", "hami.io/node-amd-register"),
        ("huawei", "910B4-1", "hami.io/node-register-Ascend910B4-1"),
        ("huawei", "910B4", "hami.io/node-register-Ascend910B4"),
        ("iluvatar", "BI-V150", "hami.io/node-BI-V150-register"),
        ("huawei", "910B1", None),  # no vNPU row for this chip
        ("iluvatar", "BI-V200", None),
        ("kunlunxin", "P800", None),
        ("metax", "C500", None),
        ("mthreads", "MTT S4000", None),
    ],
)
def test_register_kind_follows_the_table(vendor: str, model: str, key: str | None) -> None:
    kind = register_kind(Device(uuid="u", vendor=vendor, model=model, memory_mib=1024))
    assert (kind.register_key if kind is not None else None) == key


@pytest.mark.parametrize("path", POLICY_FILES, ids=lambda p: p.parent.name)
def test_the_admission_policy_allows_exactly_the_keys_the_agent_writes(path: Path) -> None:
    text = re.sub(r"\{\{-? /\*.*?\*/ -?\}\}", "", path.read_text(), flags=re.DOTALL)
    text = re.sub(r"^ *\{\{-.*\}\}$", "", text, flags=re.MULTILINE)  # if, end, labels
    text = re.sub(r"\{\{.*?\}\}", "x", text)  # names the chart templates
    policy = next(d for d in yaml.safe_load_all(text) if d and d["kind"].endswith("Policy"))
    variables = {v["name"]: v["expression"] for v in policy["spec"]["variables"]}
    allowed = set(re.findall(r"'([^']+)'", variables["hamiKeys"]))
    assert allowed == REGISTER_KEYS
