"""NVIDIA GPUs through NVML (``nvidia-ml-py``, imported lazily: this module imports without it).

Identity and capacity come from NVML directly; the CUDA version the driver serves comes from
``nvmlSystemGetCudaDriverVersion`` (12040 -> "12.4"). NVLink peers are read per link and grouped into
connected components, which become link groups ("nvlink-0", ...). A metric NVML refuses for a device
(not supported, no permission) is None, with the reason kept in ``skipped`` for the agent to log.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import Any, ClassVar

from xpupool.probes.base import DeviceInfo, DeviceNodes, Health, canonical
from xpupool.probes.container_runtime import ContainerRuntime
from xpupool.probes.library import LibraryProbe

MIB = 1024 * 1024
_MAX_LINKS = 18  # NVML_NVLINK_MAX_LINKS on Hopper; older parts answer "not supported" past theirs


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _bus_id(nvml: Any, handle: object) -> str:
    return _text(nvml.nvmlDeviceGetPciInfo(handle).busId)


class NvmlProbe(LibraryProbe):
    vendor: ClassVar[str] = "nvidia"
    module_name: ClassVar[str] = "pynvml"
    install_hint: ClassVar[str] = "install nvidia-ml-py"
    init_name: ClassVar[str] = "nvmlInit"
    shutdown_name: ClassVar[str] = "nvmlShutdown"

    def read_devices(self, lib: Any) -> list[DeviceInfo]:
        return self._discover(lib)

    def process_memory(self) -> dict[str, dict[int, int]]:
        """Device memory in MiB used by each process, per device UUID: ``{uuid: {pid: mib}}``.

        The agent compares this with what a job was given. Processes NVML reports without a
        figure (``usedGpuMemory`` None, e.g. under MIG without permission) are left out.
        """
        with self.session() as nvml:
            usage: dict[str, dict[int, int]] = {}
            for i in range(nvml.nvmlDeviceGetCount()):
                handle = nvml.nvmlDeviceGetHandleByIndex(i)
                uuid = _text(nvml.nvmlDeviceGetUUID(handle))
                per_pid: dict[int, int] = {}
                for read in (
                    "nvmlDeviceGetComputeRunningProcesses",
                    "nvmlDeviceGetGraphicsRunningProcesses",
                ):
                    procs = self.optional(partial(getattr(nvml, read), handle), f"{uuid} {read}")
                    for proc in procs or ():
                        used = getattr(proc, "usedGpuMemory", None)
                        if used is not None:
                            per_pid[int(proc.pid)] = (
                                per_pid.get(int(proc.pid), 0) + int(used) // MIB
                            )
                usage[uuid] = per_pid
            return usage

    # ------------------------------------------------------------------ internals
    def _discover(self, nvml: Any) -> list[DeviceInfo]:
        self.skipped = []
        driver = self.optional(lambda: _text(nvml.nvmlSystemGetDriverVersion()), "driver version")
        cuda_raw = self.optional(nvml.nvmlSystemGetCudaDriverVersion, "CUDA driver version")
        runtimes = {"cuda": f"{cuda_raw // 1000}.{cuda_raw % 1000 // 10}"} if cuda_raw else {}
        handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(nvml.nvmlDeviceGetCount())]
        bus_to_uuid = {}
        infos: list[dict[str, Any]] = []
        for index, handle in enumerate(handles):
            uuid = _text(nvml.nvmlDeviceGetUUID(handle))
            bus = self.optional(partial(_bus_id, nvml, handle), "pci")
            if bus:
                bus_to_uuid[bus.lower()] = uuid
            infos.append({"index": index, "handle": handle, "uuid": uuid})
        peers = {
            info["uuid"]: self._nvlink_peers(nvml, info["handle"], bus_to_uuid) for info in infos
        }
        groups = _components(peers)
        return [self._device(nvml, info, driver, runtimes, peers, groups) for info in infos]

    def _device(
        self,
        nvml: Any,
        info: dict[str, Any],
        driver: str | None,
        runtimes: dict[str, str],
        peers: dict[str, tuple[str, ...]],
        groups: dict[str, str],
    ) -> DeviceInfo:
        h, uuid = info["handle"], info["uuid"]
        name = _text(nvml.nvmlDeviceGetName(h))
        memory = nvml.nvmlDeviceGetMemoryInfo(h)
        util = self.optional(lambda: nvml.nvmlDeviceGetUtilizationRates(h).gpu, f"{uuid} util")
        power_mw = self.optional(lambda: nvml.nvmlDeviceGetPowerUsage(h), f"{uuid} power")
        temperature = self.optional(
            lambda: nvml.nvmlDeviceGetTemperature(h, nvml.NVML_TEMPERATURE_GPU), f"{uuid} temp"
        )
        sms = self.optional(
            lambda: nvml.nvmlDeviceGetAttributes(h).multiprocessorCount, f"{uuid} SM count"
        )
        numa = self.optional(lambda: nvml.nvmlDeviceGetNumaNodeId(h), f"{uuid} NUMA node")
        mig = self.optional(lambda: nvml.nvmlDeviceGetMigMode(h)[0], f"{uuid} MIG mode")
        health, detail = self._health(nvml, h, uuid)
        return DeviceInfo(
            vendor=self.vendor,
            model=name,
            canonical_model=canonical(name, self.vendor),
            uuid=uuid,
            index=info["index"],
            memory_total_mib=int(memory.total) // MIB,
            memory_used_mib=int(memory.used) // MIB,
            compute_units=int(sms) if sms is not None else None,
            utilization_pct=float(util) if util is not None else None,
            power_watts=power_mw / 1000.0 if power_mw is not None else None,
            temperature_c=float(temperature) if temperature is not None else None,
            driver_version=driver,
            runtimes=dict(runtimes),
            numa_node=int(numa) if numa is not None and numa >= 0 else None,
            link_group=groups.get(uuid),
            peers=peers.get(uuid, ()),
            health=health,
            health_detail=detail,
            mig_mode=bool(mig) if mig is not None else None,
        )

    def _nvlink_peers(
        self, nvml: Any, handle: object, bus_to_uuid: dict[str, str]
    ) -> tuple[str, ...]:
        found: set[str] = set()
        for link in range(_MAX_LINKS):
            try:
                if not nvml.nvmlDeviceGetNvLinkState(handle, link):
                    continue
                bus = _text(nvml.nvmlDeviceGetNvLinkRemotePciInfo(handle, link).busId).lower()
            except Exception:
                continue  # link absent or NVLink not supported: no peer on it
            if bus in bus_to_uuid:
                found.add(bus_to_uuid[bus])
        return tuple(sorted(found))

    def _health(self, nvml: Any, handle: object, uuid: str) -> tuple[Health, str]:
        """Remapped-row failure (A100 and later) marks a GPU unhealthy; no answer means unknown."""
        try:
            rows = nvml.nvmlDeviceGetRemappedRows(handle)
        except Exception as exc:
            self.skipped.append(f"{uuid} remapped rows: {exc}")
            return Health.HEALTHY, "answers NVML queries; remapped rows not reported"
        # (correctable, uncorrectable, pending, failure)
        if len(rows) >= 4 and rows[3]:
            return Health.UNHEALTHY, "row remapping failed"
        if len(rows) >= 3 and rows[2]:
            return Health.UNHEALTHY, "row remapping pending: reset needed"
        return Health.HEALTHY, ""


def _components(peers: dict[str, tuple[str, ...]]) -> dict[str, str]:
    """NVLink-connected components with more than one GPU, named nvlink-0, nvlink-1, ... in UUID
    order, so names are stable across restarts."""
    seen: dict[str, str] = {}
    count = 0
    for start in sorted(peers):
        if start in seen or not peers[start]:
            continue
        stack, members = [start], set()
        while stack:
            uuid = stack.pop()
            if uuid in members:
                continue
            members.add(uuid)
            stack.extend(p for p in peers.get(uuid, ()) if p not in members)
        for uuid in members:
            seen[uuid] = f"nvlink-{count}"
        count += 1
    return seen


def device_nodes(indices: Sequence[int]) -> DeviceNodes:
    """NVIDIA: ``/dev/nvidia<N>`` per card, ``nvidiactl`` and ``nvidia-uvm`` (CUDA's unified memory)
    always, ``nvidia-uvm-tools`` and ``nvidia-modeset`` where the driver made them: the nodes
    ``nvidia-container-cli list`` prints for one GPU (quoted in "Container Runtime CDI与NRI介绍",
    developer.aliyun.com/article/1180698). ``N`` is the device's minor number, taken to be its
    NVML index; the two agree unless cards were hot-plugged or bound out of PCI order. Containers do
    not use this list: the NVIDIA toolkit passes nodes and libraries (:func:`container_devices`).
    """
    return DeviceNodes(
        required=(*(f"nvidia{i}" for i in indices), "nvidiactl", "nvidia-uvm"),
        optional=("nvidia-uvm-tools", "nvidia-modeset"),
    )


def container_devices(uuids: Sequence[str], runtime: ContainerRuntime) -> list[str]:
    """The runtime arguments that give a container exactly these NVIDIA cards (or MIG instances).

    CDI, ``--device nvidia.com/gpu=<UUID>`` per card, where the runtime reads CDI specs (the
    toolkit names a device by index and by UUID: NVIDIA Container Toolkit, "Support for Container
    Device Interface"). Otherwise docker's ``--gpus "device=<UUID>,<UUID>"``: the double quotes are
    part of the value, because docker reads it as CSV and would split an unquoted list at the comma
    (the toolkit's "Specialized Configurations with Docker": ``'"device=2,3"'``).
    """
    if not uuids:
        return []
    if runtime.cdi:
        return [arg for uuid in uuids for arg in ("--device", f"nvidia.com/gpu={uuid}")]
    return ["--gpus", f'"device={",".join(uuids)}"']
