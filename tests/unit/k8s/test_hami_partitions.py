"""HAMi's MIG and vNPU annotations and resource names (k8s/codec/hami_partitions.py, and where
hami.py, pod_request.py, pod_assignment.py and the informers' decoder use them), against texts
built as HAMi's Go code at commit 4707fb02 formats them: each string below is what
``encoding/json`` writes for the struct cited, fields in declaration order, ``omitempty`` fields
left out when zero."""

from __future__ import annotations

import json
from typing import Any

import pytest

from xpupool.catalog import load_accelerators, load_partitions
from xpupool.catalog.partition_cards import cut_card
from xpupool.k8s.codec.hami import (
    HamiAnnotationError,
    decode_device_infos,
    decode_pod_devices,
    encode_register,
)
from xpupool.k8s.codec.hami_partitions import (
    MIG_ALLOCATIONS,
    decode_mig_allocations,
    decode_vnpu_runtime,
    encode_mig_allocations,
    encode_vnpu_runtime,
    mig_resource_name,
    mig_resource_profile,
    vnpu_template,
)
from xpupool.k8s.codec.node_annotations import DEVICES_KEY, encode_devices
from xpupool.k8s.codec.pod_assignment import assignment_annotations
from xpupool.k8s.codec.pod_request import PodRequestError, names_managed_resource, pod_demand
from xpupool.k8s.extender.main import partition_annotator
from xpupool.k8s.informers.cluster_view import ClusterView
from xpupool.k8s.informers.decoders import decode_node
from xpupool.k8s.informers.decoders import decode_pod_devices as decode_pod
from xpupool.k8s.informers.watch import Event, EventType
from xpupool.model import Device
from xpupool.model.allocation import Allocation, DeviceShare
from xpupool.server.schemas.agent_protocol import DeviceIn

# pkg/device/nvidia/mig_allocations.go lines 37-46 (MigAllocation: containerIndex, deviceIndex,
# gpuUUID, profile, placement{start,size} from pkg/device/devices.go lines 50-53, then the
# omitempty migUUID and the *uint32 gpuInstanceID / computeInstanceID)
RESERVED = (
    '[{"containerIndex":0,"deviceIndex":0,"gpuUUID":"GPU-a","profile":"3g.20gb",'
    '"placement":{"start":4,"size":4}}]'
)
REALIZED = (
    '[{"containerIndex":1,"deviceIndex":0,"gpuUUID":"GPU-a","profile":"1g.5gb",'
    '"placement":{"start":6,"size":1},"migUUID":"MIG-1234","gpuInstanceID":13,'
    '"computeInstanceID":0}]'
)
# pkg/device/devices.go lines 127-142 (DeviceInfo) with MigProfile (lines 79-89: InstanceCount is
# json:"-"); register.go lines 188-197: a MIG card registers devcore 100, Count the largest
# InstanceCount; index 0 and numa 0 are left out (omitempty)
MIG_CARD = (
    '[{"id":"GPU-a","count":7,"devmem":40960,"devcore":100,"type":"NVIDIA-A100-SXM4-40GB",'
    '"mode":"mig","migProfiles":[{"name":"1g.5gb","memoryMB":4864,"core":15,"sliceCount":1,'
    '"placements":[{"start":0,"size":1},{"start":6,"size":1}]},{"name":"7g.40gb",'
    '"memoryMB":40192,"core":100,"sliceCount":7,"placements":[{"start":0,"size":8}]}],'
    '"health":true}]'
)
# pkg/device/ascend/device.go lines 60-65 (RuntimeInfo: UUID, temp, memory, core; all omitempty)
ASCEND_RUNTIME = '[{"UUID":"npu-0","temp":"vir05_1c_16g","memory":16384}]'


def test_mig_allocations_round_trip_as_go_writes_them() -> None:
    for text in (RESERVED, REALIZED):
        assert encode_mig_allocations(decode_mig_allocations(text)) == text
    (realized,) = decode_mig_allocations(REALIZED)
    assert (realized.start, realized.size, realized.compute_instance_id) == (6, 1, 0)
    assert encode_mig_allocations([]) is None  # EncodeMigAllocations: ("", false), no annotation
    assert decode_mig_allocations("") == ()


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ('[{"deviceIndex":0,"profile":"1g.5gb","placement":{"size":1}}]', "incomplete"),
        ('[{"gpuUUID":"G","profile":"1g.5gb","placement":{"start":1}}]', "size 0"),
        (
            '[{"gpuUUID":"G","profile":"1g.5gb","placement":{"size":1},"migUUID":"MIG-1"}]',
            "partial runtime identity",
        ),
        (
            "[" + ",".join(['{"gpuUUID":"G","profile":"a","placement":{"size":1}}'] * 2) + "]",
            "duplicate",
        ),
        ('{"gpuUUID":"G"}', "JSON array"),
    ],
)
def test_mig_allocations_refused_as_hami_refuses_them(text: str, says: str) -> None:
    """DecodeMigAllocations (mig_allocations.go lines 79-112)."""
    with pytest.raises(HamiAnnotationError) as exc:
        decode_mig_allocations(text)
    assert says in exc.value.reason
    assert exc.value.key == MIG_ALLOCATIONS


