"""What the node's devices read now, and what each replica uses of them.

Readings come from the same probes that build the inventory; a reading a probe cannot take stays
None on the wire (absent from Prometheus, never a made-up zero) and its reason is logged once per
device and metric. Where a probe can list device memory per process (NVML's running processes:
``process_memory()``), the processes are mapped to replicas by the cgroup the agent made for each
replica (``/proc/PID/cgroup``: a job cannot leave it nor claim another's; never its environment),
or, for an image replica, by the container id in its cgroup path (the engine's cgroup holds a
container: ``libpod-<id>``, ``docker-<id>.scope``; the runtime wrote the id to the replica's
``--cidfile``), or by process group where the agent has no cgroups, and a replica using more than
it was granted on a card is flagged: logged, and reported with the reason so the server records
it on the job; past the grace of ``shares`` (``agent/share_watch.py``) it is stopped.

Each reading says whether a card is healthy and why not (``health_cause``, its kind first:
``probes/health_causes.py``). A cause whose kind the operator lists as a warning (the agent's
``--health-warning``) is reported with the card healthy: the server shows and counts it, and
leaves the card and its jobs alone.

A per-process row of a tool that prints process names (npu-smi, cnmon, hy-smi, xpu-smi: a probe
with ``prints_names``; also the Iluvatar, Enflame and MetaX libraries, whose card mapping is
unverified on hardware) is charged to a card only when its process holds that card's device node
open (``agent/card_holders.py``): a job can forge such a row through its name; a row that fails is
dropped from the reading and logged (at most once a minute per card and PID). NVML's and amdsmi's
rows come from the driver and are charged as reported. The check's descriptor budget is per
replica (``read``'s ``owner``), so one job's many open files cannot leave another's rows
unchecked; a replica whose own rows go unchecked is named in ``Reading.unmeasured``
(``agent/unmeasured.py``).
"""

from __future__ import annotations

import logging
import os
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from xpupool.agent.card_holders import SYS_DRM, Budget, card_nodes, held_nodes
from xpupool.agent.share_watch import ShareWatch
from xpupool.agent.unmeasured import UnmeasuredWatch
from xpupool.probes.base import DeviceInfo, Health, Probe, ProbeError
from xpupool.probes.device_nodes import DEV
from xpupool.probes.health_causes import is_warning
from xpupool.probes.host import discover_host
from xpupool.probes.nvml import NVIDIA_GPUS
from xpupool.server.schemas.agent_protocol import DeviceMetrics, Work

log = logging.getLogger("xpupool.agent")

ProcessMemory = Mapping[str, Mapping[int, int]]  # {uuid: {pid: MiB}}
Key = tuple[int, int]  # (job, replica)
Owner = Callable[[int], Key | None]  # the replica a PID belongs to, or None
_FIELDS = ("memory_used_mib", "utilization_pct", "power_w", "temperature_c", "healthy")
# a replica's cgroup is named by its run id (agent/launch/spec.py run_id): node-job-replica-alloc-hex
_RUN_CGROUP = re.compile(r"^(?P<node>.+)-(?P<job>\d+)-(?P<replica>\d+)-\d+-[0-9a-f]{8}$")
_CONTAINER_ID = re.compile(r"(?<![0-9a-f])[0-9a-f]{64}(?![0-9a-f])")  # docker's and podman's ids
UNPROVEN_LOG_S = 60.0  # a row that fails the device-node check is logged at most this often


def proc_cgroup(pid: int) -> str:
    """``/proc/PID/cgroup`` of ``pid``; OSError when it is gone (or of another namespace)."""
    with open(f"/proc/{pid}/cgroup") as f:
        return f.read()


def container_of_cgroup(
    text: str, containers: Mapping[str, tuple[int, int]]
) -> tuple[int, int] | None:
    """The (job, replica) whose container a process is in, read from its ``/proc/PID/cgroup``
    text: a 64-hex id in the path that ``containers`` (id -> replica) knows; None: none."""
    for line in text.splitlines():
        for cid in _CONTAINER_ID.findall(line.split(":", 2)[-1]):
            if cid in containers:
                return containers[cid]
    return None


def replica_of_cgroup(text: str, node: str) -> tuple[int, int] | None:
    """The (job, replica) whose cgroup, made by this node's agent, a process is in, read from its
    ``/proc/PID/cgroup`` text (v2's one line, or v1's one per hierarchy); None: none of ours."""
    for line in text.splitlines():
        path = line.split(":", 2)[-1]
        for part in reversed(path.strip("/").split("/")):
            found = _RUN_CGROUP.match(part)
            if found is not None and found["node"] == node:
                return int(found["job"]), int(found["replica"])
    return None


@dataclass(slots=True)
class Reading:
    """One pass over the probes: the devices found and what could not be read."""

    devices: list[DeviceInfo] = field(default_factory=list)
    failures: list[ProbeError] = field(default_factory=list)
    process_memory: dict[str, dict[int, int]] | None = None  # None: no probe can tell
    # replicas whose rows were left unchecked (their processes' files), per card uuid
    unmeasured: dict[Key, set[str]] = field(default_factory=dict)


