"""Every extended resource HAMi v2.10.0 defines, as one table: which vendor, what each name counts.

HAMi (github.com/Project-HAMi/HAMi, commit 4707fb02c91c, tag v2.10.0) gives each device type its own
Go package with its own ``GenerateResourceRequests``; the differences between them are data, so they
are data here: one :class:`DeviceKind` row per HAMi device type, and :data:`RESOURCES`, built from the
rows, maps each resource name to its row and to what it counts. ``pod_request.py`` reads a container
through this table with one code path for every vendor. Names and defaults come from the chart's
``charts/hami/values.yaml`` and ``templates/scheduler/device-configmap.yaml`` and from each
``pkg/device/<vendor>/device.go`` (cited per row). Device types whose devices HAMi reads from node
capacity instead of an annotation carry no ``register_key``; Enflame's DRS slices
(``enflame.com/drs-gcu``) and AWS Neuron, Vastai and Biren are not in the table (vendors xpupool does
not model, or a request form it cannot express yet).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Literal

__all__ = [
    "DEVICE_KINDS",
    "RESOURCES",
    "Counts",
    "DeviceKind",
    "kind_by_type",
]


class Counts(StrEnum):
    """What one resource name counts, per container."""

    DEVICES = "devices"  # cards (or vGPU slots) per container: HAMi's Nums
    MEMORY = "memory"  # memory per card, in the row's memory_unit_mib
    MEMORY_PERCENT = "memory-percent"  # memory per card, percent of the card (1..100)
    CORES = "cores"  # compute per card, in the row's cores_per_card units
    TASK_PRIORITY = "task-priority"  # HAMi-core's CUDA_TASK_PRIORITY for the in-container limiter


RegisterFormat = Literal["json", "legacy"]


@dataclass(frozen=True, slots=True)
class DeviceKind:
    """One HAMi device type.

    ``hami_type`` is HAMi's type string (``ContainerDevice.Type``, its CommonWord: ``NVIDIA``,
    ``DCU``, ``Ascend910B3``); ``vendor`` is xpupool's vendor key; ``model`` the chip a per-chip
    resource name implies (None: any model of the vendor). ``memory_unit_mib``: MiB per unit of the
    memory resource (HAMi's MemoryFactor; Cambricon and Iluvatar count 256 MiB blocks).
    ``memory_suffix_is_bytes``: a quantity with a unit suffix is bytes (MetaX ``16Gi``), a bare
    number counts units. ``cores_per_card``: the cores resource's value for a whole card.
    ``default_cores``: HAMi's core request when none is given. ``whole_when_unshared``: HAMi's
    admission webhook gives a container that asks for a count with whole-card memory and no cores
    ``cores: 100`` (nvidia/device.go ``defaultExclusiveCoreIfNeeded``), i.e. the whole card.
    ``limits_only``: HAMi reads only ``resources.limits`` (else limits, then requests).
    ``per_container_totals``: memory and cores are totals for the container, divided by the count
    (Moore Threads). ``whole_only``: the type has only a count (whole cards).
    The annotation keys are HAMi's: type and UUID include/exclude lists, the pod's sharing mode
    (``mode_key``: the card's registered mode must occur in it) and NUMA binding
    (``numa_bind_key``: a container's cards on one NUMA node), the node registration
    and its format (``json``: ``UnMarshalNodeDevices``; ``legacy``: ``DecodeNodeDevices``), and the
    pod's device assignment (``to_allocate_key`` for the device plugin, ``allocated_key``).
    """

    hami_type: str
    vendor: str
    count: str
    source: str
    memory: str | None = None
    memory_percent: str | None = None
    cores: str | None = None
    task_priority: str | None = None
    model: str | None = None
    memory_unit_mib: int = 1
    memory_suffix_is_bytes: bool = False
    cores_per_card: int = 100
    default_cores: int = 0
    whole_when_unshared: bool = False
    limits_only: bool = False
    per_container_totals: bool = False
    use_type_key: str | None = None
    nouse_type_key: str | None = None
    use_uuid_key: str | None = None
    nouse_uuid_key: str | None = None
    mode_key: str | None = None
    numa_bind_key: str | None = None
    register_key: str | None = None
    register_format: RegisterFormat | None = None
    to_allocate_key: str | None = None
    allocated_key: str | None = None

    @property
    def whole_only(self) -> bool:
        return self.memory is None and self.memory_percent is None and self.cores is None

    def resource_names(self) -> tuple[tuple[str, Counts], ...]:
        pairs = (
            (self.count, Counts.DEVICES),
            (self.memory, Counts.MEMORY),
            (self.memory_percent, Counts.MEMORY_PERCENT),
            (self.cores, Counts.CORES),
            (self.task_priority, Counts.TASK_PRIORITY),
        )
        return tuple((name, counts) for name, counts in pairs if name is not None)


def _ascend(chip: str, common_word: str, model: str) -> DeviceKind:
    """A vNPU row of device-configmap.yaml ``vnpus.configs`` (ascend/device.go, vnpu.go)."""
    return DeviceKind(
        hami_type=common_word,
        vendor="huawei",
        model=model,
        count=f"huawei.com/{common_word}",
        memory=f"huawei.com/{common_word}-memory",
        cores=f"huawei.com/{common_word}-core",
        source=f"pkg/device/ascend/device.go; device-configmap.yaml vnpus chipName {chip}",
        use_uuid_key=f"hami.io/use-{common_word}-uuid",
        nouse_uuid_key=f"hami.io/no-use-{common_word}-uuid",
        register_key=f"hami.io/node-register-{common_word}",
        register_format="json",
        to_allocate_key=f"hami.io/{common_word}-devices-to-allocate",
        allocated_key=f"hami.io/{common_word}-devices-allocated",
    )


def _iluvatar(chip: str) -> DeviceKind:
    """An ``iluvatars`` row of device-configmap.yaml (iluvatar/device.go, MemoryFactor 256)."""
    return DeviceKind(
        hami_type=chip,
        vendor="iluvatar",
        model=chip,
        count=f"iluvatar.ai/{chip}-vgpu",
        memory=f"iluvatar.ai/{chip}.vMem",
        cores=f"iluvatar.ai/{chip}.vCore",
        memory_unit_mib=256,
        source="pkg/device/iluvatar/device.go; device-configmap.yaml iluvatars",
        use_uuid_key=f"hami.io/use-{chip}-uuid",
        nouse_uuid_key=f"hami.io/no-use-{chip}-uuid",
        register_key=f"hami.io/node-{chip}-register",
        register_format="legacy",
        to_allocate_key=f"hami.io/{chip}-devices-to-allocate",
        allocated_key=f"hami.io/{chip}-devices-allocated",
    )


DEVICE_KINDS: tuple[DeviceKind, ...] = (
    DeviceKind(
        hami_type="NVIDIA",
        vendor="nvidia",
        count="nvidia.com/gpu",
        memory="nvidia.com/gpumem",
        memory_percent="nvidia.com/gpumem-percentage",
        cores="nvidia.com/gpucores",
        task_priority="nvidia.com/priority",
        whole_when_unshared=True,
        source="pkg/device/nvidia/device.go (GenerateResourceRequests, defaultExclusiveCoreIfNeeded);"
        " values.yaml resourceName..resourcePriority; defaultMemory 0, defaultCores 0",
        use_type_key="nvidia.com/use-gputype",
        nouse_type_key="nvidia.com/nouse-gputype",
        use_uuid_key="nvidia.com/use-gpuuuid",
        nouse_uuid_key="nvidia.com/nouse-gpuuuid",
        mode_key="nvidia.com/vgpu-mode",
        numa_bind_key="nvidia.com/numa-bind",
        register_key="hami.io/node-nvidia-register",
        register_format="json",
        to_allocate_key="hami.io/vgpu-devices-to-allocate",
        allocated_key="hami.io/vgpu-devices-allocated",
    ),
    DeviceKind(
        hami_type="MLU",
        vendor="cambricon",
        count="cambricon.com/vmlu",
        memory="cambricon.com/mlu.smlu.vmemory",
        cores="cambricon.com/mlu.smlu.vcore",
        memory_unit_mib=256,
        default_cores=100,
        source="pkg/device/cambricon/device.go (MemoryFactor 256, corenum 100); values.yaml mlu*",
        use_type_key="cambricon.com/use-mlutype",
        nouse_type_key="cambricon.com/nouse-mlutype",
        use_uuid_key="cambricon.com/use-gpuuuid",
        nouse_uuid_key="cambricon.com/nouse-gpuuuid",
        to_allocate_key="hami.io/cambricon-mlu-devices-to-allocate",
        allocated_key="hami.io/cambricon-mlu-devices-allocated",
    ),
    DeviceKind(
        hami_type="DCU",
        vendor="hygon",
        count="hygon.com/dcunum",
        memory="hygon.com/dcumem",
        cores="hygon.com/dcucores",
        default_cores=100,
        source="pkg/device/hygon/device.go (corenum 100; memoryFactor 1 in the chart)",
        use_type_key="hygon.com/use-dcutype",
        nouse_type_key="hygon.com/nouse-dcutype",
        use_uuid_key="hygon.com/use-gpuuuid",
        nouse_uuid_key="hygon.com/nouse-gpuuuid",
        register_key="hami.io/node-dcu-register",
        register_format="legacy",
        to_allocate_key="hami.io/dcu-devices-to-allocate",
        allocated_key="hami.io/dcu-devices-allocated",
    ),
    _ascend("910A", "Ascend910A", "910A"),
    _ascend("910B2", "Ascend910B2", "910B2"),
    _ascend("910B3", "Ascend910B3", "910B3"),
    _ascend("910B4-1", "Ascend910B4-1", "910B4-1"),
    _ascend("910B4", "Ascend910B4", "910B4"),
    _ascend("310P3", "Ascend310P", "310P3"),
    _ascend("Ascend910", "Ascend910C", "910C"),
    _iluvatar("MR-V100"),
    _iluvatar("MR-V50"),
    _iluvatar("BI-V150"),
    _iluvatar("BI-V100"),
    DeviceKind(
        hami_type="Metax-SGPU",
        vendor="metax",
        count="metax-tech.com/sgpu",
        memory="metax-tech.com/vmemory",
        cores="metax-tech.com/vcore",
        memory_unit_mib=1024,
        memory_suffix_is_bytes=True,
        default_cores=100,
        limits_only=True,
        source="pkg/device/metax/sdevice.go (MemoryFactor 1024, core 100, limits only), config.go",
        use_uuid_key="metax-tech.com/use-gpuuuid",
        nouse_uuid_key="metax-tech.com/nouse-gpuuuid",
        to_allocate_key="hami.io/metax-sgpu-devices-to-allocate",
        allocated_key="hami.io/metax-sgpu-devices-allocated",
    ),
    DeviceKind(
        hami_type="Metax-GPU",
        vendor="metax",
        count="metax-tech.com/gpu",
        default_cores=100,
        source="pkg/device/metax/device.go (whole cards: mem 100 %, cores 100)",
        use_uuid_key="metax-tech.com/use-gpuuuid",
        nouse_uuid_key="metax-tech.com/nouse-gpuuuid",
        to_allocate_key="hami.io/metax-gpu-devices-to-allocate",
        allocated_key="hami.io/metax-gpu-devices-allocated",
    ),
    DeviceKind(
        hami_type="Mthreads",
        vendor="mthreads",
        count="mthreads.com/vgpu",
        memory="mthreads.com/sgpu-memory",
        cores="mthreads.com/sgpu-core",
        memory_unit_mib=512,
        cores_per_card=16,
        per_container_totals=True,
        source="pkg/device/mthreads/device.go (MemoryFactor 512, 16 cores a card, Memreq and "
        "Coresreq divided by Nums)",
        use_uuid_key="mthreads.ai/use-gpuuuid",
        nouse_uuid_key="mthreads.ai/nouse-gpuuuid",
        allocated_key="hami.io/mthreads-vgpu-devices-allocated",
    ),
    DeviceKind(
        hami_type="GCU",
        vendor="enflame",
        count="enflame.com/gcu",
        default_cores=100,
        source="pkg/device/enflame/gcu.go (whole cards)",
        use_uuid_key="enflame.com/use-gpuuuid",
        nouse_uuid_key="enflame.com/nouse-gpuuuid",
        to_allocate_key="hami.io/enflame-gcu-devices-to-allocate",
        allocated_key="hami.io/enflame-gcu-devices-allocated",
    ),
    DeviceKind(
        hami_type="kunlun",
        vendor="kunlunxin",
        count="kunlunxin.com/xpu",
        default_cores=100,
        source="pkg/device/kunlun/device.go (whole cards; allocated key only)",
        use_uuid_key="baidu.com/use-gpuuuid",
        nouse_uuid_key="baidu.com/nouse-gpuuuid",
        allocated_key="hami.io/kunlun-allocated",
    ),
    DeviceKind(
        hami_type="XPU",
        vendor="kunlunxin",
        count="kunlunxin.com/vxpu",
        memory="kunlunxin.com/vxpu-memory",
        source="pkg/device/kunlun/vdevice.go (memory in MiB; HAMi's webhook rounds it up to a "
        "vXPU slice size, which xpupool does not)",
        use_uuid_key="hami.io/use-xpu-uuid",
        nouse_uuid_key="hami.io/no-use-xpu-uuid",
        register_key="hami.io/node-register-xpu",
        register_format="json",
        to_allocate_key="hami.io/xpu-devices-to-allocate",
        allocated_key="hami.io/xpu-devices-allocated",
    ),
    DeviceKind(
        hami_type="AMD",
        vendor="amd",
        count="amd.com/gpu",
        memory="amd.com/gpumem",
        cores="amd.com/gpucores",
        default_cores=100,
        limits_only=True,
        source="pkg/device/amd/device.go (limits only; an omitted core limit is 100)",
        use_type_key="amd.com/use-gputype",
        nouse_type_key="amd.com/nouse-gputype",
        use_uuid_key="amd.com/use-gpu-uuid",
        nouse_uuid_key="amd.com/nouse-gpu-uuid",
        register_key="hami.io/node-amd-register",
        register_format="json",
        to_allocate_key="hami.io/amd-devices-to-allocate",
        allocated_key="hami.io/amd-devices-allocated",
    ),
)


def _index() -> dict[str, tuple[DeviceKind, Counts]]:
    table: dict[str, tuple[DeviceKind, Counts]] = {}
    for kind in DEVICE_KINDS:
        for name, counts in kind.resource_names():
            if name in table:
                raise AssertionError(f"resource {name} claimed twice")
            table[name] = (kind, counts)
    return table


# Resource name -> (its device type, what it counts): the one lookup pod_request.py uses.
RESOURCES: dict[str, tuple[DeviceKind, Counts]] = _index()
_BY_TYPE: dict[str, DeviceKind] = {kind.hami_type: kind for kind in DEVICE_KINDS}


def kind_by_type(hami_type: str) -> DeviceKind | None:
    """The row for HAMi's type string (``NVIDIA``, ``Ascend910B3``), or None."""
    return _BY_TYPE.get(hami_type)
