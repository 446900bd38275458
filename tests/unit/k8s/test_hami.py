"""HAMi v2.10.0's annotation codecs against fixtures written from pkg/device/devices.go."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from xpupool.k8s.codec.hami import (
    ALLOCATING,
    MAX_ANNOTATION_CHARS,
    ContainerDevice,
    DeviceInfo,
    HamiAnnotationError,
    assignment_annotations,
    container_device,
    core_permille,
    decode_device_infos,
    decode_pod_devices,
    decode_register,
    encode_legacy_register,
    encode_pod_devices,
    encode_register,
    info_from_device,
    kind_by_register_key,
    node_devices,
    pod_assignment,
)
from xpupool.k8s.codec.resource_names import kind_by_type
from xpupool.model import DeviceShare

FIXTURES = Path(__file__).parents[2] / "fixtures" / "k8s" / "hami"
NVIDIA_KEY = "hami.io/node-nvidia-register"


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


def test_nvidia_json_registration() -> None:
    devices = decode_register(NVIDIA_KEY, fixture("node-nvidia-register.json"))
    first, second = devices
    assert first.uuid == "GPU-8f2c0d6e-0000-4000-8000-000000000000"
    assert (first.vendor, first.model, first.memory_mib) == ("nvidia", "A100-SXM4-80GB", 81920)
    assert (first.compute_units, first.max_tasks, first.numa_node, first.index) == (100, 10, 0, 0)
    assert first.healthy
    # index, numa and health are omitempty: present only when non-zero.
    assert (second.index, second.numa_node, second.healthy) == (1, 1, False)


def test_json_registration_round_trips_byte_for_byte() -> None:
    for name in ("node-nvidia-register.json", "node-register-Ascend910B3.json"):
        raw = fixture(name)
        assert encode_register(decode_device_infos(NVIDIA_KEY, raw)) == raw


def test_our_devices_encode_as_hami_registers_them() -> None:
    kind = kind_by_register_key(NVIDIA_KEY)
    assert kind is not None
    devices = decode_register(NVIDIA_KEY, fixture("node-nvidia-register.json"))
    again = decode_register(
        NVIDIA_KEY, encode_register([info_from_device(d, kind) for d in devices])
    )
    assert again == devices


def test_ascend_registration() -> None:
    key = "hami.io/node-register-Ascend910B3"
    devices = decode_register(key, fixture("node-register-Ascend910B3.json"))
    assert [(d.vendor, d.model, d.max_tasks) for d in devices] == [("huawei", "910B3", 4)] * 2


def test_legacy_registration() -> None:
    raw = fixture("node-nvidia-register-legacy.txt")
    infos = decode_device_infos(NVIDIA_KEY, raw)
    assert infos[1] == DeviceInfo(
        id="GPU-bbbb",
        index=1,
        count=10,
        devmem=32768,
        devcore=100,
        type="NVIDIA-Tesla V100-SXM2-32GB",
        numa=1,
        mode="hami-core",
        health=False,
    )
    assert encode_legacy_register(infos) == raw
    devices = decode_register(NVIDIA_KEY, raw)
    assert [d.model for d in devices] == ["V100-SXM2-32GB"] * 2


def test_hygon_legacy_seven_and_nine_fields() -> None:
    devices = decode_register("hami.io/node-dcu-register", fixture("node-dcu-register.txt"))
    assert [(d.uuid, d.vendor, d.index, d.max_tasks) for d in devices] == [
        ("DCU-0", "hygon", 0, 4),
        ("DCU-1", "hygon", 0, 4),
    ]
    infos = decode_device_infos("hami.io/node-dcu-register", fixture("node-dcu-register.txt"))
    assert infos[1].mode == "hami-core"  # DecodeNodeDevices' default for 7 fields


def test_pod_devices_round_trip_and_order() -> None:
    raw = fixture("vgpu-devices.txt")
    containers = decode_pod_devices("hami.io/vgpu-devices-allocated", raw)
    assert containers == (
        (ContainerDevice("GPU-aaaa", "NVIDIA", 2000, 30),),
        (),
        (
            ContainerDevice("GPU-bbbb", "NVIDIA", 4000, 0),
            ContainerDevice("GPU-cccc", "NVIDIA", 4000, 0),
        ),
    )
    assert encode_pod_devices(containers) == raw
    assert encode_pod_devices([[], []]) == ";;"
    assert decode_pod_devices("k", "") == ((),)
    # More than 4 fields: HAMi ignores the rest, and so do we.
    assert decode_pod_devices("k", "G,NVIDIA,1,2,extra:;") == (
        (ContainerDevice("G", "NVIDIA", 1, 2),),
    )


def test_assignment_annotations() -> None:
    kind = kind_by_type("NVIDIA")
    assert kind is not None
    shares = [[ContainerDevice("GPU-aaaa", "NVIDIA", 2000, 30)]]
    annotations = assignment_annotations(kind, shares, "gpu-1", 1_790_000_000)
    assert annotations == {
        "hami.io/vgpu-node": "gpu-1",
        "hami.io/vgpu-time": "1790000000",
        "hami.io/vgpu-devices-to-allocate": "GPU-aaaa,NVIDIA,2000,30:;",
        "hami.io/vgpu-devices-allocated": "GPU-aaaa,NVIDIA,2000,30:;",
        "hami.io/bind-phase": ALLOCATING,
        "hami.io/bind-time": "1790000000",
    }
    dcu = kind_by_type("DCU")
    assert dcu is not None
    assert "hami.io/dcu-devices-to-allocate" in assignment_annotations(dcu, [[]], "n", 0)


@pytest.mark.parametrize(
    ("key", "value", "field"),
    [
        (NVIDIA_KEY, "[{", NVIDIA_KEY),
        (NVIDIA_KEY, "[1]", f"{NVIDIA_KEY}[0]"),
        (NVIDIA_KEY, '[{"id":"a","count":1,"devmem":"lots"}]', f"{NVIDIA_KEY}[0].devmem"),
        (NVIDIA_KEY, '[{"id":"a","count":1,"devmem":5e10}]', f"{NVIDIA_KEY}[0].devmem"),
        (NVIDIA_KEY, '[{"id":"a","count":1,"devmem":1,"health":"yes"}]', f"{NVIDIA_KEY}[0].health"),
        (NVIDIA_KEY, '[{"id":"a","count":0,"devmem":1}]', f"{NVIDIA_KEY}[0].count"),
        (NVIDIA_KEY, '[{"id":"a","count":1,"devmem":0}]', f"{NVIDIA_KEY}[0].devmem"),
        (NVIDIA_KEY, '[{"count":1,"devmem":1}]', f"{NVIDIA_KEY}[0].id"),
        (
            NVIDIA_KEY,
            '[{"id":"a","count":1,"devmem":1},{"ID":"a","count":1,"devmem":1}]',
            f"{NVIDIA_KEY}[1].id",
        ),
        (NVIDIA_KEY, "GPU-a,10,1,100,T,0,true", NVIDIA_KEY),
        (NVIDIA_KEY, "GPU-a,10,1,100:", f"{NVIDIA_KEY}[0]"),
        (NVIDIA_KEY, "GPU-a,ten,1,100,T,0,true:", f"{NVIDIA_KEY}[0].count"),
        (NVIDIA_KEY, "GPU-a,10,1,100,T,0,maybe:", f"{NVIDIA_KEY}[0].health"),
        (NVIDIA_KEY, "GPU-a,10,1,100,T,0,true,-1,m:", f"{NVIDIA_KEY}[0].index"),
        (NVIDIA_KEY, "GPU-a,10,99999999999,100,T,0,true:", f"{NVIDIA_KEY}[0].devmem"),
        (NVIDIA_KEY, 7, NVIDIA_KEY),
        ("hami.io/node-unknown-register", "[]", "hami.io/node-unknown-register"),
        (NVIDIA_KEY, "[" + "{}," * (MAX_ANNOTATION_CHARS // 3) + "{}]", NVIDIA_KEY),
    ],
)
def test_bad_registrations_name_key_entry_and_field(key: str, value: object, field: str) -> None:
    with pytest.raises(HamiAnnotationError) as exc:
        decode_register(key, value)
    assert exc.value.field == field


@pytest.mark.parametrize(
    ("value", "field"),
    [
        ("GPU-a,NVIDIA,1:;", "k[0]"),
        ("GPU-a,NVIDIA,1,2:;GPU-b,NVIDIA,x,2:;", "k[1].usedmem"),
        ("GPU-a,NVIDIA,1,2:;GPU-b,NVIDIA,1,2.5:", "k[1].usedcores"),
        (",NVIDIA,1,2:", "k[0].uuid"),
        ("garbage", "k[0]"),
        (None, "k"),
    ],
)
def test_bad_pod_devices(value: object, field: str) -> None:
    with pytest.raises(HamiAnnotationError) as exc:
        decode_pod_devices("k", value)
    assert exc.value.field == field


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.sampled_from('[]{}":,;-+0123456789aeftrudGPU- '), max_size=200))
@pytest.mark.slow
def test_garbage_registrations_raise_only_the_documented_error(text: str) -> None:
    for key in (NVIDIA_KEY, "hami.io/node-dcu-register"):
        with contextlib.suppress(HamiAnnotationError):
            decode_register(key, text)
    with contextlib.suppress(HamiAnnotationError):
        decode_pod_devices("k", text)


uuids = st.text(alphabet="abcdefGPU-0123456789", min_size=1, max_size=12)
shares = st.builds(
    ContainerDevice,
    uuid=uuids,
    type=st.sampled_from(["NVIDIA", "DCU", "Ascend910B3"]),
    used_mem_mib=st.integers(0, (1 << 31) - 1),
    used_cores=st.integers(0, 100),
)


@given(st.lists(st.lists(shares, max_size=4).map(tuple), min_size=1, max_size=5).map(tuple))
@pytest.mark.slow
def test_pod_devices_round_trip_property(
    containers: tuple[tuple[ContainerDevice, ...], ...],
) -> None:
    assert decode_pod_devices("k", encode_pod_devices(containers)) == containers


def test_engine_shares_to_hami_and_back() -> None:
    nvidia, mthreads = kind_by_type("NVIDIA"), kind_by_type("Mthreads")
    assert nvidia is not None
    assert mthreads is not None
    share = DeviceShare(uuid="GPU-a", slot=3, memory_mib=2000, core_permille=301)
    assert container_device(share, nvidia) == ContainerDevice("GPU-a", "NVIDIA", 2000, 31)
    assert container_device(share, mthreads).used_cores == 5
    assert core_permille(ContainerDevice("GPU-a", "NVIDIA", 1, 30), nvidia) == 300
    assert core_permille(ContainerDevice("m", "Mthreads", 1, 8), mthreads) == 500
    whole = DeviceShare(uuid="GPU-b", slot=0, memory_mib=81920, core_permille=1000)
    assert container_device(whole, nvidia).used_cores == 100


def test_node_devices_reads_every_registration() -> None:
    annotations = {
        NVIDIA_KEY: fixture("node-nvidia-register.json"),
        "hami.io/node-dcu-register": fixture("node-dcu-register.txt"),
        "hami.io/node-handshake": "Requesting_2026-11-27 05:00:00",
    }
    devices = node_devices(annotations)
    assert [d.vendor for d in devices] == ["nvidia", "nvidia", "hygon", "hygon"]
    assert node_devices({}) == ()
    clash = {**annotations, "hami.io/node-amd-register": '[{"id":"DCU-0","count":1,"devmem":1}]'}
    with pytest.raises(HamiAnnotationError) as exc:
        node_devices(clash)
    assert exc.value.field == "hami.io/node-amd-register[0].id"


def test_pod_assignment_reads_allocated_keys() -> None:
    annotations = {
        "hami.io/vgpu-devices-allocated": fixture("vgpu-devices.txt"),
        "hami.io/vgpu-devices-to-allocate": "ignored;",
        "hami.io/Ascend910B3-devices-allocated": "Ascend910B3-0,Ascend910B3,16384,0:;",
    }
    got = {kind.hami_type: containers for kind, containers in pod_assignment(annotations)}
    assert set(got) == {"NVIDIA", "Ascend910B3"}
    assert len(got["NVIDIA"]) == 3
    assert got["Ascend910B3"] == ((ContainerDevice("Ascend910B3-0", "Ascend910B3", 16384, 0),),)
    with pytest.raises(HamiAnnotationError) as exc:
        pod_assignment({"hami.io/dcu-devices-allocated": "x,DCU,1:;"})
    assert exc.value.key == "hami.io/dcu-devices-allocated"
