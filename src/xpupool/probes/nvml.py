"""NVIDIA GPUs through NVML (``nvidia-ml-py``, imported lazily: this module imports without it).

Identity and capacity come from NVML directly; the CUDA version the driver serves comes from
``nvmlSystemGetCudaDriverVersion`` (12040 -> "12.4"). NVLink peers are read per link and grouped into
connected components, which become link groups ("nvlink-0", ...). A metric NVML refuses for a device
(not supported, no permission) is None, with the reason kept in ``skipped`` for the agent to log.

A card's health (:meth:`NvmlProbe._health`) is the first of: the GPU lost (NVML answers
``NVML_ERROR_GPU_IS_LOST`` for it: the card read before is reported, unhealthy), a critical XID
since the last reading (``probes/nvml_xid.py``, when :meth:`NvmlProbe.watch_xids` runs),
volatile uncorrectable ECC errors, a failed or pending row remap (A100 and later) or page
retirement (earlier cards). An XID NVIDIA counts as an application's error is a warning: the card
stays healthy and the cause is reported (``probes/health_causes.py``). A card in MIG mode with
instances cut is reported as its instances (``probes/nvml_mig.py``); one in MIG mode whose
instances NVML cannot list, or with none cut, is reported as the card with ``mig_mode`` set.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any, ClassVar

from xpupool.probes.base import DeviceInfo, DeviceNodes, Health, canonical
from xpupool.probes.container_runtime import ContainerRuntime
from xpupool.probes.health_causes import xid_cause
from xpupool.probes.library import LibraryProbe
from xpupool.probes.nvml_mig import mig_instances
from xpupool.probes.nvml_xid import XidWatch

MIB = 1024 * 1024
NVIDIA_GPUS = Path("/proc/driver/nvidia/gpus")  # the driver's procfs: one folder per card
_MAX_LINKS = 18  # NVML_NVLINK_MAX_LINKS on Hopper; older parts answer "not supported" past theirs
GPU_IS_LOST = 15  # NVML_ERROR_GPU_IS_LOST (nvml.h)
_UNCORRECTED, _VOLATILE = 1, 0  # NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_VOLATILE_ECC


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

    def __init__(self, library: Any = None) -> None:
        super().__init__(library)
        self.xids: XidWatch | None = None
        self._last: dict[int, DeviceInfo] = {}  # by index: what a lost GPU is reported as

    def read_devices(self, lib: Any) -> list[DeviceInfo]:
        return self._discover(lib)

    def watch_xids(self, stop: threading.Event) -> XidWatch | None:
        """Start the thread that reads XID events (until ``stop``); None when NVML has no event
        sets here. NVML stays initialised while it runs: its init is counted, so the probe's
        own sessions open and close around it."""
        try:
            nvml = self.library()  # a host without NVIDIA's library or driver: no watch
            nvml.nvmlInit()
            handles = {}
            for i in range(nvml.nvmlDeviceGetCount()):
                handle = nvml.nvmlDeviceGetHandleByIndex(i)
                handles[_text(nvml.nvmlDeviceGetUUID(handle))] = handle
            watch = XidWatch(nvml, handles)
        except Exception as exc:
            self.skipped.append(f"XID events: {exc}")
            return None
        self.xids = watch
        threading.Thread(target=watch.run, args=(stop,), name="nvml-xid", daemon=True).start()
        return watch

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
        lost: list[DeviceInfo] = []
        for index, handle in enumerate(handles):
            try:
                uuid = _text(nvml.nvmlDeviceGetUUID(handle))
            except Exception as exc:
                if not _is_lost(nvml, exc):
                    raise
                lost.extend(self._lost(index, exc))
                continue
            bus = self.optional(partial(_bus_id, nvml, handle), "pci")
            if bus:
                bus_to_uuid[bus.lower()] = uuid
            infos.append({"index": index, "handle": handle, "uuid": uuid})
        peers = {
            info["uuid"]: self._nvlink_peers(nvml, info["handle"], bus_to_uuid) for info in infos
        }
        groups = _components(peers)
        found = list(lost)
        for info in infos:
            try:
                device = self._device(nvml, info, driver, runtimes, peers, groups)
            except Exception as exc:
                if not _is_lost(nvml, exc):
                    raise
                found.extend(self._lost(info["index"], exc))
                continue
            self._last[device.index] = device
            instances = None
            if device.mig_mode:
                instances = mig_instances(nvml, info["handle"], device, self.skipped)
            found.extend(instances if instances else (device,))
        return sorted(found, key=lambda d: d.index)

    def _lost(self, index: int, exc: Exception) -> list[DeviceInfo]:
        """The card at ``index`` as last read, unhealthy: NVML lost it (fallen off the bus, or
        a fault the driver cannot recover from). Never read yet: left out, with the reason."""
        before = self._last.get(index)
        if before is None:
            self.skipped.append(f"GPU {index}: lost before it was first read: {exc}")
            return []
        gone = f"gpu-lost: NVML_ERROR_GPU_IS_LOST ({exc})"
        return [
            replace(
                before,
                memory_used_mib=None,
                utilization_pct=None,
                power_watts=None,
                temperature_c=None,
                health=Health.UNHEALTHY,
                health_detail=gone,
            )
        ]

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
        """(health, cause): the first fault found, in the module's order; a warning XID leaves
        the card healthy with its cause. Checks NVML refuses (not supported on the card, no ECC)
        are skipped with the reason; none answering leaves the card healthy, as it answered the
        queries that read it."""
        warning = ""
        for xid in self.xids.take(uuid) if self.xids is not None else ():
            critical, cause = xid_cause(xid)
            if critical:
                return Health.UNHEALTHY, cause
            warning = warning or cause
        ecc = self._check(
            lambda: nvml.nvmlDeviceGetTotalEccErrors(handle, _UNCORRECTED, _VOLATILE),
            f"{uuid} volatile ECC",
        )
        if ecc:
            return (
                Health.UNHEALTHY,
                f"ecc-uncorrectable: {int(ecc)} volatile uncorrectable ECC error(s) since the "
                "driver loaded",
            )
        rows = self._check(lambda: nvml.nvmlDeviceGetRemappedRows(handle), f"{uuid} remapped rows")
        # (correctable, uncorrectable, pending, failure)
        if rows is not None and len(rows) >= 4 and rows[3]:
            return Health.UNHEALTHY, "row-remap-failed: row remapping failed"
        if rows is not None and len(rows) >= 3 and rows[2]:
            return Health.UNHEALTHY, "row-remap-pending: row remapping pending, reset needed"
        if rows is None:  # cards before A100 retire pages instead of remapping rows
            pending = self._check(
                lambda: nvml.nvmlDeviceGetRetiredPagesPendingStatus(handle),
                f"{uuid} retired pages",
            )
            if pending:
                return (
                    Health.UNHEALTHY,
                    "page-retire-pending: page retirement pending, reset needed",
                )
        return Health.HEALTHY, warning

    def _check(self, read: Any, what: str) -> Any:
        """As :meth:`optional`, but a lost GPU is raised: the card is reported lost, not
        healthy with a check skipped."""
        try:
            return read()
        except Exception as exc:
            if _is_lost(self.library(), exc):
                raise
            self.skipped.append(f"{what}: {exc}")
            return None


def _is_lost(nvml: Any, exc: Exception) -> bool:
    """Whether NVML said the GPU is lost (``NVML_ERROR_GPU_IS_LOST``)."""
    return getattr(exc, "value", None) == getattr(nvml, "NVML_ERROR_GPU_IS_LOST", GPU_IS_LOST)


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


def nvidia_minors(gpus: Path = NVIDIA_GPUS) -> dict[str, int]:
    """``{GPU UUID: device minor}`` from the NVIDIA driver's procfs
    (``<bus id>/information``: its ``GPU UUID:`` and ``Device Minor:`` lines, printed by
    nv-procfs.c in NVIDIA's open kernel modules); {} without the driver. ``/dev/nvidia<N>`` is
    named by the minor, which is not always the NVML index (cards hot-plugged, or bound out of
    PCI order): the sandbox's nodes and the share watch's proof of a card read it here."""
    out: dict[str, int] = {}
    try:
        entries = sorted(gpus.iterdir())
    except OSError:
        return out
    for entry in entries:
        try:
            text = (entry / "information").read_text()
        except OSError:
            continue
        fields = {
            k.strip(): v.strip() for k, _, v in (ln.partition(":") for ln in text.splitlines())
        }
        minor, uuid = fields.get("Device Minor", ""), fields.get("GPU UUID", "")
        if minor.isdigit() and uuid:
            out[uuid] = int(minor)
    return out


def device_nodes(indices: Sequence[int]) -> DeviceNodes:
    """NVIDIA: ``/dev/nvidia<N>`` per card, ``nvidiactl`` and ``nvidia-uvm`` (CUDA's unified memory)
    always, ``nvidia-uvm-tools`` and ``nvidia-modeset`` where the driver made them: the nodes
    ``nvidia-container-cli list`` prints for one GPU (quoted in "Container Runtime CDI与NRI介绍",
    developer.aliyun.com/article/1180698). ``N`` is the device's minor number: callers pass the
    driver's minors (:func:`nvidia_minors`) where they can, the NVML index otherwise. Containers do
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