def device_metrics(d: DeviceInfo, warnings: frozenset[str] = frozenset()) -> DeviceMetrics:
    """The wire form of a device's live readings; unknown health is None, not healthy. A cause
    listed in ``warnings`` (kinds, or XID numbers) leaves the card healthy."""
    healthy = None if d.health is Health.UNKNOWN else d.health is Health.HEALTHY
    cause = d.health_detail or None
    if healthy is False and cause is not None and is_warning(cause, warnings):
        healthy = True
    return DeviceMetrics(
        uuid=d.uuid,
        memory_used_mib=d.memory_used_mib,
        utilization_pct=d.utilization_pct,
        power_w=d.power_watts,
        temperature_c=d.temperature_c,
        healthy=healthy,
        health_cause=cause,
    )


class Monitor:
    """Reads ``probes`` each pass; logs each distinct failure or missing metric once."""

    def __init__(
        self,
        probes: Sequence[Probe],
        pgid_of: Callable[[int], int] = os.getpgid,
        warnings: frozenset[str] = frozenset(),
        shares: ShareWatch | None = None,
        cgroup_of: Callable[[int], str] = proc_cgroup,
        unmeasured: UnmeasuredWatch | None = None,
        dev_root: Path = DEV,
        sys_drm: Path = SYS_DRM,
        nvidia_gpus: Path = NVIDIA_GPUS,
    ) -> None:
        self.probes = list(probes)
        self.dev_root = dev_root  # where the cards' nodes are (a test: stand-ins)
        self.sys_drm = sys_drm  # where a render node's PCI bus id is read
        self.nvidia_gpus = nvidia_gpus  # where an NVIDIA card's device minor is read
        self.pgid_of = pgid_of
        self.cgroup_of = cgroup_of
        self.shares = shares  # None: over-share replicas are flagged, never stopped
        self.unmeasured = unmeasured  # None: replicas left unmeasured are only logged
        self.warnings = warnings  # health causes kept as warnings (--health-warning)
        self._logged: set[str] = set()
        self._said: dict[str, float] = {}  # what _every said last, when (monotonic)

    def _once(self, key: str, level: int, message: str, *args: object) -> None:
        if key not in self._logged:
            self._logged.add(key)
            log.log(level, message, *args)

    def read(self, owner: Owner | None = None) -> Reading:
        """Discover devices and, where a probe can, per-process device memory; never raises.
        ``owner``: the replica each PID belongs to (:meth:`owner_of`), so that each replica's
        rows are checked on a descriptor budget of its own; None: one budget for all."""
        found = discover_host(self.probes)
        for exc in found.failures:
            self._once(f"fail {exc}", logging.WARNING, "probe failed, devices left out: %s", exc)
        reading = Reading(found.devices, found.failures)
        reasons = [r for p in self.probes for r in getattr(p, "skipped", ()) or ()]
        unread: dict[str, int] = {}
        for d in found.devices:
            m = device_metrics(d, self.warnings)
            for name in _FIELDS:
                if getattr(m, name) is None:
                    unread[name] = unread.get(name, 0) + 1
                    why = next((r for r in reasons if r.startswith(d.uuid)), "not reported")
                    self._once(
                        f"{d.uuid} {name}",
                        logging.DEBUG,
                        "%s: %s cannot be read (%s); it is left out of metrics",
                        d.uuid,
                        name,
                        why,
                    )
        if unread:  # one line, not one per card and field (-v lists them)
            said = ", ".join(f"{name} of {n}" for name, n in sorted(unread.items()))
            self._once(
                f"unread {said}",
                logging.INFO,
                "not reported by the vendor tools, left out of metrics: %s device(s) (-v: which)",
                said,
            )
        for probe in self.probes:
            read = getattr(probe, "process_memory", None)
            covers = getattr(probe, "covers", None) or (probe.vendor,)  # xpu-smi: two vendors
            if read is None or not any(d.vendor in covers for d in found.devices):
                continue
            try:
                usage = read()
            except Exception as exc:
                self._once(f"procs {probe.vendor}", logging.INFO, "per-process memory: %s", exc)
                continue
            for why in getattr(probe, "rows_skipped", ()) or ():
                self._every(
                    f"row {probe.vendor} {why}",
                    "%s: a process row was left out, the others count: %s",
                    probe.vendor,
                    why,
                )
            if getattr(probe, "prints_names", False):  # a process name can forge its rows
                usage = self._proven(found.devices, usage, owner, reading)
            merged = reading.process_memory or {}
            for uuid, per_pid in usage.items():
                merged.setdefault(uuid, {}).update(per_pid)
            reading.process_memory = merged
        return reading

    def _proven(
        self,
        devices: Sequence[DeviceInfo],
        usage: Mapping[str, Mapping[int, int]],
        owner: Owner | None,
        reading: Reading,
    ) -> dict[str, dict[int, int]]:
        """``usage`` without the rows whose process does not hold its card's node open; a
        replica's row left unchecked is noted in ``reading.unmeasured``."""
        buses = {u: b for p in self.probes for u, b in (getattr(p, "bus_ids", None) or {}).items()}
        nodes = card_nodes(devices, self.dev_root, self.sys_drm, self.nvidia_gpus, buses)
        held: dict[int, frozenset[int] | None] = {}
        owners: dict[int, Key | None] = {}
        budgets: dict[Key | None, Budget] = {}  # each replica's own; None: no replica's
        out: dict[str, dict[int, int]] = {}
        for uuid, per_pid in usage.items():
            if uuid not in nodes:  # not a card this pass found: nothing to prove it by
                self._every(
                    f"unlisted {uuid}",
                    "%s: per-process rows of a card the probes did not list are ignored",
                    uuid,
                )
                continue
            rdevs = nodes[uuid]
            if rdevs is None:  # no per-card node known for its vendor
                self._once(
                    f"nodes {uuid}",
                    logging.WARNING,
                    "%s: no device node of its own is known, so its per-process rows are "
                    "charged as the vendor tool prints them (a process name can forge one)",
                    uuid,
                )
                out[uuid] = dict(per_pid)
                continue
            out[uuid] = {}
            for pid, mib in per_pid.items():
                if pid not in held:
                    key = owners[pid] = owner(pid) if owner is not None else None
                    if key not in budgets:
                        budgets[key] = Budget()
                    held[pid] = held_nodes(pid, budget=budgets[key])
                holds = held[pid]
                if holds is not None and rdevs & holds:
                    out[uuid][pid] = mib
                else:
                    key = owners[pid]
                    if holds is None and key is not None:
                        reading.unmeasured.setdefault(key, set()).add(uuid)
                    why = (
                        "it does not hold the card's device node open (a forged row?)"
                        if holds is not None
                        else "its open files cannot be checked (gone, not readable, or more "
                        "than the agent checks)"
                    )
                    self._every(
                        f"unproven {uuid} {pid}",
                        "%s: ignored the vendor tool's row of process %d (%d MiB): %s",
                        uuid,
                        pid,
                        mib,
                        why,
                    )
        return out

    def _every(self, key: str, message: str, *args: object) -> None:
        """A warning, said at most once per ``UNPROVEN_LOG_S`` for ``key`` (a job can repeat a
        forged row each pass; the log must not grow with it)."""
        now = time.monotonic()
        if now - self._said.get(key, -UNPROVEN_LOG_S) < UNPROVEN_LOG_S:
            return
        for old in [k for k, at in self._said.items() if now - at >= UNPROVEN_LOG_S]:
            del self._said[old]
        self._said[key] = now
        log.warning(message, *args)

    def owner_of(
        self,
        groups: Mapping[Key, int],
        node: str | None = None,
        containers: Mapping[str, Key] | None = None,
    ) -> Owner:
        """Which of the replicas ``groups`` (``{key: pgid}``) a PID belongs to: by the cgroup of
        ``node``'s agent, or its container (``containers``: id -> replica), else its process
        group (no cgroup: an agent not root); None: none of them (or gone)."""
        by_group = {pgid: key for key, pgid in groups.items()}
        boxes = containers or {}

        def owner(pid: int) -> Key | None:
            key = self._replica_of(pid, node, boxes)
            if key is None:
                try:
                    key = by_group.get(self.pgid_of(pid))
                except OSError:
                    return None  # gone, or another PID namespace (a container's)
            return key if key in groups else None

        return owner

    def replica_usage(
        self,
        groups: Mapping[Key, int],
        usage: ProcessMemory,
        node: str | None = None,
        containers: Mapping[str, Key] | None = None,
    ) -> dict[Key, dict[str, int]]:
        """Device memory per replica per card, MiB: the processes of each replica
        (:meth:`owner_of`)."""
        owner = self.owner_of(groups, node, containers)
        out: dict[Key, dict[str, int]] = {key: {} for key in groups}
        for uuid, per_pid in usage.items():
            for pid, mib in per_pid.items():
                key = owner(pid)
                if key is not None:
                    out[key][uuid] = out[key].get(uuid, 0) + mib
        return out

    def _replica_of(
        self, pid: int, node: str | None, containers: Mapping[str, tuple[int, int]]
    ) -> tuple[int, int] | None:
        if node is None and not containers:
            return None
        try:
            text = self.cgroup_of(pid)
        except OSError:
            return None
        key = replica_of_cgroup(text, node) if node is not None else None
        return key if key is not None else container_of_cgroup(text, containers)


def over_limit(work: Work, used: Mapping[str, int]) -> str:
    """Why a replica uses more device memory than it was granted, or ""."""
    parts = [
        f"{d.uuid} {used[d.uuid]} MiB > {d.memory_mib} MiB granted"
        for d in work.assignment.devices
        if used.get(d.uuid, 0) > d.memory_mib
    ]
    granted = {d.uuid for d in work.assignment.devices}
    parts += [
        f"{u} {mib} MiB on a device not granted" for u, mib in used.items() if u not in granted
    ]
    return "over its device memory: " + "; ".join(parts) if parts else ""
