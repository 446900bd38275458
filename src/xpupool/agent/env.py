"""The environment a replica's process starts with: which devices it may see and how much of them.

The allocation is the authority: its variables override the job's own ``env`` (the whole
environment is built in :func:`xpupool.agent.launch.spec.job_env`; nothing of the agent's is
inherited). Each vendor's runtime reads its own
visible-devices variable(s) (:data:`VISIBLE_DEVICES`); NVIDIA cards shared by fraction also get the
limits HAMi's in-container limiter (HAMi-core ``libvgpu.so``) reads, so a host that preloads it
enforces what the scheduler granted. ``XPUPOOL_*`` variables describe the allocation for any vendor.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from xpupool.server.schemas.agent_protocol import DeviceAssignment

# Per vendor key: the variables its runtime (and container toolkit) read to restrict devices, and
# whether each takes indices or UUIDs. Sources: NVIDIA CUDA programming guide "CUDA Environment
# Variables" (CUDA_VISIBLE_DEVICES, CUDA_DEVICE_ORDER); NVIDIA container toolkit
# (NVIDIA_VISIBLE_DEVICES takes UUIDs, as HAMi's NVIDIA device plugin sets it); ROCm (HIP_/
# ROCR_VISIBLE_DEVICES); Ascend docker runtime and CANN (ASCEND_VISIBLE_DEVICES,
# ASCEND_RT_VISIBLE_DEVICES; coldzerofear/device-mounter pkg/devices/ascend/npu/util.go); Cambricon
# (MLU_VISIBLE_DEVICES); Moore Threads mt-container-toolkit (MTHREADS_VISIBLE_DEVICES) and MUSA
# (MUSA_VISIBLE_DEVICES); MetaX MACA (MACA_VISIBLE_DEVICES; its torch is CUDA-API compatible, so
# CUDA_VISIBLE_DEVICES too); Enflame TopsRider (TOPS_VISIBLE_DEVICES); Kunlunxin XRE
# (XPU_VISIBLE_DEVICES); Intel Level Zero (ZE_AFFINITY_MASK). Iluvatar's ixsmi stack is CUDA
# compatible and reads CUDA_VISIBLE_DEVICES.
INDEX, UUID = "index", "uuid"
VISIBLE_DEVICES: Mapping[str, tuple[tuple[str, str], ...]] = {
    "nvidia": (("CUDA_VISIBLE_DEVICES", INDEX), ("NVIDIA_VISIBLE_DEVICES", UUID)),
    "amd": (("HIP_VISIBLE_DEVICES", INDEX), ("ROCR_VISIBLE_DEVICES", INDEX)),
    "hygon": (("HIP_VISIBLE_DEVICES", INDEX),),
    "huawei": (("ASCEND_RT_VISIBLE_DEVICES", INDEX), ("ASCEND_VISIBLE_DEVICES", INDEX)),
    "cambricon": (("MLU_VISIBLE_DEVICES", INDEX),),
    "mthreads": (("MTHREADS_VISIBLE_DEVICES", INDEX), ("MUSA_VISIBLE_DEVICES", INDEX)),
    "iluvatar": (("CUDA_VISIBLE_DEVICES", INDEX),),
    "metax": (("MACA_VISIBLE_DEVICES", INDEX), ("CUDA_VISIBLE_DEVICES", INDEX)),
    "enflame": (("TOPS_VISIBLE_DEVICES", INDEX),),
    "kunlunxin": (("XPU_VISIBLE_DEVICES", INDEX),),
    "intel": (("ZE_AFFINITY_MASK", INDEX),),
}
# Vendors whose empty visible-devices value means "no device" (CUDA and ROCm document this);
# Level Zero reads an empty ZE_AFFINITY_MASK as "all", so Intel cards cannot be hidden this way.
_HIDE_WITH_EMPTY = frozenset(VISIBLE_DEVICES) - {"intel"}

# HAMi-core reads per-device memory limits CUDA_DEVICE_MEMORY_LIMIT_<i> (i = the index the process
# sees, 0..n-1) as a number with an optional k/m/g suffix; HAMi's NVIDIA device plugin writes MiB as
# "<n>m" (e.g. "3000m"), the one form every HAMi-core version parses (Project-HAMi/HAMi-core issue
# 323: "4Gi" is read as 4 bytes). CUDA_DEVICE_SM_LIMIT is a whole percent; 0 means no limit, so a
# grant under 1 % is written as 1.
MEMORY_LIMIT_PREFIX = "CUDA_DEVICE_MEMORY_LIMIT_"
SM_LIMIT = "CUDA_DEVICE_SM_LIMIT"
HAMI_VENDORS = frozenset({"nvidia"})


@dataclass(frozen=True, slots=True)
class ReplicaEnv:
    """What :func:`device_env` adds, and what it hides (for logs and tests)."""

    variables: dict[str, str]
    hidden: tuple[str, ...]


def device_env(
    job_id: int,
    replica: int,
    node: str,
    devices: Sequence[DeviceAssignment],
    node_vendors: Iterable[str] = (),
) -> ReplicaEnv:
    """The allocation's variables for one replica.

    Devices are listed in the order they were granted; ``index`` is the node-local index the vendor
    tool prints, so NVIDIA replicas also get ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` (CUDA's default order
    is fastest-first, which need not match nvidia-smi/NVML). Vendors in ``node_vendors`` that the
    replica got no device of are hidden (their variable set empty) where an empty value means
    "none", so a CPU-only job on a GPU host sees no GPU.
    """
    out: dict[str, str] = {
        "XPUPOOL_JOB_ID": str(job_id),
        "XPUPOOL_REPLICA": str(replica),
        "XPUPOOL_NODE": node,
        "XPUPOOL_DEVICE_UUIDS": ",".join(d.uuid for d in devices),
        "XPUPOOL_DEVICE_INDICES": ",".join(str(d.index) for d in devices),
        "XPUPOOL_DEVICE_MEMORY_MIB": ",".join(str(d.memory_mib) for d in devices),
        "XPUPOOL_DEVICE_CORES_PERMILLE": ",".join(str(d.core_permille) for d in devices),
    }
    by_vendor: dict[str, list[DeviceAssignment]] = {}
    for d in devices:
        by_vendor.setdefault(d.vendor, []).append(d)
    for vendor, granted in by_vendor.items():
        for name, kind in VISIBLE_DEVICES.get(vendor, ()):
            out[name] = ",".join(_visible(d, name, kind) for d in granted)
        if vendor == "nvidia":
            out["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
        if vendor in HAMI_VENDORS:
            out.update(hami_limits(granted))
    hidden: list[str] = []
    for vendor in sorted(set(node_vendors) - set(by_vendor)):
        if vendor in _HIDE_WITH_EMPTY:
            for name, _ in VISIBLE_DEVICES.get(vendor, ()):
                if name not in out:  # a granted vendor sharing the name (metax/nvidia) wins
                    out[name] = ""
                    hidden.append(name)
    return ReplicaEnv(out, tuple(hidden))


def _visible(d: DeviceAssignment, name: str, kind: str) -> str:
    """How variable ``name`` names device ``d``: by UUID or index as the vendor's runtime reads
    it, except a MIG instance, which CUDA names only by its UUID (``CUDA_VISIBLE_DEVICES=MIG-...``:
    NVIDIA MIG User Guide, "CUDA Device Enumeration"); the card index it shares with its siblings
    would expose them all. A vNPU's index is its vNPU ID, which Ascend's runtime takes in
    ``ASCEND_VISIBLE_DEVICES`` (Ascend Virtual Instance guide: mounting vNPUs with Ascend Docker;
    HAMi sets the same variable, pkg/device/ascend/device.go at 4707fb02)."""
    if kind == UUID or (d.partition is not None and name == "CUDA_VISIBLE_DEVICES"):
        return d.uuid
    return str(d.index)


def as_seen_alone(env: Mapping[str, str], devices: Sequence[DeviceAssignment]) -> dict[str, str]:
    """``env`` for a replica whose ``/dev`` holds only its own cards (the bwrap sandbox, a
    container): the vendor's runtime then numbers them ``0..n-1`` in host order, so each
    index-based visible-devices variable of a granted vendor becomes those positions (host index
    3 alone is ``0``). Variables by UUID (a MIG instance's ``CUDA_VISIBLE_DEVICES`` too), hidden
    vendors' empty values and ``XPUPOOL_*`` (host indices, for the record) are kept. Slurm does
    the same for jobs confined to their GPUs by the devices cgroup (its CUDA_VISIBLE_DEVICES is
    then 0-based)."""
    out = dict(env)
    counts: dict[str, int] = {}
    by_uuid: set[str] = set()  # variables naming a vendor's devices by UUID (MIG instances)
    for d in devices:
        counts[d.vendor] = counts.get(d.vendor, 0) + 1
        if d.partition is not None and d.vendor == "nvidia":
            by_uuid.add("CUDA_VISIBLE_DEVICES")
    for vendor, n in counts.items():
        for name, kind in VISIBLE_DEVICES.get(vendor, ()):
            if kind == INDEX and name not in by_uuid:
                out[name] = ",".join(str(i) for i in range(n))
    return out


def hami_limits(devices: Sequence[DeviceAssignment]) -> dict[str, str]:
    """HAMi-core limits for a fractional grant; empty when every card is granted whole.

    Memory: ``CUDA_DEVICE_MEMORY_LIMIT_<i>`` for each visible index ``i`` whose grant is less than
    the card. Cores: one ``CUDA_DEVICE_SM_LIMIT`` for the process (HAMi-core has one value for all
    devices), the smallest grant, floored to a whole percent and at least 1, so no card runs above
    what it was granted; a memory-only share (0 cores reserved) gets no compute cap.
    """
    out: dict[str, str] = {}
    for i, d in enumerate(devices):
        if 0 < d.memory_mib < d.card_memory_mib:
            out[f"{MEMORY_LIMIT_PREFIX}{i}"] = f"{d.memory_mib}m"
    # 0 thousandths = no compute reserved (a memory-only share runs best-effort, as in HAMi): no cap
    cores = [d.core_permille for d in devices if 0 < d.core_permille < 1000]
    if cores:
        out[SM_LIMIT] = str(max(1, min(cores) // 10))
    return out
