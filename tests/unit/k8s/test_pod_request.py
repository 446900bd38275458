"""Pods as users write them for HAMi v2.10.0, read into engine requests (pod_request.py)."""

from __future__ import annotations

import contextlib
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from xpupool.k8s.codec.pod_request import PodRequestError, pod_demand
from xpupool.k8s.codec.resource_names import DEVICE_KINDS, RESOURCES, Counts, kind_by_type
from xpupool.model import DevicePolicy, DeviceRequest, Topology
from xpupool.model.request import WHOLE


def pod(
    *containers: dict[str, Any],
    init: tuple[dict[str, Any], ...] = (),
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "p", "namespace": "ns", "uid": "u-1"}
    if annotations is not None:
        meta["annotations"] = annotations
    spec: dict[str, Any] = {"containers": list(containers)}
    if init:
        spec["initContainers"] = list(init)
    return {"metadata": meta, "spec": spec}


def ctr(
    name: str = "c", limits: dict[str, Any] | None = None, requests: dict[str, Any] | None = None
) -> dict[str, Any]:
    resources: dict[str, Any] = {}
    if limits is not None:
        resources["limits"] = limits
    if requests is not None:
        resources["requests"] = requests
    return {"name": name, "resources": resources}


def devices_of(limits: dict[str, Any], **annotations: str) -> DeviceRequest:
    demand = pod_demand(pod(ctr(limits=limits), annotations=annotations or None))
    assert len(demand.demands) == 1
    return demand.demands[0].request.devices


def test_table_is_one_index_over_the_rows() -> None:
    assert RESOURCES["nvidia.com/gpumem-percentage"][1] is Counts.MEMORY_PERCENT
    assert RESOURCES["huawei.com/Ascend910B3-memory"][0].vendor == "huawei"
    assert RESOURCES["hygon.com/dcucores"][1] is Counts.CORES
    assert RESOURCES["nvidia.com/priority"][1] is Counts.TASK_PRIORITY
    assert kind_by_type("MLU") is RESOURCES["cambricon.com/vmlu"][0]
    assert len({k.hami_type for k in DEVICE_KINDS}) == len(DEVICE_KINDS)


def test_count_only_is_the_whole_card() -> None:
    """HAMi: memory 100 % (defaultMemory 0) and the webhook's exclusive cores 100; any card
    mode xpupool places shares on (not MIG)."""
    assert devices_of({"nvidia.com/gpu": "2"}) == DeviceRequest(
        count=2, vendors=("nvidia",), share_modes=("hami-core", "mps")
    )


def test_memory_and_cores() -> None:
    got = devices_of(
        {"nvidia.com/gpu": 1, "nvidia.com/gpumem": "3000", "nvidia.com/gpucores": "30"}
    )
    assert (got.count, got.memory_mib, got.core_permille) == (1, 3000, 300)
    # gpumem without gpucores: compute shared best-effort (defaultCores 0, memory not whole).
    assert devices_of({"nvidia.com/gpu": 1, "nvidia.com/gpumem": 3000}).core_permille is None


def test_cores_only_keeps_the_whole_memory_as_hami_does() -> None:
    got = devices_of({"nvidia.com/gpu": 1, "nvidia.com/gpucores": 50})
    assert (got.memory_permille, got.core_permille) == (WHOLE, 500)


def test_memory_percentage() -> None:
    got = devices_of({"nvidia.com/gpu": 1, "nvidia.com/gpumem-percentage": "25"})
    assert (got.memory_permille, got.core_permille) == (250, None)
    # 100 % and no cores: the webhook makes it exclusive.
    assert devices_of({"nvidia.com/gpu": 1, "nvidia.com/gpumem-percentage": 100}).whole


def test_limits_first_else_requests() -> None:
    got = pod_demand(
        pod(
            ctr(
                limits={"nvidia.com/gpu": 1, "nvidia.com/gpumem": 2000},
                requests={"nvidia.com/gpumem": 1000, "nvidia.com/gpucores": 20, "cpu": "500m"},
            )
        )
    ).demands[0]
    assert got.request.devices.memory_mib == 2000
    assert got.request.devices.core_permille == 200
    assert got.request.cpu_milli == 500


def test_limits_only_vendors_ignore_requests() -> None:
    """AMD and MetaX sGPU read limits only (amd/device.go, metax/sdevice.go)."""
    assert not pod_demand(pod(ctr(requests={"amd.com/gpu": 1}))).managed
    assert pod_demand(pod(ctr(limits={"amd.com/gpu": 1}))).managed