def test_a_mig_card_registration_keeps_its_profiles() -> None:
    (info,) = decode_device_infos("hami.io/node-nvidia-register", MIG_CARD)
    assert info.mode == "mig"
    assert [p.name for p in info.mig_profiles] == ["1g.5gb", "7g.40gb"]
    assert info.mig_profiles[0].placements == ((0, 1), (6, 1))
    assert encode_register([info]) == MIG_CARD
    bad = MIG_CARD.replace('"start":6', '"start":-6')
    with pytest.raises(HamiAnnotationError) as exc:
        decode_device_infos("hami.io/node-nvidia-register", bad)
    assert exc.value.part == "migProfiles[0].placements[1].start"


def test_ascend_runtime_annotation_round_trips() -> None:
    assert encode_vnpu_runtime(decode_vnpu_runtime("huawei.com/Ascend910B3", ASCEND_RUNTIME)) == (
        ASCEND_RUNTIME
    )
    with pytest.raises(HamiAnnotationError):
        decode_vnpu_runtime("huawei.com/Ascend910B3", '[{"temp":"vir05_1c_16g"}]')


def test_vnpu_template_is_trim_memory() -> None:
    """device.go ``trimMemory``: the first template by memory that holds the ask
    (examples/ascend/job-910B3.yaml asks 2000)."""
    scheme = load_partitions().scheme_for("910B3")
    assert scheme is not None
    assert vnpu_template(scheme, 2000) == "vir05_1c_16g"
    assert vnpu_template(scheme, 16385) == "vir10_3c_32g"
    assert vnpu_template(scheme, 40000) == ""


def test_mig_resource_names_as_the_device_plugin_writes_them() -> None:
    """rm.go line 152: ``"mig-" + profile`` with ``+`` written ``.``."""
    assert mig_resource_name("1g.10gb+me") == "nvidia.com/mig-1g.10gb.me"
    assert mig_resource_profile("nvidia.com/mig-1g.10gb.me") == "1g.10gb+me"
    assert mig_resource_profile("nvidia.com/mig-3g.20gb") == "3g.20gb"
    assert mig_resource_profile("nvidia.com/gpu") is None


def _pod(limits: dict[str, Any], annotations: dict[str, str] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "gpu-pod", "namespace": "ns", "uid": "u-1"}
    if annotations:
        meta["annotations"] = annotations
    container = {"name": "ubuntu-container", "resources": {"limits": limits}}
    return {"metadata": meta, "spec": {"containers": [container]}}


def test_hamis_mig_examples_read_as_partition_requests() -> None:
    """examples/nvidia/mig_example.yaml asks for a profile by name; dynamic_mig_example.yaml for
    memory in MIG mode, which HAMi serves with the smallest profile that holds it."""
    static = pod_demand(_pod({"nvidia.com/mig-3g.20gb": 1})).demands[0].request.devices
    assert (static.count, static.partition, static.share_modes) == (1, "3g.20gb", ())
    dynamic = _pod(
        {"nvidia.com/gpu": 2, "nvidia.com/gpumem": 8000}, {"nvidia.com/vgpu-mode": "mig"}
    )
    devices = pod_demand(dynamic).demands[0].request.devices
    assert (devices.count, devices.isolated_mib, devices.memory_mib) == (2, 8000, None)
    assert devices.share_modes == ()


@pytest.mark.parametrize(
    ("limits", "annotations", "field", "says"),
    [
        (
            {"nvidia.com/mig-1g.5gb": 1, "nvidia.com/mig-2g.10gb": 1},
            None,
            "spec.containers[0].resources",
            "one MIG profile",
        ),
        (
            {"nvidia.com/mig-1g.5gb": 1, "nvidia.com/gpumem": 100},
            None,
            'spec.containers[0].resources.limits["nvidia.com/gpumem"]',
            "no other NVIDIA resource",
        ),
        (
            {"nvidia.com/mig-big": 1},
            None,
            'spec.containers[0].resources.limits["nvidia.com/mig-big"]',
            "partition profile",
        ),
        (
            {"nvidia.com/gpu": 1},
            {"nvidia.com/vgpu-mode": "mig"},
            'metadata.annotations["nvidia.com/vgpu-mode"]',
            "gives nvidia.com/gpumem",
        ),
    ],
)
def test_mig_requests_refused_with_the_field(
    limits: dict[str, Any], annotations: dict[str, str] | None, field: str, says: str
) -> None:
    with pytest.raises(PodRequestError) as exc:
        pod_demand(_pod(limits, annotations))
    assert exc.value.field == field
    assert says in exc.value.reason


def _cut(uuid: str, model: str, layout: tuple[tuple[str, int | None], ...]) -> tuple[Device, ...]:
    vendor = "huawei" if model.startswith("910") else "nvidia"
    card = Device(uuid, vendor, model, 40960 if vendor == "nvidia" else 65536)
    return cut_card(card, layout, load_partitions(), load_accelerators())


