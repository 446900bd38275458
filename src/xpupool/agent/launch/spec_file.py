"""A launch specification and the settings it was built with, as JSON and back.

The agent decides a replica's spec (:func:`~xpupool.agent.launch.spec.build_spec`) and hands it to
the replica's supervisor, another process, which starts it through the same back end; this is
the form it travels in. Nothing is decided again on the way: the supervisor runs the spec it
reads.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import cast

from xpupool.agent.launch.cgroups import CgroupHost, CgroupPlan
from xpupool.agent.launch.identity import UidRange
from xpupool.agent.launch.ports import DEFAULT_PORTS, PortRange
from xpupool.agent.launch.runtime_config import RuntimeConfig
from xpupool.agent.launch.spec import (
    DEFAULT_PULL_POLICY,
    DEFAULT_PULL_TIMEOUT_S,
    LaunchSettings,
    LaunchSpec,
)
from xpupool.server.schemas.agent_protocol import DeviceAssignment

JsonObj = dict[str, object]


@dataclass(frozen=True, slots=True)
class SpecFile:
    """What a supervisor needs: the back end to use, its settings, the spec, and the grace
    period between SIGTERM and SIGKILL when the lease ends (the server counts on it)."""

    backend: str
    settings: LaunchSettings
    spec: LaunchSpec
    lease_grace_s: float


def _plan(p: CgroupPlan | None) -> JsonObj | None:
    if p is None:
        return None
    return {
        "version": p.version,
        "memory_dir": str(p.memory_dir),
        "cpu_dir": str(p.cpu_dir),
        "memory_bytes": p.memory_bytes,
        "cpu_quota_us": p.cpu_quota_us,
        "cpu_period_us": p.cpu_period_us,
        "pids_dir": None if p.pids_dir is None else str(p.pids_dir),
        "freezer_dir": None if p.freezer_dir is None else str(p.freezer_dir),
        "pids_max": p.pids_max,
    }


def _path_or_none(value: object) -> Path | None:
    return None if value is None else Path(str(value))


def _plan_back(d: object) -> CgroupPlan | None:
    if not isinstance(d, dict):
        return None
    return CgroupPlan(
        version=int(d["version"]),
        memory_dir=Path(d["memory_dir"]),
        cpu_dir=Path(d["cpu_dir"]),
        memory_bytes=int(d["memory_bytes"]),
        cpu_quota_us=int(d["cpu_quota_us"]),
        cpu_period_us=int(d["cpu_period_us"]),
        # absent in a file an older agent wrote (a run it left, adopted after an upgrade)
        pids_dir=_path_or_none(d.get("pids_dir")),
        freezer_dir=_path_or_none(d.get("freezer_dir")),
        pids_max=int(d.get("pids_max", 0)),
    )


def _host_back(cg: list[object]) -> CgroupHost:
    host = CgroupHost(int(str(cg[0])), Path(str(cg[1])), Path(str(cg[2])))
    if len(cg) >= 6:  # an older agent's file has the first three only
        host = CgroupHost(
            host.version,
            host.memory_base,
            host.cpu_base,
            _path_or_none(cg[3]),
            _path_or_none(cg[4]),
            int(str(cg[5])),
        )
    return host


def _runtime_config(c: RuntimeConfig) -> JsonObj:
    return {
        "runtime": c.runtime,
        "global_args": list(c.global_args),
        "run_args": list(c.run_args),
        "notes": list(c.notes),
        "override": c.override,
        "pids_limit": c.pids_limit,
    }


def _runtime_config_back(d: object) -> RuntimeConfig:
    if not isinstance(d, dict):  # a file an older agent wrote: the engine's defaults
        return RuntimeConfig()
    return RuntimeConfig(
        runtime=str(d["runtime"]),
        global_args=tuple(str(a) for a in d["global_args"]),
        run_args=tuple(str(a) for a in d["run_args"]),
        notes=tuple(str(a) for a in d["notes"]),
        override=str(d["override"]),
        pids_limit=int(d["pids_limit"]),
    )


def _ports_back(d: object) -> PortRange:
    if not isinstance(d, list) or len(d) != 2:  # a file an older agent wrote
        return PortRange.parse(DEFAULT_PORTS)
    return PortRange(int(d[0]), int(d[1]))


def dumps(f: SpecFile) -> bytes:
    s, sp = f.settings, f.spec
    settings: JsonObj = {
        "job_root": str(s.job_root),
        "uid_range": None if s.uid_range is None else [s.uid_range.first, s.uid_range.last],
        "log_cap_bytes": s.log_cap_bytes,
        "log_reserve_bytes": s.log_reserve_bytes,
        "cgroups": None
        if s.cgroups is None
        else [
            s.cgroups.version,
            str(s.cgroups.memory_base),
            str(s.cgroups.cpu_base),
            None if s.cgroups.pids_base is None else str(s.cgroups.pids_base),
            None if s.cgroups.freezer_base is None else str(s.cgroups.freezer_base),
            s.cgroups.pids_max,
        ],
        "sandbox": s.sandbox,
        "runtime": s.runtime,
        "runtime_cdi": s.runtime_cdi,
        "device_root": str(s.device_root),
        "private_paths": [str(p) for p in s.private_paths],
        "base_path": s.base_path,
        "lang": s.lang,
        "private_view": s.private_view,
        "hide_processes": s.hide_processes,
        "runtime_config": _runtime_config(s.runtime_config),
        "network": s.network,
        "allowed_networks": list(s.allowed_networks),
        "ports": [s.ports.first, s.ports.last],
        "pull_timeout_s": s.pull_timeout_s,
    }
    spec: JsonObj = {
        "job_id": sp.job_id,
        "replica": sp.replica,
        "allocation_id": sp.allocation_id,
        "node": sp.node,
        "tenant": sp.tenant,
        "argv": list(sp.argv),
        "image": sp.image,
        "env": dict(sp.env),
        "uid": sp.uid,
        "gid": sp.gid,
        "workdir": str(sp.workdir),
        "cpu_milli": sp.cpu_milli,
        "memory_mib": sp.memory_mib,
        "devices": [d.model_dump(mode="json") for d in sp.devices],
        "log_path": str(sp.log_path),
        "log_cap_bytes": sp.log_cap_bytes,
        "cgroup": _plan(sp.cgroup),
        "limits": sp.limits,
        "run_id": sp.run_id,
        "log_reserve_bytes": sp.log_reserve_bytes,
        "tmpfs_bytes": sp.tmpfs_bytes,
        "ports": list(sp.ports),
        "container_port": sp.container_port,
        "secrets_dir": sp.secrets_dir,
        "secret_env": [list(p) for p in sp.secret_env],  # names only, never a value
        "volumes": [list(v) for v in sp.volumes],
        "pull": sp.pull,
        "network": sp.network,
        "pull_auth": sp.pull_auth,  # a path on the memory filesystem, never the credentials
    }
    body = {
        "backend": f.backend,
        "settings": settings,
        "spec": spec,
        "lease_grace_s": f.lease_grace_s,
    }
    return json.dumps(body).encode()


def loads(data: bytes) -> SpecFile:
    """Raises ValueError (or KeyError/TypeError) on a file this module did not write."""
    body = json.loads(data)
    s, sp = body["settings"], body["spec"]
    uid_range = s["uid_range"]
    cg = s["cgroups"]
    settings = LaunchSettings(
        job_root=Path(s["job_root"]),
        uid_range=None if uid_range is None else UidRange(int(uid_range[0]), int(uid_range[1])),
        log_cap_bytes=int(s["log_cap_bytes"]),
        log_reserve_bytes=int(s.get("log_reserve_bytes", 0)),  # 0: a file from before it
        cgroups=None if cg is None else _host_back(cg),
        sandbox=str(s["sandbox"]),
        runtime=s["runtime"],
        runtime_cdi=bool(s["runtime_cdi"]),
        device_root=Path(s["device_root"]),
        private_paths=tuple(Path(p) for p in s["private_paths"]),
        base_path=str(s["base_path"]),
        lang=str(s["lang"]),
        # absent in a file an older agent wrote: its replicas ran in the agent's namespace
        private_view=bool(s.get("private_view", False)),
        hide_processes=bool(s.get("hide_processes", False)),
        runtime_config=_runtime_config_back(s.get("runtime_config")),
        # absent in a file an older agent wrote: its containers had no network options
        network=str(s.get("network", "bridge")),
        allowed_networks=tuple(str(n) for n in s.get("allowed_networks", ())),
        ports=_ports_back(s.get("ports")),
        pull_timeout_s=float(s.get("pull_timeout_s", DEFAULT_PULL_TIMEOUT_S)),
    )
    spec = LaunchSpec(
        job_id=int(sp["job_id"]),
        replica=int(sp["replica"]),
        allocation_id=int(sp["allocation_id"]),
        node=str(sp["node"]),
        tenant=str(sp["tenant"]),
        argv=tuple(str(a) for a in sp["argv"]),
        image=sp["image"],
        env={str(k): str(v) for k, v in cast(dict[str, str], sp["env"]).items()},
        uid=sp["uid"],
        gid=sp["gid"],
        workdir=Path(sp["workdir"]),
        cpu_milli=int(sp["cpu_milli"]),
        memory_mib=int(sp["memory_mib"]),
        devices=tuple(DeviceAssignment.model_validate(d) for d in sp["devices"]),
        log_path=Path(sp["log_path"]),
        log_cap_bytes=int(sp["log_cap_bytes"]),
        cgroup=_plan_back(sp["cgroup"]),
        limits=str(sp["limits"]),
        run_id=str(sp["run_id"]),
        log_reserve_bytes=int(sp.get("log_reserve_bytes", 0)),
        tmpfs_bytes=int(sp.get("tmpfs_bytes", 0)),
        ports=tuple(int(p) for p in sp.get("ports", ())),
        container_port=int(sp.get("container_port", 0)),
        secrets_dir=str(sp.get("secrets_dir", "")),
        secret_env=tuple((str(v), str(n)) for v, n in sp.get("secret_env", ())),
        volumes=tuple((str(h), str(t), bool(ro)) for h, t, ro in sp.get("volumes", ())),
        pull=str(sp.get("pull", DEFAULT_PULL_POLICY)),
        network=str(sp.get("network", "")),
        pull_auth=str(sp.get("pull_auth", "")),  # absent: written before pull policies
    )
    return SpecFile(str(body["backend"]), settings, spec, float(body["lease_grace_s"]))