def test_vendor_units() -> None:
    mlu = devices_of({"cambricon.com/vmlu": 1, "cambricon.com/mlu.smlu.vmemory": 4})
    assert (mlu.vendors, mlu.memory_mib, mlu.core_permille) == (("cambricon",), 1024, WHOLE)
    dcu = devices_of({"hygon.com/dcunum": 1, "hygon.com/dcumem": 2000, "hygon.com/dcucores": 10})
    assert (dcu.vendors, dcu.memory_mib, dcu.core_permille) == (("hygon",), 2000, 100)
    # Moore Threads: totals for the container, divided by the count; 16 cores a card.
    mt = devices_of(
        {"mthreads.com/vgpu": 2, "mthreads.com/sgpu-memory": 8, "mthreads.com/sgpu-core": 16}
    )
    assert (mt.memory_mib, mt.core_permille) == (2048, 500)
    # MetaX: a bare number is GiB, a suffixed quantity is bytes.
    assert devices_of({"metax-tech.com/sgpu": 1, "metax-tech.com/vmemory": 4}).memory_mib == 4096
    assert (
        devices_of({"metax-tech.com/sgpu": 1, "metax-tech.com/vmemory": "2Gi"}).memory_mib == 2048
    )


def test_ascend_resource_names_its_chip() -> None:
    npu = devices_of({"huawei.com/Ascend910B3": 1, "huawei.com/Ascend910B3-memory": 16384})
    assert (npu.vendors, npu.models, npu.memory_mib) == (("huawei",), ("910B3",), 16384)


def test_hami_order_init_containers_first() -> None:
    demand = pod_demand(
        pod(
            ctr("a"),
            ctr("b", limits={"nvidia.com/gpu": 1}),
            init=(ctr("i0", limits={"hygon.com/dcunum": 1}), ctr("i1")),
        )
    )
    assert demand.containers == ("i0", "i1", "a", "b")
    assert [(d.index, d.name, d.init) for d in demand.demands] == [(0, "i0", True), (3, "b", False)]
    assert (demand.namespace, demand.name, demand.uid) == ("ns", "p", "u-1")


def test_a_pod_without_managed_resources() -> None:
    demand = pod_demand(pod(ctr(limits={"cpu": 1}), ctr(limits={"nvidia.com/gpu": "0"})))
    assert not demand.managed
    # HAMi-core's task priority alone asks for no device.
    assert not pod_demand(pod(ctr(limits={"nvidia.com/priority": 1}))).managed


def test_task_priority() -> None:
    limits = {"nvidia.com/gpu": 1, "nvidia.com/priority": "1"}
    assert pod_demand(pod(ctr(limits=limits))).demands[0].task_priority == 1


def test_type_and_uuid_annotations() -> None:
    got = devices_of(
        {"nvidia.com/gpu": 1},
        **{
            "nvidia.com/use-gputype": "A100, ,H100",
            "nvidia.com/nouse-gputype": "T4",
            "nvidia.com/use-gpuuuid": "GPU-a,GPU-b",
            "nvidia.com/nouse-gpuuuid": "GPU-c",
        },
    )
    # HAMi's type lists stay as written, for a substring match on the registered type string.
    assert (got.models, got.exclude_models) == ((), ())
    assert got.type_contains == ("A100", "H100")
    assert got.exclude_type_contains == ("T4",)
    assert (got.uuids, got.exclude_uuids) == (("GPU-a", "GPU-b"), ("GPU-c",))
    # Another vendor's keys do not apply to an NVIDIA container.
    other = devices_of({"nvidia.com/gpu": 1}, **{"hygon.com/use-dcutype": "Z100"})
    assert other.type_contains == ()


def test_type_items_are_not_read_through_the_catalog() -> None:
    """HAMi matches each item as a substring of the card's type string, so none is mapped to
    catalog names here (tests/unit/k8s/test_hami_types.py places them)."""
    got = devices_of({"nvidia.com/gpu": 1}, **{"nvidia.com/use-gputype": "sxm4,NoSuchCard,!T4"})
    assert (got.models, got.type_contains) == ((), ("sxm4", "NoSuchCard", "!T4"))