def _allocation(device: Device) -> Allocation:
    share = DeviceShare(device.uuid, 0, device.memory_mib, 1000)
    return Allocation(1, "gpu-pod", 0, "n", 0, 0, 0, (share,))


def test_a_mig_instance_is_assigned_as_hami_reserves_one_and_read_back() -> None:
    """The device list names the card with the profile's memory and cores
    (nvidia/device.go AddResourceUsage, lines 645-662); the instance goes to
    ``hami.io/vgpu-mig-allocations``, which the informers read back to the instance."""
    instances = _cut("GPU-a", "A100-SXM4-40GB", (("3g.20gb", 4), ("1g.5gb", 0)))
    demand = pod_demand(_pod({"nvidia.com/mig-3g.20gb": 1}))
    devices = {d.uuid: d for d in instances}
    out = assignment_annotations("n", demand, [_allocation(instances[0])], 7, devices)
    assert out["hami.io/vgpu-devices-to-allocate"] == "GPU-a,NVIDIA,20480,43:;"
    assert out[MIG_ALLOCATIONS] == RESERVED
    bound = {"metadata": {"annotations": out}, "spec": {"containers": [{"name": "c"}]}}
    held = decode_pod(bound)
    assert held is not None and held.containers[0][0].uuid == instances[0].uuid
    # a card that is no partition is written as before, with no MIG annotation
    plain = Device("GPU-b", "nvidia", "A100-SXM4-40GB", 40960)
    share = assignment_annotations("n", demand, [_allocation(plain)], 7, {})
    assert MIG_ALLOCATIONS not in share
    assert decode_pod_devices("k", share["hami.io/vgpu-devices-allocated"])[0][0].uuid == "GPU-b"


def test_a_vnpu_is_assigned_with_its_template() -> None:
    """The Ascend device plugin reads ``huawei.com/<CommonWord>`` (device.go PatchAnnotations,
    lines 217-255): the card, the template, its memory."""
    (vnpu,) = _cut("npu-0", "910B3", (("vir05_1c_16g", None),))
    demand = pod_demand(_pod({"huawei.com/Ascend910B3": 1, "huawei.com/Ascend910B3-memory": 2000}))
    out = assignment_annotations("n", demand, [_allocation(vnpu)], 7, {vnpu.uuid: vnpu})
    assert out["huawei.com/Ascend910B3"] == ASCEND_RUNTIME
    assert out["hami.io/Ascend910B3-devices-to-allocate"] == "npu-0,Ascend910B3,16384,0:;"
    assert json.loads(out["huawei.com/Ascend910B3"])[0]["UUID"] == "npu-0"


def test_the_extender_writes_a_mig_pods_instance_and_charges_it_back() -> None:
    """Through the extender's own pieces: a node whose agent declared an A100 cut 3g+3g, a pod
    asking ``nvidia.com/mig-3g.20gb``; the bind's annotations name the instance HAMi's way, and
    pod, read back bound by a restarted extender, holds that instance: the next takes the other."""
    instances = _cut("GPU-a", "A100-SXM4-40GB", (("3g.20gb", 0), ("3g.20gb", 4)))
    annotations = {DEVICES_KEY: encode_devices(DeviceIn.from_device(d) for d in instances)}
    node = {
        "metadata": {"name": "n", "uid": "uid-n", "annotations": annotations},
        "status": {"allocatable": {"cpu": "64", "memory": "512Gi"}},
    }
    view = ClusterView(decode_node, decode_pod, profile="binpack")
    view.on_node(Event(EventType.ADDED, "n", "uid-n", view.node_record(node)))
    pod = _pod({"nvidia.com/mig-3g.20gb": 1})
    request = pod_demand(pod).demands[0].request
    with view.engine_locked() as engine:
        placed = engine.place(request)
    assert placed.ok
    first = placed.allocations[0].devices[0].uuid
    out = partition_annotator(view)("n", pod_demand(pod), placed.allocations)
    (reserved,) = json.loads(out[MIG_ALLOCATIONS])
    start = next(d.partition_start for d in instances if d.uuid == first)
    assert (reserved["gpuUUID"], reserved["placement"]["start"]) == ("GPU-a", start)
    pod["metadata"]["annotations"] = out
    pod["spec"]["nodeName"] = "n"
    restarted = ClusterView(decode_node, decode_pod, profile="binpack")  # an extender restarted
    restarted.on_node(Event(EventType.ADDED, "n", "uid-n", restarted.node_record(node)))
    restarted.on_pod(Event(EventType.ADDED, "ns/gpu-pod", "u-1", restarted.pod_record(pod)))
    with restarted.engine_locked() as engine:
        again = engine.place(request)
    assert again.ok and again.allocations[0].devices[0].uuid != first


def test_a_pod_naming_a_mig_profile_is_one_the_extender_binds() -> None:
    """kube-scheduler sends it such a pod when the name is in managedResources; the bind's own
    check (``names_managed_resource``) must then not refuse it as asking for nothing managed."""
    assert names_managed_resource(_pod({"nvidia.com/mig-3g.20gb": 1}))
    assert not names_managed_resource(_pod({"example.com/foo": 1}))
