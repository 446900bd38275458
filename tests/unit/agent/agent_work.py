"""Work items as the server would hand them, for the agent's unit tests."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from xpupool.agent.launch import LaunchSettings
from xpupool.agent.runner import Replica, Runner
from xpupool.server.schemas.agent_protocol import DeviceAssignment, ReplicaAssignment, Work


def settings(tmp_path: Path, **kwargs: object) -> LaunchSettings:
    """Launch settings for a test: working directories under ``tmp_path`` (not the system's)."""
    return LaunchSettings(job_root=tmp_path / "jobs", **kwargs)  # type: ignore[arg-type]


def device(
    index: int,
    vendor: str = "nvidia",
    memory_mib: int = 81920,
    core_permille: int = 1000,
    card_memory_mib: int = 81920,
) -> DeviceAssignment:
    return DeviceAssignment(
        uuid=f"{vendor}-{index}",
        index=index,
        vendor=vendor,
        model="card",
        memory_mib=memory_mib,
        core_permille=core_permille,
        card_memory_mib=card_memory_mib,
    )


def work(
    command: list[str],
    *,
    job_id: int = 7,
    replica: int = 0,
    allocation_id: int = 1,
    devices: list[DeviceAssignment] | None = None,
    image: str | None = None,
    env: dict[str, str] | None = None,
    node: str = "n1",
    tenant: str = "t1",
    tenant_index: int | None = 0,
    cpu_milli: int = 1000,
    memory_mib: int = 1024,
) -> Work:
    return Work(
        job_id=job_id,
        replica=replica,
        name="t",
        command=command,
        image=image,
        env=env or {},
        tenant=tenant,
        tenant_index=tenant_index,
        assignment=ReplicaAssignment(
            replica=replica,
            allocation_id=allocation_id,
            node=node,
            cpu_milli=cpu_milli,
            memory_mib=memory_mib,
            devices=devices or [],
        ),
    )


def poll_until(check: Callable[[], bool], runner: Runner, timeout_s: float = 20.0) -> None:
    """Poll ``runner`` (as the agent loop does) until ``check`` holds; fail after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        runner.poll()
        if check():
            return
        time.sleep(0.02)
    raise AssertionError("timed out")


def started(rep: Replica | None, runner: Runner) -> Replica:
    """``rep`` once its supervisor has started it (or could not): its pid known."""
    assert rep is not None
    poll_until(lambda: not rep.starting, runner)
    return rep


HOLD = "import sys, time; f = open(sys.argv[1], 'rb'); print('go', flush=True); time.sleep(30)"


def stand_ins(root: Path, **nodes: str) -> Path:
    """A device root whose entries (``davinci0="/dev/zero"``; ``__`` for ``/``) link to real
    character devices: the watch reads the ``st_rdev`` of the link's target."""
    for name, target in nodes.items():
        link = root / name.replace("__", "/")
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(target)
    return root