@pytest.mark.parametrize(
    ("text", "modes"),
    [
        ("hami-core", ("hami-core",)),
        ("mps", ("mps",)),
        ("hami-core,mps", ("hami-core", "mps")),  # HAMi: the card's mode occurs in the text
        ("mig,mps", ("mps",)),  # MIG cards are not placed on
    ],
)
def test_vgpu_mode_is_the_card_modes_a_container_takes(text: str, modes: tuple[str, ...]) -> None:
    """HAMi's ``checkType`` (pkg/device/nvidia/device.go): a card fits when its registered mode
    occurs in ``nvidia.com/vgpu-mode``."""
    assert devices_of({"nvidia.com/gpu": 1}, **{"nvidia.com/vgpu-mode": text}).share_modes == modes
    # another vendor's container has no sharing mode
    assert devices_of({"hygon.com/dcunum": 1}, **{"nvidia.com/vgpu-mode": text}).share_modes == ()


@pytest.mark.parametrize(
    ("text", "says"), [("mig", "a pod in MIG mode gives"), ("core", "names no mode")]
)
def test_vgpu_mode_mig_without_memory_or_no_mode_is_refused(text: str, says: str) -> None:
    with pytest.raises(PodRequestError) as exc:
        devices_of({"nvidia.com/gpu": 1}, **{"nvidia.com/vgpu-mode": text})
    assert exc.value.field == 'metadata.annotations["nvidia.com/vgpu-mode"]'
    assert says in exc.value.reason


def test_numa_bind_is_the_same_numa_topology() -> None:
    """HAMi's ``assertNuma``: ``strconv.ParseBool`` of ``nvidia.com/numa-bind``."""
    for text, topology in (("true", Topology.SAME_NUMA), ("1", Topology.SAME_NUMA), ("F", None)):
        got = devices_of({"nvidia.com/gpu": 4}, **{"nvidia.com/numa-bind": text})
        assert got.topology is (topology or Topology.NONE), text
    with pytest.raises(PodRequestError) as exc:  # HAMi reads it as false: refused, named
        devices_of({"nvidia.com/gpu": 4}, **{"nvidia.com/numa-bind": "yes"})
    assert exc.value.field == 'metadata.annotations["nvidia.com/numa-bind"]'
    with pytest.raises(PodRequestError) as exc:  # one topology a container
        devices_of(
            {"nvidia.com/gpu": 4},
            **{
                "nvidia.com/numa-bind": "true",
                "xpupool.io/request": '{"devices": {"topology": "nvlink"}}',
            },
        )
    assert exc.value.field == 'metadata.annotations["nvidia.com/numa-bind"]'


def test_policies_and_xpupool_annotations() -> None:
    demand = pod_demand(
        pod(
            ctr(limits={"nvidia.com/gpu": 1, "nvidia.com/gpumem": 1000}),
            annotations={
                "hami.io/node-scheduler-policy": "spread",
                "hami.io/gpu-scheduler-policy": "binpack",
                "xpupool.io/queue": "research",
                "xpupool.io/priority": "7",
                "xpupool.io/site": "sh,!bj",
                "xpupool.io/software": "cuda>=12.1",
                "xpupool.io/request": "A100:1 topology=nvlink",
            },
        )
    )
    req = demand.demands[0].request
    assert req.node_policy == "spread"
    assert req.device_policy is DevicePolicy.BINPACK
    assert (req.queue, req.priority, req.sites, req.exclude_sites) == (
        "research",
        7,
        ("sh",),
        ("bj",),
    )
    assert [str(s) for s in req.devices.software] == ["cuda>=12.1"]
    assert req.devices.models == ("A100",)
    assert req.devices.topology is Topology.SAME_LINK_GROUP
    assert req.devices.memory_mib == 1000


def test_request_annotation_gives_shares_when_resources_do_not() -> None:
    got = devices_of(
        {"nvidia.com/gpu": 2}, **{"xpupool.io/request": '{"devices": {"memory": "8Gi"}}'}
    )
    assert (got.count, got.memory_mib) == (2, 8192)
    # Iluvatar's defaults (whole memory, cores 0) are replaced too; explicit values conflict.
    key = "iluvatar.ai/BI-V150-vgpu"
    ilu = devices_of({key: 1}, **{"xpupool.io/request": '{"devices": {"cores": "20%"}}'})
    assert (ilu.memory_permille, ilu.core_permille) == (None, 200)


BAD: list[tuple[dict[str, Any], dict[str, str] | None, str]] = [
    (
        {"cpu": 1},
        {"xpupool.io/request": "A100:1"},
        'metadata.annotations["xpupool.io/request"]',
    ),
    (
        {"nvidia.com/gpu": 1},
        {"nvidia.com/use-gputype": " , "},
        'metadata.annotations["nvidia.com/use-gputype"]',
    ),
    (
        {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 100},
        {"xpupool.io/request": '{"devices": {"memory": "1Gi"}}'},
        'metadata.annotations["xpupool.io/request"].devices',
    ),
    ({"nvidia.com/gpu": -1}, None, 'spec.containers[0].resources.limits["nvidia.com/gpu"]'),
    ({"nvidia.com/gpu": "1.5"}, None, 'spec.containers[0].resources.limits["nvidia.com/gpu"]'),
    ({"nvidia.com/gpu": "two"}, None, 'spec.containers[0].resources.limits["nvidia.com/gpu"]'),
    ({"nvidia.com/gpu": True}, None, 'spec.containers[0].resources.limits["nvidia.com/gpu"]'),
    ({"nvidia.com/gpu": 65}, None, 'spec.containers[0].resources.limits["nvidia.com/gpu"]'),
    (
        {"nvidia.com/gpu": 1, "nvidia.com/gpumem-percentage": 120},
        None,
        'spec.containers[0].resources.limits["nvidia.com/gpumem-percentage"]',
    ),
    (
        {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 100, "nvidia.com/gpumem-percentage": 50},
        None,
        'spec.containers[0].resources.limits["nvidia.com/gpumem-percentage"]',
    ),
    ({"nvidia.com/gpumem": 1000}, None, 'spec.containers[0].resources.limits["nvidia.com/gpumem"]'),
    (
        {"nvidia.com/gpu": 1, "nvidia.com/gpumem": "16Gi"},
        None,
        'spec.containers[0].resources.limits["nvidia.com/gpumem"]',
    ),
    (
        {"nvidia.com/gpu": 1, "nvidia.com/gpucores": 101},
        None,
        'spec.containers[0].resources.limits["nvidia.com/gpucores"]',
    ),
    ({"nvidia.com/gpu": 1, "hygon.com/dcunum": 1}, None, "spec.containers[0].resources"),
    (
        {"nvidia.com/gpu": 1},
        {"hami.io/gpu-scheduler-policy": "binpack,spread"},
        'metadata.annotations["hami.io/gpu-scheduler-policy"]',
    ),
    (
        {"nvidia.com/gpu": 1},
        {"hami.io/gpu-scheduler-policy": "fastest"},
        'metadata.annotations["hami.io/gpu-scheduler-policy"]',
    ),
    (
        {"nvidia.com/gpu": 1},
        {"hami.io/gpu-scheduler-policy": "topology-aware"},
        'metadata.annotations["hami.io/gpu-scheduler-policy"]',
    ),
    (
        {"nvidia.com/gpu": 1},
        {"hami.io/node-scheduler-policy": "random"},
        'metadata.annotations["hami.io/node-scheduler-policy"]',
    ),
    (
        {"nvidia.com/gpu": 1},
        {"hami.io/node-scheduler-policy": "spread", "xpupool.io/profile": "binpack"},
        'metadata.annotations["hami.io/node-scheduler-policy"]',
    ),
    (
        {"nvidia.com/gpu": 1},
        {"xpupool.io/request": "A100:2"},
        'metadata.annotations["xpupool.io/request"].devices.count',
    ),
    (
        {"nvidia.com/gpu": 1},
        {"xpupool.io/request": "A100:1 replicas=2"},
        'metadata.annotations["xpupool.io/request"]',
    ),
    (
        {"nvidia.com/gpu": 1},
        {"xpupool.io/request": '{"devices": {"memroy": "1Gi"}}'},
        'metadata.annotations["xpupool.io/request"].devices.memroy',
    ),
    (
        {"nvidia.com/gpu": 1},
        {"xpupool.io/request": '{"queue": "a"}', "xpupool.io/queue": "b"},
        'metadata.annotations["xpupool.io/queue"]',
    ),
    (
        {"nvidia.com/gpu": 1},
        {"xpupool.io/priority": "high"},
        'metadata.annotations["xpupool.io/priority"].priority',
    ),
    (
        {"nvidia.com/gpu": 1},
        {"xpupool.io/software": "cuda>=="},
        'metadata.annotations["xpupool.io/software"].devices.software[0]',
    ),
    (
        {"nvidia.com/gpu": 1},
        {"xpupool.io/request": "Ascend:1"},
        'metadata.annotations["xpupool.io/request"].devices.vendors',
    ),
]


@pytest.mark.parametrize(("limits", "annotations", "field"), BAD)
def test_invalid_pods_name_the_field(
    limits: dict[str, Any], annotations: dict[str, str] | None, field: str
) -> None:
    with pytest.raises(PodRequestError) as exc:
        pod_demand(pod(ctr(limits=limits), annotations=annotations))
    assert exc.value.field == field


@pytest.mark.parametrize(
    ("body", "field"),
    [
        (None, "pod"),
        ({"metadata": {}, "spec": {"containers": "x"}}, "spec.containers"),
        ({"spec": {"containers": []}}, "spec.containers"),
        ({"spec": {"containers": [{"name": 3}]}}, "spec.containers[0].name"),
        (
            {"spec": {"containers": [{"name": "a", "resources": []}]}},
            "spec.containers[0].resources",
        ),
        (
            {"metadata": {"annotations": {"a": 1}}, "spec": {"containers": [{"name": "a"}]}},
            'metadata.annotations["a"]',
        ),
        (
            {"metadata": {"annotations": {"a": "x" * 300_000}}, "spec": {"containers": []}},
            "metadata.annotations",
        ),
        ({"spec": {"containers": [{"name": "c"}] * 300}}, "spec.containers"),
        (
            {
                "spec": {
                    "containers": [
                        {"name": "c", "resources": {"limits": {"nvidia.com/gpu": 1, "cpu": "-1"}}}
                    ]
                }
            },
            'spec.containers[0].resources.limits["cpu"]',
        ),
        (
            {
                "spec": {
                    "containers": [
                        {"name": "c", "resources": {"limits": {"nvidia.com/gpu": "9" * 80}}}
                    ]
                }
            },
            'spec.containers[0].resources.limits["nvidia.com/gpu"]',
        ),
    ],
)
def test_garbage_pods(body: object, field: str) -> None:
    with pytest.raises(PodRequestError) as exc:
        pod_demand(body)
    assert exc.value.field == field


def test_deeply_nested_request_annotation_is_refused() -> None:
    text = '{"devices": ' * 5000 + "{}" + "}" * 5000
    with pytest.raises(PodRequestError):
        pod_demand(pod(ctr(limits={"nvidia.com/gpu": 1}), annotations={"xpupool.io/request": text}))


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(1 << 70), 1 << 70) | st.text(max_size=12),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=12,
)
quantities = st.one_of(
    st.sampled_from(["1", "0", "-1", "1.5", "500m", "16Gi", "1e3", "1e99", "", "x", "+2", ".5"]),
    json_values,
)
resource_maps = st.dictionaries(
    st.sampled_from([*sorted(RESOURCES), "cpu", "memory", "other.io/x"]), quantities, max_size=4
)
annotation_maps = st.dictionaries(
    st.sampled_from(
        [
            "nvidia.com/use-gputype",
            "nvidia.com/nouse-gpuuuid",
            "hami.io/gpu-scheduler-policy",
            "hami.io/node-scheduler-policy",
            "xpupool.io/request",
            "xpupool.io/site",
            "xpupool.io/priority",
            "xpupool.io/software",
        ]
    ),
    st.text(max_size=20) | st.sampled_from(["binpack", "A100:1", "{}", '{"devices": 1}', "spread"]),
    max_size=3,
)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.fixed_dictionaries({"limits": resource_maps, "requests": resource_maps}), max_size=3
    ),
    annotation_maps,
    json_values,
)
@pytest.mark.slow
def test_garbage_raises_only_pod_request_error(
    resources: list[dict[str, Any]], annotations: dict[str, str], junk: object
) -> None:
    body = pod(*(ctr(f"c{i}", **r) for i, r in enumerate(resources)), annotations=annotations)
    for candidate in (body, junk, {"spec": junk}, {"spec": {"containers": [junk]}}):
        with contextlib.suppress(PodRequestError):
            pod_demand(candidate)


def test_software_alone_on_a_pod_without_device_resources_names_its_annotation() -> None:
    """Found by the garbage test: ``xpupool.io/software`` with no container asking for a device
    raised KeyError (the message looked up ``xpupool.io/request``, which was not there)."""
    body = pod(ctr("c0"), annotations={"xpupool.io/software": "cuda>=12.4"})
    with pytest.raises(PodRequestError) as info:
        pod_demand(body)
    assert "xpupool.io/software" in str(info.value)
    assert "no container has a device resource" in str(info.value)
